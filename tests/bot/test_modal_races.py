"""The Edit modal when the request moves on while it is open, over real HTTP through the sandbox: an
earlier level's approver submitting after an escalation reads where it went in words, not ids (a
modal's inline error is plain text: Slack renders no mention there); two submits racing for one
request (two reviewers, or one reviewer in two tabs) end in one decision, and the loser is told
once which edit won (who, what value), inline or ephemerally."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import text

from countersign.agent import ApprovalClient
from countersign.router import review, timeouts
from countersign.router.cards import APPROVE_ACTION, EDIT_ACTION
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from countersign.store.engine import WRITE
from tests.helpers import wait_for
from tests.helpers.builders import age, escalating_policy, events, post_card, request, status
from tests.helpers.modals import open_view

EDIT_THEN_ESCALATE = escalating_policy(12, "[U0LEAD, U0BOB]")
ESCALATED_AWAY = (
    "This request was escalated to <@U0LEAD> or <@U0BOB> in <#C0FINLEADS>, who decide it now: you were an "
    "approver of an earlier level, so your action changed nothing."
)
RAW_ID = re.compile(r"\b[UWCDGS]0[A-Z0-9]+\b|\b[0-9A-HJKMNP-TV-Z]{26}\b")  # Slack ids, ULIDs
NAMES = {"U0LEAD": "lee", "U0ALICE": "alice"}


def raw_ids(shown: str) -> list[str]:
    """The Slack user, channel or group ids and request ids (ULIDs) in `shown`."""
    return RAW_ID.findall(shown)


def test_an_edit_submitted_after_an_escalation_reads_where_it_went_without_ids(
    policy_file: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """U0ALICE opens the Edit modal at level 0; the request escalates to level 1 (#C0FINLEADS: U0LEAD,
    U0BOB) while it is open; her submit stays open with one inline error that says where it went,
    who decides it and what to do, in words: no id a modal would show raw."""
    policy_file.write_text(EDIT_THEN_ESCALATE)
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, payload={"amount": "300.00", "currency": "USD"})
    view = open_view(sb, card, EDIT_ACTION, "U0ALICE", "edit-amount")
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1
    assert sb.submit_view(view["id"], "U0ALICE", {"edit-amount": "250"})[0] == 200
    [shown] = [v for v in sb.views("U0ALICE") if v["id"] == view["id"]]  # still open
    error = shown["errors"]["edit-amount"]
    assert raw_ids(error) == [] and "<" not in error
    assert error == (
        "This request has moved on to the next level, where its 2 approvers decide it now, in the "
        "channel the reply under its earlier card names. You were an approver of an earlier level, so "
        "your action changed nothing; close this form."
    )
    row = store.get(request_id)
    assert row is not None and (row.status, row.level, row.approved_payload) == ("pending", 1, None)
    assert [e for e in events(store, request_id) if e == "refused"] == ["refused"]


def test_an_edit_acted_on_after_an_escalation_is_answered_in_a_message_with_mentions(
    policy_file: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """The request escalates between the ack of U0ALICE's valid submit and its decision (`act`, on
    the decision pool or replayed from the journal): she is told in a message, where Slack renders
    mentions as names, so it names who decides it now and where."""
    policy_file.write_text(EDIT_THEN_ESCALATE)
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb, payload={"amount": "300.00", "currency": "USD"})
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1
    alice = {"slack_user_id": "U0ALICE", "name": "alice"}
    action = review.Action("edit", request_id, alice, values={"edit-amount": "250"})
    assert review.act(runtime, runtime.slack, action) == "refused"
    [told] = [m for m in sb.messages() if m["channel"].startswith("D") and "escalated" in m["text"]]
    assert told["text"] == ESCALATED_AWAY
    assert status(store, request_id) == "pending"


def test_an_earlier_levels_approver_is_answered_where_they_can_read_it(
    policy_file: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """U0ALICE is not in #C0FINLEADS, where the request went (Slack refuses an ephemeral there:
    `user_not_in_channel`). Her click on level 0's card is answered ephemerally on that card's
    channel; her edit refused after its ack (the escalation came between her submit's read and its
    decision) in a DM from the app: both say who decides it now."""
    policy_file.write_text(EDIT_THEN_ESCALATE)
    sb, _ = sandbox
    sb.channel_members["C0FINLEADS"] = ["U0LEAD", "U0BOB"]
    request_id, card = post_card(client, redis, sb, payload={"amount": "300.00", "currency": "USD"})
    stale_click = sb.click_payload(card["channel"], card["ts"], APPROVE_ACTION, "U0ALICE")
    submission = review.check_edit(runtime, request_id, "U0ALICE", {"edit-amount": "250"})
    assert submission.ok
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1: #C0FINLEADS

    assert sb.send_signed(stale_click)[0] == 200
    [told] = wait_for(lambda: sb.ephemerals("U0ALICE"), what="the answer to her click")
    assert told["channel"] == "C0FINANCE" and told["text"] == ESCALATED_AWAY
    alice = {"slack_user_id": "U0ALICE", "name": "alice"}
    assert review.approve_edited(runtime, runtime.slack, alice, submission) == "refused"
    [dm] = [m for m in sb.messages() if m["channel"].startswith("D") and "escalated" in m["text"]]
    assert dm["text"] == ESCALATED_AWAY
    assert status(store, request_id) == "pending" and events(store, request_id).count("refused") == 2


@pytest.mark.parametrize(
    "why",
    ["not_an_approver", "earlier_level", "self_approval", "already_decided", "edit_needs_single_approver"],
)
def test_no_refusal_a_modal_shows_inline_has_a_raw_id(why: str) -> None:
    """Every refusal of a modal submit, as its inline error reads (`plain`), on a request escalated to
    level 1 and (for `already_decided`) approved with an edit: no Slack id, no request id, no mrkdwn."""
    decided = {
        "status": "approved",
        "decided_by": [{"slack_user_id": "U0LEAD", "name": "lee"}],
        "decided_at": datetime(2026, 12, 3, 8, 0, tzinfo=UTC),
        "edits": [{"field": "amount", "from": "512.40", "to": "400.00"}],
    }
    moved = request(
        level=1,
        channel="C0FINLEADS",
        approvers=["U0LEAD", "U0BOB"],
        earlier_approvers=["U0ALICE"],
        on_behalf_of="U0LEAD",
        required_approvals=2 if why == "edit_needs_single_approver" else 1,
        **(decided if why == "already_decided" else {}),
    )
    for user in ("U0ALICE", "U0LEAD", "U0MALLORY"):
        shown = review.refusal_text(moved, why, user, plain=True)
        assert raw_ids(shown) == [] and "<" not in shown, shown


@contextmanager
def row_locked(store: Store, request_id: str) -> Iterator[None]:
    """Hold the request's row as a decision would (a write transaction: PostgreSQL's row lock,
    SQLite's `BEGIN IMMEDIATE`) until the block ends: reads go on, every decision waits."""
    with store.engine.execution_options(**WRITE).begin() as connection:
        connection.execute(text("UPDATE approval_requests SET id = id WHERE id = :id"), {"id": request_id})
        yield


