"""A webhook receiver on a local port (a threaded `http.server`), as an agent would run one: it
verifies each POST with the `standardwebhooks` library itself and answers by a script.

`Receiver(secret, script)`: each POST gets the next answer of `script`, then 200 once it is used up:
an `int` status; `(status, {header: value})`; `HANG` (no answer until the receiver stops, so the
sender's timeout or its death ends it); `("slow", seconds)` (200 after `seconds`). `received` lists
every POST as `Received`, in arrival order.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from standardwebhooks import Webhook

HANG = "hang"
Answer = int | str | tuple[Any, ...]


@dataclass(frozen=True)
class Received:
    """One POST: its Standard Webhooks headers, its body, and what verification said (`verified`:
    the JSON the library returned, or None with its `error`)."""

    webhook_id: str | None
    timestamp: str | None
    signature: str | None
    body: bytes
    verified: Any
    error: str | None


class Receiver:
    """A webhook receiver serving on `url` until `stop` (or the end of a `with`)."""

    def __init__(self, secret: str, script: list[Answer] | None = None) -> None:
        self.signer = Webhook(secret)
        self.script = list(script or [])
        self.received: list[Received] = []
        self.released = threading.Event()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/decisions"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def take(self, headers: dict[str, str], body: bytes) -> Answer:
        """Verify and keep one POST; the answer it gets."""
        try:
            verified, error = self.signer.verify(body, headers), None
        except Exception as exc:  # the library raises ValueError too for a malformed header
            verified, error = None, f"{type(exc).__name__}: {exc}"
        got = Received(
            headers.get("webhook-id"),
            headers.get("webhook-timestamp"),
            headers.get("webhook-signature"),
            body,
            verified,
            error,
        )
        with self._lock:
            self.received.append(got)
            return self.script.pop(0) if self.script else 200

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            answer = receiver.take({k.lower(): v for k, v in self.headers.items()}, body)
            headers: dict[str, str] = {}
            if answer == HANG:
                receiver.released.wait()
                return
            if isinstance(answer, tuple) and answer[0] == "slow":
                receiver.released.wait(answer[1])
                answer = 200
            if isinstance(answer, tuple):
                answer, headers = answer
            self.send_response(int(answer))
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler
