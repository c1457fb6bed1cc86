"""A reviewer's action while Redis is down: the database commits the decision, so the reviewer is
told it is recorded (never that nothing changed), and the relay sweep publishes the agent's resume
from the outbox once Redis answers again, on every surface (card, modal, Home tab); with Slack
unreachable too, the card sweep rewrites the card once Slack answers."""

from __future__ import annotations

import logging

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import relay, timeouts
from countersign.router.cards import APPROVE_ACTION, DETAILS_ACTION, EDIT_ACTION
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, drain, wait_for
from tests.helpers.builders import age, card_at, decidable, edited_card, post_card, refresh_due, status
from tests.helpers.faults import ServedSandbox
from tests.helpers.modals import open_view
from tests.helpers.redis_server import RedisServer

RESUME = {"queue": agent.QUEUE, "func": agent.EXECUTE_FUNC}
NOTHING_CHANGED = "nothing changed"
RECORDED = "Your decision is recorded"


def _answers(sb: Sandbox, user: str, dm: str) -> list[str]:
    return [e["text"] for e in sb.ephemerals(user)] + [m["text"] for m in sb.messages(dm)]


def _said_recorded(told: list[str]) -> None:
    """The reviewer was told the decision is recorded, and never that nothing changed."""
    assert not [text for text in told if NOTHING_CHANGED in text], told
    assert any(RECORDED in text for text in told), told


def _published_once_redis_is_back(store: Store, redis: Redis, request_id: str, amount: str) -> None:
    """Redis is back, empty: the outbox still holds the decision, and the sweep publishes it."""
    assert [event.request_id for event in store.unpublished()] == [request_id]
    assert relay.sweep(store, redis) == 1
    drain(redis, agent.QUEUE)
    assert agent.executed(redis) == [{"amount": amount, "currency": "USD"}]


def test_an_approval_clicked_while_redis_is_down_is_recorded_and_said_so(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    redis_server: RedisServer,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, resume=RESUME)
    with redis_server.down():
        assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")[0] == 200
        told = wait_for(lambda: _answers(sb, "U0LEAD", "D0LEAD"), what="the reviewer's answer")
        assert status(store, request_id) == "approved"
        assert wait_for(lambda: edited_card(sb, card["ts"]), what="the card rewritten all the same")
    _said_recorded(told)
    _published_once_redis_is_back(store, redis, request_id, "120.00")


def test_an_edit_submitted_while_redis_is_down_is_recorded_and_said_so(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    redis_server: RedisServer,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, resume=RESUME)
    form = open_view(sb, card, EDIT_ACTION, "U0ALICE", "amount")
    block = next(b["block_id"] for b in form["view"]["blocks"] if b["type"] == "input")
    with redis_server.down():
        assert sb.submit_view(form["id"], "U0ALICE", {block: "99.00"})[0] == 200
        told = wait_for(lambda: _answers(sb, "U0ALICE", "D0ALICE"), what="the reviewer's DM")
        assert status(store, request_id) == "approved"
    _said_recorded(told)
    _published_once_redis_is_back(store, redis, request_id, "99.00")


def test_an_approval_from_home_while_redis_is_down_is_recorded_and_said_so(
    client: ApprovalClient,
    redis: Redis,
    runtime: Runtime,
    redis_server: RedisServer,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb, resume=RESUME)
    assert sb.open_home("U0ALICE") == (200, "")
    wait_for(lambda: request_id in str(sb.home("U0ALICE")), what="U0ALICE's Home listing the request")
    with redis_server.down():
        assert sb.click_home("U0ALICE", f"decide-{request_id}", APPROVE_ACTION) == (200, "")
        told = wait_for(lambda: _answers(sb, "U0ALICE", "D0ALICE"), what="the reviewer's DM")
        assert status(runtime.store, request_id) == "approved"
    _said_recorded(told)
    _published_once_redis_is_back(runtime.store, redis, request_id, "120.00")


def test_an_approval_while_redis_and_slack_are_down_is_recorded_and_its_card_fixed_later(
    client: ApprovalClient,
    redis: Redis,
    runtime: Runtime,
    redis_server: RedisServer,
    sandbox_server: ServedSandbox,
    bot: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Neither the answer nor the card reaches Slack (connections refused): the vote stands, nothing
    raises after the commit (the reviewer is never told nothing changed), and the card's rewrite is
    left to the card sweep, which makes it once Slack answers; the relay publishes the resume."""
    sb, store = sandbox_server.sb, runtime.store
    request_id, card = post_card(client, redis, sb, resume=RESUME)
    open_view(sb, card, DETAILS_ACTION, "U0LEAD", None)  # Bolt has checked its token (auth.test) by now
    with redis_server.down(), sandbox_server.down(), caplog.at_level(logging.WARNING):
        assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")[0] == 200
        wait_for(lambda: refresh_due(store, request_id), what="the card's rewrite left to the sweep")
        assert status(store, request_id) == "approved"
    assert not [m for m in caplog.messages if "failed after the ack" in m], caplog.messages
    assert decidable(card_at(sb, card["ts"])) and _answers(sb, "U0LEAD", "D0LEAD") == []
    _published_once_redis_is_back(store, redis, request_id, "120.00")
    age(store, request_id, card_refresh_due_at=-1)
    timeouts.sweep(runtime)
    assert not decidable(card_at(sb, card["ts"])) and not refresh_due(store, request_id)
    assert "Approved by <@U0LEAD>" in str(card_at(sb, card["ts"])["blocks"])
