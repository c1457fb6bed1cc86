"""`countersign web`: the WSGI app under gunicorn with threaded workers.

Each gunicorn worker builds its own app after the fork (no connection is shared across
processes). Threads matter: Bolt answers Slack at `ack()` and finishes the listener on a thread of
the same worker (https://docs.slack.dev/tools/bolt-python/concepts/acknowledge).

The installation the bot serves is asked of Slack once, before gunicorn starts, so that a bad token or
an unreachable Slack stops the command with one line instead of failing every worker's boot.
"""

from __future__ import annotations

from typing import Any

from gunicorn.app.base import BaseApplication

from ..config import Settings
from ..router.runtime import slack_at_start
from . import guard

THREADS_PER_WORKER = 8


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, options: dict[str, Any], ours: guard.Installation) -> None:
        self.options = options
        self.ours = ours
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        from .web import create_wsgi

        return create_wsgi(ours=self.ours)


def serve(settings: Settings, workers: int = 2, host: str = "0.0.0.0") -> None:
    """Serve `POST /slack/events` and `GET /healthz` on `PORT` until stopped, gunicorn logging at
    `COUNTERSIGN_LIBRARY_LOG_LEVEL` (its access log only at INFO and below). Raises `ConfigError`
    before serving when Slack refuses the token or does not answer (`slack_at_start`)."""
    with slack_at_start(settings) as slack:
        ours = guard.installation(slack)
    _Gunicorn(
        {
            "bind": f"{host}:{settings.PORT}",
            "workers": workers,
            "threads": THREADS_PER_WORKER,
            "worker_class": "gthread",
            "timeout": 30,
            "graceful_timeout": 10,
            "loglevel": settings.COUNTERSIGN_LIBRARY_LOG_LEVEL.lower(),
            "accesslog": "-" if settings.COUNTERSIGN_LIBRARY_LOG_LEVEL in ("DEBUG", "INFO") else None,
        },
        ours,
    ).run()
