"""Review under the policy (`engine_policy`), end to end: which requests need a human (the gates at
intake: auto_approve, review_when, always_review), who may approve (users and user groups), how votes
settle a quorum, and what each reviewer may decide now (`queue_for`).

Time is controlled, not waited for: a test moves a request's deadline into the past (as if the
clock had run on), then runs the sweep the router worker runs every second.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.cli import main
from countersign.router import review, timeouts
from countersign.router.cards import APPROVE_ACTION, DETAILS_ACTION
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, drain, empty_resume, wait_for
from tests.helpers.builders import (
    age,
    card_at,
    decidable,
    escalating_policy,
    events,
    post_card,
    refund,
    status,
)
from tests.helpers.modals import open_view
from tests.helpers.redis_server import RedisServer


def test_small_refund_is_approved_by_policy_without_a_card(
    engine_policy: Path, client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = client.request(refund(payload={"amount": "20.00", "currency": "USD"}))
    drain(redis)
    assert sandbox[0].messages() == []
    row = store.get(request_id)
    assert row is not None and (row.status, row.decided_via) == ("approved", "policy")
    approved = next(e for e in store.audit_trail(request_id) if e.event == "approved")
    assert approved.detail["reason"] == "auto_approve: double(payload.amount) < 50.0"
    drain(redis, agent.QUEUE)
    [decision] = agent.resumed(redis)
    assert (decision["outcome"], decision["decided_via"], decision["decided_by"]) == (
        "approved",
        "policy",
        [],
    )


def test_card_says_why_it_needs_review_in_the_rules_labels_and_where_it_escalates(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A rule that cannot be evaluated (a string where CEL wants a number) fails closed. The card
    says so in the rule's label (or plain words, for the unlabelled quorum rule), never in CEL; the
    rule as written, with the CEL error, is in the Details modal, the audit trail and the log."""
    sb, _ = sandbox
    with caplog.at_level(logging.WARNING, logger="countersign.router.intake"):
        request_id, card = post_card(client, redis, sb, payload={"amount": "abc", "currency": "USD"})
    note = str(card["blocks"])
    assert (
        "Why: the auto-approval rule could not be evaluated: small refunds are automatic; "
        "2 approvals needed because the quorum rule could not be evaluated" in note
    )
    assert "payload.amount" not in note and "double(" not in note
    assert "Expires <!date^" in note and "then escalation to <#C0FINLEADS>" in note

    error = "RuntimeError: Function 'double' error: string parse error: invalid float literal."
    rule = f"auto_approve could not be evaluated (double(payload.amount) < 50.0): {error}"
    requested = next(e for e in store.audit_trail(request_id) if e.event == "requested")
    assert requested.detail["rule"].startswith(rule)
    assert any(rule in m and request_id in m for m in caplog.messages)
    details = json.dumps(open_view(sb, card, DETAILS_ACTION, "U0LEAD", None)["view"]["blocks"])
    assert f"Policy v9 rule: {rule}" in details


@pytest.mark.parametrize(("confidence", "reviewed"), [(0.95, False), (0.5, True), (None, True)])
def test_confidence_gate(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    confidence: float | None,
    reviewed: bool,
) -> None:
    request_id = client.request(refund(action="send_email", payload={"to": "a@b.c"}, confidence=confidence))
    drain(redis)
    assert (len(sandbox[0].messages("C0APPROVALS")) == 1) is reviewed
    assert status(store, request_id) == ("pending" if reviewed else "approved")


