"""TCP ports on this machine: finding a free one and telling whether one is taken."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def port_is_free(host: str, port: int) -> bool:
    """True if a TCP server could bind `host:port` now."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on `host:port` now."""
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) == 0
