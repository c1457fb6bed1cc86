"""The whole ASGI app of `countersign web` (the `/v1` API, and the Slack app mounted under it)
served by uvicorn on a free port, with the sandbox's clicks sent to it; and API tokens."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store.tokens import Tokens
from tests.helpers import agent as test_agent
from tests.helpers.api import served


@pytest.fixture
def web(runtime: Runtime, sandbox: tuple[Sandbox, str]) -> Iterator[str]:
    """`served(runtime)`, the sandbox's clicks sent to it."""
    with served(runtime) as url:
        sandbox[0].interactivity_url = url + "/slack/events"
        yield url


@pytest.fixture
def tokens(runtime: Runtime) -> Tokens:
    return Tokens(runtime.store.engine)


@pytest.fixture
def agent(web: str, tokens: Tokens) -> Iterator[httpx.Client]:
    """An HTTP client with the refund agent's token (requester `refund-agent`, `issue_refund`, resume
    queue the test agent's)."""
    secret = tokens.create_token("refund-agent", ["issue_refund"], [test_agent.QUEUE]).secret
    with httpx.Client(base_url=web, headers={"Authorization": f"Bearer {secret}"}, timeout=90) as client:
        yield client