def test_always_review_beats_auto_approve(
    engine_policy: Path, client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = client.request(refund(action="wipe_database", payload={"db": "prod"}))
    drain(redis)
    assert status(store, request_id) == "pending" and len(sandbox[0].messages("C0APPROVALS")) == 1


def test_user_group_members_approve_and_others_cannot(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """pay_vendor's approvers are the members of S0FINANCE. Checked by waits: U0LEAD, not a member, is
    refused (a `refused` audit event), and U0BOB, a member, approves (the status becomes `approved`)."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, channel="C0AP", action="pay_vendor")
    assert store.get(request_id).approvers == ["U0ALICE", "U0BOB"]  # type: ignore[union-attr]
    sb.click("C0AP", card["ts"], APPROVE_ACTION, "U0LEAD")
    wait_for(lambda: "refused" in events(store, request_id))
    sb.click("C0AP", card["ts"], APPROVE_ACTION, "U0BOB")
    wait_for(lambda: status(store, request_id) == "approved")


def test_two_of_two_quorum_with_concurrent_votes(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """Two approvals are needed: the first is counted and shown on the card, a repeat by the same
    approver is not counted, the second approves; the final wait checks the card then names both."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, payload={"amount": "25000.00", "currency": "USD"})
    assert "Edit" not in str(card["blocks"])  # edits are for single-approver requests
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    wait_for(lambda: "1 of 2 approvals (<@U0LEAD>)" in str(sb.messages("C0FINANCE")[0]["blocks"]))
    assert status(store, request_id) == "pending"
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")  # the same approver again: not counted twice
    wait_for(lambda: "You had already approved" in str(sb.ephemerals("U0LEAD")))
    assert status(store, request_id) == "pending"
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    wait_for(lambda: status(store, request_id) == "approved")
    row = store.get(request_id)
    assert row is not None and [d["slack_user_id"] for d in row.decided_by or []] == ["U0LEAD", "U0ALICE"]
    wait_for(lambda: "Approved by <@U0LEAD>, <@U0ALICE>" in str(sb.messages("C0FINANCE")[0]["blocks"]))


def test_a_quorum_vote_while_redis_is_down_is_counted_on_the_card(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    redis_server: RedisServer,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """The card shows the count although the approvers' Home tabs cannot be marked due."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, payload={"amount": "25000.00", "currency": "USD"})
    with redis_server.down():
        assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")[0] == 200
        counted = "1 of 2 approvals (<@U0LEAD>)"
        wait_for(lambda: counted in str(card_at(sb, card["ts"])["blocks"]), what="the count on the card")
        assert status(store, request_id) == "pending" and decidable(card_at(sb, card["ts"]))


def test_votes_racing_for_a_quorum_are_neither_lost_nor_double_counted(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = post_card(client, redis, sandbox[0], payload={"amount": "25000.00", "currency": "USD"})
    start = threading.Barrier(2)
    results: list[Any] = []

    def vote(user: str) -> None:
        start.wait()
        results.append(
            store.vote(request_id, {"slack_user_id": user, "name": user}, "approved", empty_resume)
        )

    threads = [threading.Thread(target=vote, args=(u,)) for u in ("U0LEAD", "U0ALICE")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(type(r).__name__ for r in results) == ["Counted", "Decided"]
    assert status(store, request_id) == "approved" and len(store.votes(request_id)) == 2


def test_a_reject_during_a_quorum_rejects(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = post_card(client, redis, sandbox[0], payload={"amount": "25000.00", "currency": "USD"})
    store.vote(request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", empty_resume)
    result = store.vote(
        request_id, {"slack_user_id": "U0ALICE", "name": "alice"}, "rejected", empty_resume, reason="too much"
    )
    assert type(result).__name__ == "Decided" and status(store, request_id) == "rejected"
    assert store.get(request_id).decision_reason == "too much"  # type: ignore[union-attr]


def test_queue_for_lists_what_a_reviewer_may_decide_now(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sandbox[0].usergroups["S0FINLEADS"] = ["U0BOB"]
    vendor, _ = post_card(client, redis, sandbox[0], "C0AP", action="pay_vendor", step="vendor")
    refund_id, _ = post_card(client, redis, sandbox[0], step="refund")
    decided, _ = post_card(client, redis, sandbox[0], "C0APPROVALS", action="wipe_database", step="wipe")
    store.vote(decided, {"slack_user_id": "U0LEAD", "name": "lee.lead"}, "rejected", empty_resume)

    def listed(user_id: str, limit: int = 50) -> list[str]:
        return [row.id for row in store.queue_for(user_id, limit)]

    # soonest deadline first (pay_vendor's 1h, the refund's 4h); U0ALICE is named on the refund and a
    # member of S0FINANCE (pay_vendor)
    assert listed("U0ALICE") == [vendor, refund_id] and listed("U0ALICE", limit=1) == [vendor]
    assert listed("U0BOB") == [vendor] and listed("U0MALLORY") == []
    assert listed("U0LEAD") == [refund_id]  # the newer wipe_database request is decided
    age(store, refund_id, expires_at=-1)
    timeouts.sweep(runtime)  # the refund escalates to S0FINLEADS: now U0BOB's, no longer U0ALICE's
    assert listed("U0ALICE") == [vendor] and listed("U0BOB") == [vendor, refund_id]  # 1h, then 24h
    assert listed("U0LEAD") == []


def test_the_cli_pending_list_is_in_the_order_of_app_home_and_the_slash_command(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Trial finding: `countersign pending` listed newest first while App Home
    and `/countersign pending` (`review.queue`) list the soonest deadline first."""
    steps = {client.request(refund(step=step)): step for step in ("later", "soonest", "middle")}
    drain(redis)  # intake: each is pending for U0LEAD and U0ALICE
    for request_id, due_in in zip(steps, (3 * 3600, 600, 3600), strict=True):
        age(store, request_id, expires_at=due_in)
    assert [steps[row.id] for row in review.queue(runtime.store, "U0ALICE")] == ["soonest", "middle", "later"]
    capsys.readouterr()
    assert main(["pending", "--approver", "U0ALICE"]) == 0
    listed = [steps[row["request_id"]] for row in json.loads(capsys.readouterr().out)]
    assert listed == ["soonest", "middle", "later"]


def test_the_cli_pending_list_is_what_app_home_and_the_slash_command_list(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Trial finding: `countersign pending --approver U0LEAD` listed a request made on U0LEAD's
    behalf, which he may not decide and which App Home and `/countersign pending` leave out; nor may
    anyone decide a request past its deadline before the sweep gets to it."""
    mine = client.request(refund(step="his-own", on_behalf_of="U0LEAD"))
    lapsed = client.request(refund(step="lapsed"))
    open_one = client.request(refund(step="open"))
    drain(redis)
    age(store, lapsed, expires_at=-1)  # timed out; the sweep has not run
    capsys.readouterr()
    assert main(["pending", "--approver", "U0LEAD"]) == 0
    listed = [row["request_id"] for row in json.loads(capsys.readouterr().out)]
    assert listed == [row.id for row in review.queue(store, "U0LEAD")] == [open_one]
    assert main(["pending", "--approver", "U0ALICE"]) == 0  # he may not; another approver may
    assert {row["request_id"] for row in json.loads(capsys.readouterr().out)} == {mine, open_one}


EDIT_THEN_ESCALATE = escalating_policy(12, "[U0BOB]")


def test_an_edit_checked_before_an_escalation_is_refused_to_the_earlier_level(
    policy_file: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """U0ALICE's edit is valid when `check_edit` reads the request (before the ack); the request then
    escalates to U0BOB before the decision is written. The decision, authorised on the row it locks,
    refuses her: audited, told (in a DM), and the request waits for U0BOB at level 1 with nothing to
    resume."""
    policy_file.write_text(EDIT_THEN_ESCALATE)
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb, payload={"amount": "300.00", "currency": "USD"})
    alice = {"slack_user_id": "U0ALICE", "name": "alice"}
    submission = review.check_edit(runtime, request_id, "U0ALICE", {"edit-amount": "250"})
    assert submission.ok and submission.edit is not None
    assert submission.edit.payload == {"amount": "250.00", "currency": "USD"}
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1: U0BOB only

    assert review.approve_edited(runtime, runtime.slack, alice, submission) == "refused"

    row = store.get(request_id)
    assert row is not None
    assert (row.status, row.level, row.approvers, row.approved_payload) == ("pending", 1, ["U0BOB"], None)
    refusals = [(e.actor, e.detail) for e in store.audit_trail(request_id) if e.event == "refused"]
    assert refusals == [("U0ALICE", {"why": "earlier_level", "step": "edit"})]
    assert store.outbox_event(request_id) is None
    # told in a DM from the app: #C0FINLEADS is the request's channel now, which she may not be in
    told = [m["text"] for m in sb.messages() if m["channel"].startswith("D")]
    assert "escalated to <@U0BOB> in <#C0FINLEADS>" in str(told)
