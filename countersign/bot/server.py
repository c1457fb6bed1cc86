"""`countersign web`: the ASGI app (`api.create_api`: the `/v1` HTTP API, with the Slack WSGI app of
`bot/web.py` mounted for `/slack/events` and `/healthz`) under gunicorn with uvicorn workers
(`uvicorn-worker`, the maintained gunicorn worker class of the uvicorn project).

Each gunicorn worker builds its own app after the fork (no connection is shared across
processes). An asyncio worker lets a long poll of the API wait on Redis without holding a thread;
the Slack app runs on a2wsgi's threads, as many as a gthread worker had. Threads matter: Bolt answers
Slack at `ack()` and finishes the listener on a thread of the same worker
(https://docs.slack.dev/tools/bolt-python/concepts/acknowledge).

The installation the bot serves is asked of Slack once, before gunicorn starts, so that a bad token or
an unreachable Slack stops the command with one line instead of failing every worker's boot.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from gunicorn.app.base import BaseApplication
from uvicorn_worker import UvicornWorker

from ..config import Settings
from ..heap import freeze_loaded
from ..router.runtime import slack_at_start
from . import guard


class Worker(UvicornWorker):  # type: ignore[misc]
    """uvicorn's gunicorn worker, ending with status 0 when asked to stop (SIGTERM, SIGINT).

    uvicorn shuts down on the signal, then raises it again so that a lone server ends as signalled;
    gunicorn's master logs a worker that ended by a signal as an error ("Worker (pid:…) was sent
    SIGTERM!", https://github.com/benoitc/gunicorn/issues/3050), at every stop. Here the signal
    raised again ends the worker as a normal exit instead: at once (`os._exit`), since uvicorn has
    shut down by then, and a `SystemExit` raised wherever the signal landed (an event loop callback,
    a thread's join) would be printed as a traceback instead of ending the process.

    uvicorn's `init_signals` first resets every signal to its default, which for SIGTERM and SIGINT
    ends the process by the signal; a stop that lands there, as the worker boots (`countersign run`
    signals the web process group, the master and its booting worker at once), would be that error
    again. So both are blocked (`pthread_sigmask`) until the handlers are in place: one that came
    meanwhile is delivered then, to `_exit_normally`.
    """

    def init_signals(self) -> None:
        stops = {signal.SIGTERM, signal.SIGINT}
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            super().init_signals()
            for stop in stops:
                signal.signal(stop, _exit_normally)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _exit_normally(_signum: int, _frame: object) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


WORKER_CLASS = f"{__name__}.Worker"


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, options: dict[str, Any], ours: guard.Installation) -> None:
        self.options = options
        self.ours = ours
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        from ..api import create_api
        from .web import create_wsgi

        app = create_api(slack=create_wsgi(ours=self.ours))
        freeze_loaded()  # this worker's modules and app, out of the full collections' reach
        return app


def serve(settings: Settings, workers: int = 2, host: str = "0.0.0.0") -> None:
    """Serve `POST /slack/events`, `GET /healthz` and the `/v1` API on `PORT` until stopped,
    gunicorn logging at `COUNTERSIGN_LIBRARY_LOG_LEVEL` (its access log only at INFO and below).
    Raises `ConfigError` before serving when Slack refuses the token or does not answer (`slack_at_start`)."""
    with slack_at_start(settings) as slack:
        ours = guard.installation(slack)
    _Gunicorn(
        {
            "bind": f"{host}:{settings.PORT}",
            "workers": workers,
            "worker_class": WORKER_CLASS,
            "timeout": 30,
            "graceful_timeout": 10,
            "loglevel": settings.COUNTERSIGN_LIBRARY_LOG_LEVEL.lower(),
            "accesslog": "-" if settings.COUNTERSIGN_LIBRARY_LOG_LEVEL in ("DEBUG", "INFO") else None,
        },
        ours,
    ).run()
