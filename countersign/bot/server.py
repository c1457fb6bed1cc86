"""`countersign web`: the WSGI app under gunicorn with threaded workers.

Each gunicorn worker builds its own app after the fork (no connection is shared across
processes). Threads matter: Bolt answers Slack at `ack()` and finishes the listener on a thread of
the same worker (https://docs.slack.dev/tools/bolt-python/concepts/acknowledge).
"""

from __future__ import annotations

from typing import Any

from gunicorn.app.base import BaseApplication

from ..config import Settings

THREADS_PER_WORKER = 8


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        from .web import create_wsgi

        return create_wsgi()


def serve(settings: Settings, workers: int = 2, host: str = "0.0.0.0") -> None:
    """Serve `POST /slack/events` and `GET /healthz` on `PORT` until stopped."""
    _Gunicorn(
        {
            "bind": f"{host}:{settings.PORT}",
            "workers": workers,
            "threads": THREADS_PER_WORKER,
            "worker_class": "gthread",
            "timeout": 30,
            "graceful_timeout": 10,
            "accesslog": "-",
        }
    ).run()
