"""The policy engine end to end: gates, user groups, quorum, timeouts, escalation, reminders.

Time is controlled, not waited for: a test moves a request's deadline into the past (as if the
clock had run on), then runs the sweep the router worker runs every second.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import update

from countersign import execute_approved
from countersign.agent import ApprovalClient
from countersign.decision import Decision
from countersign.router import runtime as runtime_module
from countersign.router import timeouts
from countersign.router.cards import APPROVE_ACTION
from countersign.router.jobs import json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import ApprovalRequest, Store
from countersign.store.models import utcnow_plus

from . import agent
from .helpers import drain, empty_resume, wait_for
from .test_flow import post_card, refund, status

POLICY = """\
version: 9
defaults:
  channel: C0APPROVALS
  approvers: {users: [U0LEAD]}
actions:
  issue_refund:
    channel: C0FINANCE
    approvers: {users: [U0LEAD, U0ALICE]}
    auto_approve: "double(payload.amount) < 50.0"
    require: [{when: "double(payload.amount) >= 10000.0", approvals: 2}]
    timeout: 4h
    on_timeout: escalate
    escalate:
      - {channel: C0FINLEADS, approvers: {usergroups: [S0FINLEADS]}, timeout: 24h, on_timeout: escalate}
      - {channel: C0CFO, approvers: {users: [U0BOB, U0LEAD]}, timeout: 1h, on_timeout: deny}
    reminders: [1h, 3h]
  send_email:
    review_when: "confidence < 0.9"
    timeout: 1h
    on_timeout: allow
  pay_vendor:
    channel: C0AP
    approvers: {usergroups: [S0FINANCE]}
    timeout: 1h
  wipe_database:
    always_review: true
    auto_approve: "true"
