"""Fixtures of the sandbox tests: a sandbox on a fake clock served over HTTP, a slack_sdk client on
its Web API, a stand-in bot as its Request URL, and fresh trigger_ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from slack_sdk import WebClient

from countersign.sandbox import Sandbox, SandboxServer, serve

from .builders import CHANNEL, SECRET, card
from .harness import FakeClock, Receiver


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sb(clock: FakeClock) -> Sandbox:
    return Sandbox(SECRET, clock=clock)


@pytest.fixture
def server(sb: Sandbox) -> Iterator[SandboxServer]:
    running = serve(sb)
    yield running
    running.shutdown()


@pytest.fixture
def client(server: SandboxServer) -> WebClient:
    return WebClient(token="xoxb-sandbox-test", base_url=server.url + "/api/")


@pytest.fixture
def receiver(sb: Sandbox) -> Iterator[Receiver]:
    bot = Receiver(SECRET)
    sb.interactivity_url = bot.url
    yield bot
    bot.close()


@pytest.fixture
def trigger(client: WebClient, sb: Sandbox) -> Callable[..., str]:
    """Issue a fresh trigger_id for a user, as a click on a card would (no bot needed: build only)."""
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    return lambda user="U0ALICE": sb.click_payload(CHANNEL, ts, "approve", user)["trigger_id"]
