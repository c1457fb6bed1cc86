"""The whole ASGI app of `countersign web` (the `/v1` API, and the Slack app mounted under it)
served by uvicorn on a free port, with the sandbox's clicks sent to it; and API tokens."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from countersign.api import create_api
from countersign.bot.web import create_wsgi
from countersign.ports import free_port
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store.tokens import Tokens
from tests.helpers import wait_for


@pytest.fixture
def web(runtime: Runtime, sandbox: tuple[Sandbox, str]) -> Iterator[str]:
    """The app over real HTTP (uvicorn, as in a gunicorn uvicorn worker); yields its base URL."""
    app = create_api(runtime, slack=create_wsgi(runtime))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, what="uvicorn to start")
    url = f"http://127.0.0.1:{server.config.port}"
    sandbox[0].interactivity_url = url + "/slack/events"
    yield url
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def tokens(runtime: Runtime) -> Tokens:
    return Tokens(runtime.store.engine)


@pytest.fixture
def agent(web: str, tokens: Tokens) -> Iterator[httpx.Client]:
    """An HTTP client with the refund agent's token (requester `refund-agent`, `issue_refund`)."""
    secret = tokens.create_token("refund-agent", ["issue_refund"]).secret
    with httpx.Client(base_url=web, headers={"Authorization": f"Bearer {secret}"}, timeout=90) as client:
        yield client