"""


@pytest.fixture
def engine_policy(policy_file: Path) -> Path:
    policy_file.write_text(POLICY)
    return policy_file


def age(store: Store, request_id: str, **columns_seconds: int) -> None:
    """Move a request's deadlines `seconds` from the database's now (negative: already past)."""
    with store.engine.begin() as connection:
        values = {column: utcnow_plus(seconds) for column, seconds in columns_seconds.items()}
        connection.execute(update(ApprovalRequest).where(ApprovalRequest.id == request_id).values(**values))


def events(store: Store, request_id: str) -> list[str]:
    return [e.event for e in store.audit_trail(request_id)]


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


def test_card_says_why_it_needs_review_and_when_it_expires(
    engine_policy: Path, client: ApprovalClient, redis: Redis, sandbox: tuple[Sandbox, str]
) -> None:
    _, card = post_card(client, redis, sandbox[0], payload={"amount": "abc", "currency": "USD"})
    note = str(card["blocks"])
    assert (
        "Why: auto_approve could not be evaluated (double(payload.amount) &lt; 50.0)" in note
    )  # fails closed
    assert "Expires <!date^" in note and "then escalate" in note


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


def test_timeout_escalates_twice_with_reminders_then_denies(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    age(store, request_id, next_reminder_at=-1)
    timeouts.sweep(runtime)
    [reminder] = [m for m in sb.messages("C0FINANCE") if m["thread_ts"] == card["ts"]]
    assert "Reminder for <@U0LEAD> or <@U0ALICE>" in reminder["text"]
    timeouts.sweep(runtime)  # the second reminder is not due yet
    assert len([m for m in sb.messages("C0FINANCE") if m["thread_ts"]]) == 1

    age(store, request_id, expires_at=-1)
    assert timeouts.sweep(runtime) == 1
    row = store.get(request_id)
    assert row is not None and (row.level, row.channel, row.approvers) == (1, "C0FINLEADS", ["U0LEAD"])
    assert "escalated to <#C0FINLEADS>" in str(sb.messages("C0FINANCE")[0]["blocks"])
    assert len(sb.messages("C0FINLEADS")) == 1

    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    assert store.get(request_id).channel == "C0CFO" and len(sb.messages("C0CFO")) == 1  # type: ignore[union-attr]
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    row = store.get(request_id)
    assert row is not None and (row.status, row.timeout_result, row.decided_via) == (
        "expired",
        "deny",
        "timeout",
    )
    assert (
        events(store, request_id).count("escalated") == 2 and events(store, request_id).count("expired") == 1
    )
    assert "denied by the policy's timeout" in str(sb.messages("C0CFO")[0]["blocks"])
    drain(redis, agent.QUEUE)
    [decision] = agent.resumed(redis)
    assert (decision["outcome"], decision["timeout_result"], decision["grant"]) == ("expired", "deny", None)


def test_timeout_that_allows_lets_the_payload_run_once(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = post_card(
        client, redis, sandbox[0], channel="C0APPROVALS", action="send_email", payload={"to": "a@b.c"}
    )
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    expired = next(e for e in store.audit_trail(request_id) if e.event == "expired")
    assert expired.detail["auto_proceeded"] is True and expired.detail["result"] == "allow"
    decision = store.outbox_event(request_id).body  # type: ignore[union-attr]
    assert (decision["outcome"], decision["timeout_result"]) == ("expired", "allow")
    ran: list[Any] = []
    execute_approved(decision, ran.append, runtime)
    assert ran == [{"to": "a@b.c"}]


def test_click_racing_the_sweep_and_two_sweepers_end_in_one_terminal_state(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = post_card(
        client, redis, sandbox[0], channel="C0APPROVALS", action="send_email", payload={"to": "a@b.c"}
    )
    age(store, request_id, expires_at=-1)
    start = threading.Barrier(3)

    def sweeper() -> None:
        start.wait()
        timeouts.sweep(runtime)

    def click() -> None:
        start.wait()
        store.vote(request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", empty_resume)

    threads = [threading.Thread(target=f) for f in (sweeper, sweeper, click)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    terminal = [e for e in events(store, request_id) if e in ("approved", "expired")]
    assert len(terminal) == 1 and status(store, request_id) == terminal[0]
    assert store.outbox_event(request_id) is not None  # exactly one resume event (job_id is unique)
    assert len(store.unpublished()) + json_queue(agent.QUEUE, redis).count == 1


def test_a_click_after_the_deadline_is_refused_even_before_the_sweep(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(
        client, redis, sb, channel="C0APPROVALS", action="send_email", payload={"to": "a@b.c"}
    )
    age(store, request_id, expires_at=-1)
    sb.click("C0APPROVALS", card["ts"], APPROVE_ACTION, "U0LEAD")
    wait_for(lambda: "timed_out" in [e.detail.get("why") for e in store.audit_trail(request_id)])
    assert status(store, request_id) == "pending"
    assert "timed out" in wait_for(lambda: sb.ephemerals("U0LEAD"))[0]["text"]  # told after the audit
    timeouts.sweep(runtime)
    assert status(store, request_id) == "expired"


def test_escalating_to_fewer_approvers_than_the_quorum_denies(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = post_card(client, redis, sandbox[0], payload={"amount": "25000.00", "currency": "USD"})
    store.vote(request_id, {"slack_user_id": "U0ALICE", "name": "alice"}, "approved", empty_resume)
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    row = store.get(request_id)  # S0FINLEADS has one member, fewer than the quorum of 2: fail closed
    assert row is not None and (row.status, row.timeout_result) == ("expired", "deny")
    assert "escalation_failed" in events(store, request_id) and sandbox[0].messages("C0FINLEADS") == []


def test_a_new_escalation_level_votes_afresh(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sandbox[0].usergroups["S0FINLEADS"] = ["U0LEAD", "U0BOB"]
    request_id, _ = post_card(client, redis, sandbox[0], payload={"amount": "25000.00", "currency": "USD"})
    store.vote(request_id, {"slack_user_id": "U0ALICE", "name": "alice"}, "approved", empty_resume)
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    row = store.get(request_id)
    assert row is not None and (row.level, row.approvers) == (1, ["U0LEAD", "U0BOB"])
    assert store.votes(request_id) == []
    assert "Needs 2 approvals from <@U0LEAD>, <@U0BOB>" in str(sandbox[0].messages("C0FINLEADS")[0]["blocks"])


def test_an_approver_of_an_earlier_level_is_refused_on_the_old_card(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)  # level 0: U0LEAD or U0ALICE
    stale_click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1: U0LEAD only; the old card loses its buttons
    assert sb.send_signed(stale_click)[0] == 200  # a click from a client that had not redrawn it yet
    refusal = wait_for(lambda: [e for e in store.audit_trail(request_id) if e.event == "refused"])[-1]
    assert (refusal.actor, refusal.detail) == ("U0ALICE", {"why": "not_an_approver", "step": "approve"})
    assert "U0ALICE" not in [v.slack_user_id for v in store.votes(request_id)]
    assert status(store, request_id) == "pending"
    assert wait_for(lambda: sb.ephemerals("U0ALICE"))


def test_an_escalation_to_a_user_group_that_is_gone_denies(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    del sandbox[0].usergroups["S0FINLEADS"]
    request_id, _ = post_card(client, redis, sandbox[0])
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    row = store.get(request_id)
    assert row is not None and (row.status, row.timeout_result) == ("expired", "deny")
    assert "escalation_failed" in events(store, request_id)


def test_pending_for_lists_what_a_reviewer_may_decide_now(
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
        return [row.id for row in store.pending_for(user_id, limit)]

    # newest first; U0ALICE is named on the refund and a member of S0FINANCE (pay_vendor)
    assert listed("U0ALICE") == [refund_id, vendor] and listed("U0ALICE", limit=1) == [refund_id]
    assert listed("U0BOB") == [vendor] and listed("U0MALLORY") == []
    assert listed("U0LEAD") == [refund_id]  # the newer wipe_database request is decided
    age(store, refund_id, expires_at=-1)
    timeouts.sweep(runtime)  # the refund escalates to S0FINLEADS: now U0BOB's, no longer U0ALICE's
    assert listed("U0ALICE") == [vendor] and listed("U0BOB") == [refund_id, vendor]
    assert listed("U0LEAD") == []


def vendor_requests(client: ApprovalClient, redis: Redis, store: Store, count: int) -> list[str]:
    """`count` stored pay_vendor requests (deny on timeout), already past their deadline."""
    ids = [client.request(refund(action="pay_vendor", step=f"due-{n}")) for n in range(count)]
    drain(redis)
    for request_id in ids:
        age(store, request_id, expires_at=-1)
    return ids


def test_a_backlog_of_timeouts_drains_in_one_sweep(
    engine_policy: Path, client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime
) -> None:
    ids = vendor_requests(client, redis, store, 5)
    assert timeouts.sweep(runtime, limit=2) == 5  # three batches of at most 2, in one tick
    assert [status(store, i) for i in ids] == ["expired"] * 5
    assert all((event := store.outbox_event(i)) and event.published_at for i in ids)
    assert all(events(store, i).count("expired") == 1 for i in ids)


def test_a_request_that_cannot_expire_does_not_hold_up_the_others(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = vendor_requests(client, redis, store, 3)
    real = runtime_module.decision_of

    def broken(row: ApprovalRequest, secret: str) -> Decision:
        if row.id == ids[1]:
            raise ValueError("this request's decision cannot be built")
        return real(row, secret)

    monkeypatch.setattr(runtime_module, "decision_of", broken)
    assert timeouts.sweep(runtime) == 2
    assert [status(store, i) for i in ids] == ["expired", "pending", "expired"]
    assert "expired" not in events(store, ids[1]) and store.outbox_event(ids[1]) is None
