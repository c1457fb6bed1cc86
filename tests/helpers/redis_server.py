"""A redis-server of the tests' own: the session's `redis_server` fixture, and `countersign run`'s."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from redis import Redis

from countersign.ports import free_port

from . import wait_for


class RedisServer:
    """A redis-server of the tests' own on a free port, with nothing saved to disk."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait until it answers PING."""
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (make install installs it)"
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches pytest alone, which stops it (`stop`)
        )
        client = Redis.from_url(self.url)
        wait_for(lambda: _pings(client), what="redis-server to answer")

    def stop(self) -> None:
        """Kill the server (SIGKILL: crash tests want the abrupt kind)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    @contextmanager
    def down(self) -> Iterator[None]:
        """The server killed for the block (connections refused: an outage), then started again
        on the same port, empty, as `redis-cli shutdown nosave` and a restart leave it."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The server stopped with SIGSTOP for the block (it answers nothing: a hung Redis), then
        resumed with SIGCONT."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.process.send_signal(signal.SIGCONT)


def _pings(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False