def edit_payload(sb: Sandbox, card: dict[str, Any], user: str, amount: str) -> dict[str, Any]:
    """The signed-to-be view_submission of `user`'s Edit modal on `card` with `amount` typed, built
    while that modal is open (the sandbox shows a user one modal: a second opened replaces it, as
    another tab would keep its own)."""
    before = {v["id"] for v in sb.views(user)}
    assert sb.click(card["channel"], card["ts"], EDIT_ACTION, user)[0] == 200

    def filled() -> str | None:
        fresh = [
            v for v in sb.views(user) if v["id"] not in before and "edit-amount" in json.dumps(v["view"])
        ]
        return fresh[0]["id"] if fresh else None

    view_id = wait_for(filled, what=f"{user}'s Edit modal")
    return sb.submit_payload(view_id, user, {"edit-amount": amount})


@pytest.mark.parametrize(
    ("first", "second"), [("U0LEAD", "U0ALICE"), ("U0LEAD", "U0LEAD")], ids=["two reviewers", "two tabs"]
)
def test_two_edits_submitted_at_once_decide_once_and_the_loser_is_told_which_edit_won(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
    first: str,
    second: str,
) -> None:
    """Both submits pass the check before either decision is written (the row is held until both are
    acked, so both modals close): one edit is the decision, applied once; the other submitter gets one
    ephemeral answer naming who approved it and with which edit."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)  # amount 120.00
    submits = {"100.00": edit_payload(sb, card, first, "100"), "90.00": edit_payload(sb, card, second, "90")}
    with row_locked(store, request_id):
        assert [sb.send_signed(s) for s in submits.values()] == [(200, ""), (200, "")]  # both close
    wait_for(lambda: "refused" in events(store, request_id), what="the losing submit's refusal")
    row = store.get(request_id)
    assert row is not None and row.status == "approved" and row.edits is not None
    [won] = row.edits
    [winner] = row.decided_by or []
    loser = second if winner["slack_user_id"] == first and first != second else first
    assert row.approved_payload == {"amount": won["to"], "currency": "USD"}
    assert events(store, request_id).count("approved") == 1 and len(store.votes(request_id)) <= 1
    [refused] = [e for e in store.audit_trail(request_id) if e.event == "refused"]
    assert (refused.actor, refused.detail["why"]) == (loser, "already_decided")
    [told] = wait_for(lambda: sb.ephemerals(loser), what="the loser's answer")
    closing = ")" if first == second else ""  # "You had already approved this request (…)"
    said = f", with the edit amount 120.00 → {won['to']}{closing}; your action changed nothing."
    assert f"approved by <@{winner['slack_user_id']}> at <!date^" in told["text"]
    assert told["text"].endswith(said)
    assert redis.exists(f"rq:job:resume-{request_id}") == 1


def test_an_edit_submitted_after_another_edit_won_names_that_edit_inline(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """U0ALICE's edit lands first; U0LEAD's modal, open all along, then refuses his submit inline,
    naming her and her value in plain text, and nothing of his is applied."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    lead = open_view(sb, card, EDIT_ACTION, "U0LEAD", "edit-amount")
    alice = open_view(sb, card, EDIT_ACTION, "U0ALICE", "edit-amount")
    assert sb.submit_view(alice["id"], "U0ALICE", {"edit-amount": "100"})[0] == 200
    wait_for(lambda: status(store, request_id) == "approved")
    assert sb.submit_view(lead["id"], "U0LEAD", {"edit-amount": "90"})[0] == 200
    [shown] = [v for v in sb.views("U0LEAD") if v["id"] == lead["id"]]
    error = shown["errors"]["edit-amount"]
    assert error.startswith("This request was already approved by alice at ")
    assert error.endswith(" UTC, with the edit amount 120.00 → 100.00; your action changed nothing.")
    assert raw_ids(error) == []
    row = store.get(request_id)
    assert row is not None and row.edits == [{"field": "amount", "from": "120.00", "to": "100.00"}]
    assert json.dumps(sb.ephemerals("U0LEAD")) == "[]"  # told once, inline
