"""Cards sent to a person rather than a channel: a policy's `channel: U…` and the fallback to a
single approver's DM. Slack posts them in the bot's DM with that person and answers the DM's `D…`
id; every later call on the card (the rewrite after a click, the look-up after a crash, ephemeral
answers) must use that id, since Slack refuses the user id there (the sandbox does too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import update

from countersign.agent import ApprovalClient
from countersign.router import timeouts
from countersign.router.cards import APPROVE_ACTION, DETAILS_ACTION
from countersign.router.delivery import post_card
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from countersign.store.models import ApprovalRequest, utcnow_plus
from tests.helpers import drain, wait_for
from tests.helpers.builders import age, buttons, decidable, edited_card, refund, status

POLICY = """\
version: 4
defaults:
  channel: C0APPROVALS
  approvers: {users: [U0LEAD]}
actions:
  issue_refund:
    channel: U0LEAD               # a user id: the card goes to lee.lead's DM
    timeout: 4h
    on_timeout: escalate
    escalate: [{channel: C0FINLEADS, approvers: {users: [U0LEAD]}, timeout: 24h, on_timeout: deny}]
    reminders: [1h]
  send_email:
    channel: C0GONE               # a channel Slack cannot find: the card falls back to the approver's DM
    approvers: {users: [U0ALICE]}
"""


@pytest.fixture
def dm_policy(policy_file: Path) -> Path:
    policy_file.write_text(POLICY)
    return policy_file


def only_card(sb: Sandbox, request_id: str) -> dict[str, Any]:
    """The one message in the workspace that is the card of `request_id`."""
    [card] = [m for m in sb.messages() if request_id in str(m["blocks"])]
    return card


def decided_by_click(sb: Sandbox, card: dict[str, Any], user: str) -> dict[str, Any]:
    """Approve `card` as `user` through the sandbox and the bot; the card once rewritten."""
    assert sb.click(card["channel"], card["ts"], APPROVE_ACTION, user)[0] == 200
    done = rewritten(sb, card)
    assert buttons(done) == [DETAILS_ACTION]
    return done


def rewritten(sb: Sandbox, card: dict[str, Any]) -> dict[str, Any]:
    """`card` once the bot has rewritten it, with no Approve / Reject / Edit left."""
    done = wait_for(lambda: edited_card(sb, card["ts"]), what="the card to be rewritten")
    assert not decidable(done)
    return done


def double_click(sb: Sandbox, card: dict[str, Any], user: str) -> dict[str, Any]:
    """Approve `card` as `user`, then click again as on a card that had not refreshed yet; the
    ephemeral answer to the second click."""
    click = sb.click_payload(card["channel"], card["ts"], APPROVE_ACTION, user)
    sb.send_signed(click)
    rewritten(sb, card)
    sb.send_signed(click)
    [answer] = wait_for(lambda: sb.ephemerals(user), what="the ephemeral answer")
    return answer


def test_a_card_sent_to_a_user_id_is_rewritten_after_the_click(
    dm_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id = client.request(refund())
    drain(redis)
    card = only_card(sb, request_id)
    assert card["channel"].startswith("D")  # lee.lead's DM with the bot
    assert "Approved by <@U0LEAD>" in str(decided_by_click(sb, card, "U0LEAD")["blocks"])
    assert status(store, request_id) == "approved"


def test_a_card_rerouted_to_the_only_approvers_dm_is_rewritten_after_the_click(
    dm_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    sb.inject("chat.postMessage", error="channel_not_found")  # C0GONE
    request_id = client.request(refund(action="send_email", payload={"to": "a@b.c"}))
    drain(redis)
    card = only_card(sb, request_id)
    assert card["channel"].startswith("D")  # alice's DM with the bot
    decided_by_click(sb, card, "U0ALICE")
    assert status(store, request_id) == "approved"


def test_a_second_click_in_a_dm_is_answered_in_the_dm(
    dm_policy: Path, client: ApprovalClient, redis: Redis, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id = client.request(refund())
    drain(redis)
    card = only_card(sb, request_id)
    answer = double_click(sb, card, "U0LEAD")
    assert answer["channel"] == card["channel"] and "already" in answer["text"]


def test_a_reminder_is_a_reply_in_the_dm_and_an_escalation_rewrites_the_dm_card(
    dm_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    sb, _ = sandbox
    request_id = client.request(refund())
    drain(redis)
    card = only_card(sb, request_id)
    age(store, request_id, next_reminder_at=-1)
    timeouts.sweep(runtime)
    [reminder] = [m for m in sb.messages(card["channel"]) if m["thread_ts"] == card["ts"]]
    assert "Reminder for <@U0LEAD>" in reminder["text"]
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    assert "escalated to <#C0FINLEADS>" in str(rewritten(sb, card)["blocks"])


def test_a_dm_card_posted_before_a_crash_is_found_not_posted_twice(
    dm_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    sb, _ = sandbox
    request_id = client.request(refund())
    drain(redis)
    card = only_card(sb, request_id)
    # a crash after chat.postMessage and before the card was stored: the request still names the
    # policy's user id, and the posting lease has run out
    with store.engine.begin() as connection:
        connection.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == request_id)
            .values(channel="U0LEAD", card_ts=None, card_lease_until=utcnow_plus(-1))
        )
    redis.delete("countersign:pace:U0LEAD")  # more than a second later, as a retry would be
    assert post_card(runtime, store.get(request_id)) == "found"  # type: ignore[arg-type]
    assert only_card(sb, request_id) == card
    row = store.get(request_id)
    assert row is not None and (row.channel, row.card_ts) == (card["channel"], card["ts"])


def test_a_card_stored_under_the_user_id_is_still_rewritten_and_answered_in_the_dm(
    dm_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id = client.request(refund())
    drain(redis)
    with store.engine.begin() as connection:  # as a request posted before the DM's id was kept
        connection.execute(
            update(ApprovalRequest).where(ApprovalRequest.id == request_id).values(channel="U0LEAD")
        )
    card = only_card(sb, request_id)
    assert double_click(sb, card, "U0LEAD")["channel"] == card["channel"]
