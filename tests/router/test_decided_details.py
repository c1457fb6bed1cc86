"""A decided card keeps one button, Details, and its modal keeps the record: the verdict, every
voter, the time in UTC and the reviewer's reason in full, for anyone who sees the card (the rule of
a pending card's Details). Driven as a reviewer would: signed clicks through the sandbox to the bot,
on the cards and views the sandbox holds (which it checks against Slack's limits)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from slack_sdk import WebClient

from countersign.agent import ApprovalClient
from countersign.router import cards, details, timeouts
from countersign.router.cards import APPROVE_ACTION, DETAILS_ACTION, REASON_BLOCK, REJECT_ACTION
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox, limits
from countersign.store import Store
from tests.helpers import wait_for
from tests.helpers.builders import age, buttons, decidable, events, post_card, request, status
from tests.helpers.modals import open_view

REASON = "\n".join(f"line {n}: the customer was charged once" for n in range(1, 21))  # 20 lines
VOTERS = [{"slack_user_id": "U0LEAD", "name": "lee"}, {"slack_user_id": "U0ALICE", "name": "alice"}]


def decided(sb: Sandbox, card: dict[str, Any]) -> dict[str, Any]:
    """`card` as the sandbox holds it once rewritten to show a decision (no Approve / Reject / Edit)."""

    def current() -> dict[str, Any] | None:
        found = next(m for m in sb.messages(card["channel"]) if m["ts"] == card["ts"])
        return None if decidable(found) else found

    return wait_for(current, what="the card to show the decision")


def details_text(sb: Sandbox, card: dict[str, Any], user: str) -> str:
    """Press the decided card's Details as `user`; the text of the modal it opens."""
    view = open_view(sb, card, DETAILS_ACTION, user, None)["view"]
    assert view["close"]["text"] == "Close" and view["submit"] is None  # read-only
    return "\n".join(b["text"]["text"] for b in view["blocks"] if "text" in b)


def utc(store: Store, request_id: str) -> str:
    row = store.get(request_id)
    assert row is not None and row.decided_at is not None
    return row.decided_at.strftime("%Y-%m-%d %H:%M UTC")


def test_a_quorum_approved_card_keeps_details_which_name_every_voter(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, payload={"amount": "25000.00", "currency": "USD"})
    assert buttons(card) == [APPROVE_ACTION, REJECT_ACTION, DETAILS_ACTION]  # two approvals: no Edit
    for n, user in enumerate(("U0LEAD", "U0ALICE"), start=1):
        assert sb.click(card["channel"], card["ts"], APPROVE_ACTION, user)[0] == 200
        wait_for(lambda n=n: events(store, request_id).count("vote") == n, what=f"vote {n}")
    done = decided(sb, card)
    assert status(store, request_id) == "approved"
    assert buttons(done) == [DETAILS_ACTION]
    [details_button] = [e for b in done["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert details_button["value"] == request_id
    shown = details_text(sb, done, "U0MALLORY")  # not an approver: anyone who sees the card may read it
    assert f"✅ Approved by <@U0LEAD>, <@U0ALICE> at {utc(store, request_id)}" in shown
    assert "details_opened" not in [e.event for e in store.audit_trail(request_id)]  # counts pending only


def test_a_rejected_cards_details_show_the_reviewers_whole_reason(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    assert buttons(card) == [APPROVE_ACTION, REJECT_ACTION, DETAILS_ACTION]  # pending: unchanged
    view = open_view(sb, card, REJECT_ACTION, "U0LEAD", REASON_BLOCK)
    assert sb.submit_view(view["id"], "U0LEAD", {REASON_BLOCK: REASON})[0] == 200
    done = decided(sb, card)
    assert buttons(done) == [DETAILS_ACTION]
    on_card = next(b["text"]["text"] for b in done["blocks"] if b["block_id"].startswith("decided-why-"))
    assert on_card.endswith("line 8: the customer was charged once\n… 12 more lines: see Details")
    shown = details_text(sb, done, "U0MALLORY")
    assert f"Reviewer's reason: {REASON}" in shown
    assert f"⛔ Rejected by <@U0LEAD> at {utc(store, request_id)}" in shown


def test_an_expired_card_keeps_details_which_say_what_the_timeout_decided(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, "C0APPROVALS", action="send_email", confidence=0.5)
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    done = decided(sb, card)
    assert status(store, request_id) == "expired" and buttons(done) == [DETAILS_ACTION]
    shown = details_text(sb, done, "U0LEAD")
    expired = f"⏱ Expired at {utc(store, request_id)} with no decision: allowed to proceed (auto-proceeded)"
    assert expired in shown


@pytest.mark.parametrize("verdict", ["approved", "rejected", "expired"])
def test_a_decided_card_has_one_button_and_fits(sandbox: tuple[Sandbox, str], verdict: str) -> None:
    """Whatever the verdict, with the longest reason a reviewer can type: one actions block, one
    Details button, and the card and its Details within Slack's limits (as the sandbox checks them)."""
    slack = WebClient(token="xoxb-test", base_url=sandbox[1] + "/api/")
    row = request(status=verdict, decided_by=VOTERS[:1], decision_reason="x\n" * 1500)
    card = cards.decided_card(row)
    assert [b["type"] for b in card.blocks].count("actions") == 1
    assert buttons(card.message()) == [DETAILS_ACTION]
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]
    view = details.details_view(row)
    assert "".join(b["text"]["text"] for b in view["blocks"] if "text" in b).count("x\n") == 1500
    assert limits.check_view(view) == [] and len(json.dumps(view)) <= limits.MAX_VIEW_BYTES


def test_a_pending_requests_details_say_nothing_of_a_decision() -> None:
    view = json.dumps(details.details_view(request(decided_by=VOTERS)))
    assert '"decision"' not in view and "Reviewer's reason" not in view
