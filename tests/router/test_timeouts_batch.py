"""Issue 14: the expiry of a backlog in one statement a batch (`Store.expire_due`), with the policy
read from the stored rules in SQL, and the resume jobs written without one RQ `Job` a job
(`jobs.enqueue_resumes`): each expired request still gets one resume event (its grant signed as
the agent checks it), one audit event, its card rewrite scheduled and its bell rung, whatever else
the batch holds or races."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import event, update

from countersign import execute_approved
from countersign.agent import ApprovalClient
from countersign.bell import bell_key
from countersign.ports import free_port
from countersign.router import relay, timeouts
from countersign.router.jobs import enqueue_resume, enqueue_resumes, json_queue, resume_job_id
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import ApprovalRequest, Store
from tests.helpers import agent, drain
from tests.helpers.builders import age, events, post_card, status


def card_for(client: ApprovalClient, redis: Redis, sb: Sandbox, channel: str, **overrides: Any) -> str:
    """A request with its card posted in `channel` (the channel's pace reset first)."""
    redis.delete(f"countersign:pace:{channel}")
    return post_card(client, redis, sb, channel, **overrides)[0]


def test_a_batch_mixing_deny_allow_a_card_never_shown_and_an_escalation(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sb, _ = sandbox
    denied = card_for(client, redis, sb, "C0AP", action="pay_vendor", step="deny")
    allowed = card_for(
        client, redis, sb, "C0APPROVALS", action="send_email", step="allow", payload={"to": "a@b.c"}
    )
    unseen = card_for(
        client, redis, sb, "C0APPROVALS", action="send_email", step="unseen", payload={"to": "d@e.f"}
    )
    escalated = card_for(client, redis, sb, "C0FINANCE", step="escalate")
    with store.engine.begin() as connection:  # its card's posting died before it was stored
        connection.execute(update(ApprovalRequest).where(ApprovalRequest.id == unseen).values(card_ts=None))
    expired = (denied, allowed, unseen)
    for request_id in (*expired, escalated):
        age(store, request_id, expires_at=-1)

    assert timeouts.sweep(runtime, rewrites=0) == 4  # the cards are rewritten by later ticks

    results = {i: (status(store, i), store.get(i).timeout_result) for i in expired}  # type: ignore[union-attr]
    assert results == {
        denied: ("expired", "deny"),
        allowed: ("expired", "allow"),
        unseen: ("expired", "deny"),
    }
    row = store.get(escalated)
    assert row is not None and (row.status, row.level, row.channel) == ("pending", 1, "C0FINLEADS")
    for request_id in expired:
        assert events(store, request_id).count("expired") == 1 and redis.exists(bell_key(request_id))
        event = store.outbox_event(request_id)
        assert event is not None and event.published_at is not None
    assert {i for i in expired if store.get(i).card_refresh_due_at} == {denied, allowed}  # type: ignore[union-attr]
    trail = next(e for e in store.audit_trail(unseen) if e.event == "expired")
    assert (trail.detail["card_shown"], trail.detail["auto_proceeded"]) == (False, False)

    decisions = {d["request_id"]: d for d in (store.outbox_event(i).body for i in expired)}  # type: ignore[union-attr]
    assert decisions[denied]["grant"] is None and decisions[unseen]["grant"] is None
    ran: list[Any] = []
    execute_approved(decisions[allowed], ran.append, runtime)  # the agent verifies the grant's signature
    assert ran == [{"to": "a@b.c"}]
    drain(redis, agent.QUEUE)
    assert sorted(d["request_id"] for d in agent.resumed(redis)) == sorted(expired)


def test_the_sweep_expires_a_mixed_backlog_in_one_tick(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """Batches of 2: the full batches come back at once, then the escalation is taken."""
    sb, _ = sandbox
    ids = [card_for(client, redis, sb, "C0AP", action="pay_vendor", step=f"due-{n}") for n in range(5)]
    escalated = card_for(client, redis, sb, "C0FINANCE", step="escalate")
    for request_id in (*ids, escalated):
        age(store, request_id, expires_at=-1)
    assert timeouts.sweep(runtime, batch=2) == 6
    assert [status(store, i) for i in ids] == ["expired"] * 5
    assert store.get(escalated).level == 1  # type: ignore[union-attr]
    assert store.unpublished() == [] and json_queue(agent.QUEUE, redis).count == 5


def test_a_backlog_whose_publishing_fails_is_expired_and_then_published_once_by_the_relay(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """Batches of 2 over 5 due: each full batch is published on a thread while the next is expired.
    With Redis unreachable for that sweep, every request is still expired once and no event is
    marked published; the relay then publishes each with one job, and again nothing."""
    sb, _ = sandbox
    ids = [card_for(client, redis, sb, "C0AP", action="pay_vendor", step=f"due-{n}") for n in range(5)]
    for request_id in ids:
        age(store, request_id, expires_at=-1)
    down = Runtime(runtime.settings.model_copy(update={"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}))

    assert timeouts.sweep(down, batch=2, rewrites=0) == 5

    assert [status(store, i) for i in ids] == ["expired"] * 5
    assert all(events(store, i).count("expired") == 1 for i in ids)
    assert sorted(e.request_id for e in store.unpublished()) == sorted(ids)
    assert json_queue(agent.QUEUE, redis).count == 0
    assert relay.sweep(store, redis) == 5 and relay.sweep(store, redis) == 0
    assert store.unpublished() == [] and json_queue(agent.QUEUE, redis).count == 5
    drain(redis, agent.QUEUE)
    assert sorted(d["request_id"] for d in agent.resumed(redis)) == sorted(ids)


def test_a_backlog_falling_due_after_the_ticks_first_statement_is_drained_in_that_tick(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """PostgreSQL: 5 requests are made due by another transaction, committed just after the tick's
    first expiry statement found none due (a backlog made due while the tick began). The same tick
    drains them in batches of 2 (three more statements of `_drain`: 2, 2, 1), rather than taking
    them through the rows read whole (`_time_out`); each is expired and published once."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("a commit between two statements of the tick: PostgreSQL (SQLite's writers take turns)")
    sb, _ = sandbox
    ids = [card_for(client, redis, sb, "C0AP", action="pay_vendor", step=f"late-{n}") for n in range(5)]
    drains: list[str] = []

    def after(connection: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("WITH due AS"):  # a statement of `_drain` (`sql.expiry_update`'s CTE)
            drains.append(statement)
            if len(drains) == 1:  # it found none: the backlog falls due now, committed elsewhere
                for request_id in ids:
                    age(store, request_id, expires_at=-1)

    event.listen(runtime.store.engine, "after_cursor_execute", after)
    try:
        assert timeouts.sweep(runtime, batch=2, rewrites=0) == 5
    finally:
        event.remove(runtime.store.engine, "after_cursor_execute", after)
    assert len(drains) == 4
    assert [status(store, i) for i in ids] == ["expired"] * 5
    assert all(events(store, i).count("expired") == 1 for i in ids)
    assert store.unpublished() == [] and json_queue(agent.QUEUE, redis).count == 5


def test_a_click_holding_the_row_is_skipped_by_the_batch_and_expired_after(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """PostgreSQL: a click has locked its row (`SELECT ... FOR UPDATE`) when the batch runs; the
    batch expires the others without waiting for it, the click is refused as past the deadline,
    and the next sweep expires the row, once."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("row locks: PostgreSQL (SQLite's writers take turns)")
    sb, _ = sandbox
    clicked, other = (card_for(client, redis, sb, "C0AP", action="pay_vendor", step=s) for s in ("c", "o"))
    for request_id in (clicked, other):
        age(store, request_id, expires_at=-1)
    holding, release = threading.Event(), threading.Event()
    outcome: list[object] = []

    def refuse(row: ApprovalRequest) -> None:  # called on the locked row, inside the vote's transaction
        holding.set()
        assert release.wait(30)

    def click() -> None:
        voter = {"slack_user_id": "U0LEAD", "name": "lee"}
        outcome.append(store.vote(clicked, voter, "approved", runtime.resume_event, refuse=refuse))  # type: ignore[arg-type]

    thread = threading.Thread(target=click)
    thread.start()
    assert holding.wait(30)
    try:
        assert [one.request.id for one in store.expire_due(10, runtime.resume_event)] == [other]
    finally:
        release.set()
        thread.join()
    assert type(outcome[0]).__name__ == "TimedOut" and status(store, clicked) == "pending"
    assert timeouts.sweep(runtime) == 1
    assert status(store, clicked) == "expired" and events(store, clicked).count("expired") == 1
    assert json_queue(agent.QUEUE, redis).count == 1  # the other's job was written by no sweep here


def test_a_batch_writes_the_same_job_as_a_single_enqueue(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """The job hash `enqueue_resumes` writes has every field RQ's own enqueue writes, with the same
    values but the job's times, argument and description; the worker runs both."""
    one, two = (card_for(client, redis, sandbox[0], "C0AP", action="pay_vendor", step=s) for s in "ab")
    for request_id in (one, two):
        age(store, request_id, expires_at=-1)
    store.expire_due(10, runtime.resume_event)
    enqueue_resume(redis, store.outbox_event(one))  # type: ignore[arg-type]
    assert enqueue_resumes(redis, [store.outbox_event(two)]) == 1  # type: ignore[list-item]
    single, batched = (redis.hgetall(f"rq:job:{resume_job_id(i)}") for i in (one, two))
    varying = {b"created_at", b"enqueued_at", b"data", b"description"}
    assert single.keys() == batched.keys() and varying <= single.keys()
    assert {k: v for k, v in single.items() if k not in varying} == {
        k: v for k, v in batched.items() if k not in varying
    }
    assert batched[b"description"].decode().startswith(f"resume pay_vendor {two}: expired")
    drain(redis, agent.QUEUE)
    assert sorted(d["request_id"] for d in agent.resumed(redis)) == sorted((one, two))
