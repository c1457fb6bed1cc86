"""The ASGI app of `countersign web` (`api.create_api`, the Slack app mounted in it) served by uvicorn
on a free port in a thread of the test process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from countersign.api import create_api
from countersign.bot.web import create_wsgi
from countersign.ports import free_port
from countersign.router.runtime import Runtime
from tests.helpers import wait_for


@contextmanager
def served(runtime: Runtime) -> Iterator[str]:
    """The app on `runtime` over real HTTP (uvicorn, as in a gunicorn uvicorn worker); yields its
    base URL."""
    app = create_api(runtime, slack=create_wsgi(runtime))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, what="uvicorn to start")
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(10)
