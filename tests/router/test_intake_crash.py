"""A request the policy's gate lets through is never left pending for the card sweep, whatever
crashes: intake stores it approved by policy in one transaction (`Store.create_approved`), and a
pending row an older version stored and died before approving (its `requested` event, no card
lease, no decision) is approved by policy by whichever comes first, the card sweep or the intake
job run again, and never gets a review card (DESIGN.md, invariant 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import func, select, update

from countersign.agent import ApprovalClient
from countersign.router import intake, timeouts
from countersign.router.delivery import post_card
from countersign.router.gate import facts_of
from countersign.router.jobs import INTAKE_QUEUE, json_queue, resume_job_id
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.schema import IntakeMessage, parse
from countersign.store import Decided, Store
from countersign.store.models import ApprovalRequest, OutboxEvent, utcnow_plus
from tests.helpers import agent, drain, settled, wait_for
from tests.helpers.builders import age, decidable, events, refund

SMALL = {"amount": "20.00", "currency": "USD"}  # under the policy's auto_approve: amount < 50


def _resume_jobs(redis: Redis, store: Store, request_id: str) -> list[str]:
    """The ids of the resume jobs on the agent's queue, once the request's one outbox row is there."""
    with store.engine.connect() as connection:
        outbox = connection.scalar(select(func.count()).where(OutboxEvent.request_id == request_id))
    assert outbox == 1
    return wait_for(lambda: json_queue(agent.QUEUE, redis).job_ids, what="the resume job")


def _left_pending(runtime: Runtime, redis: Redis) -> None:
    """What the older intake left when its worker died between storing a request its gate let
    through and approving it (`Store.create` without a card lease, then a crash before
    `Store.decide`): the pending row of the request on the intake queue, its `requested` event, and
    the intake job (RQ runs it again)."""
    [job] = json_queue(INTAKE_QUEUE, redis).get_jobs()
    parsed = parse(IntakeMessage, job.args[0], {})
    policy = runtime.policy
    request = parsed.request
    route = policy.admit(request.action, request.payload)
    gate = policy.gate(request.action, facts_of(request))
    assert not gate.review
    values = intake.columns(parsed.request_id, request, policy, route, gate, list(route.approvers.users))
    row, created = runtime.store.create(values)
    assert created and row.status == "pending" and row.card_attempts == 0


@pytest.mark.parametrize("first", ["sweep", "intake"])
def test_a_request_let_through_and_left_pending_by_a_crash_is_approved_by_policy_without_a_card(
    first: str,
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sb, _ = sandbox
    request_id = client.request(refund(payload=SMALL))
    _left_pending(runtime, redis)
    age(store, request_id, level_started_at=-60)  # long past the card sweep's grace
    if first == "sweep":
        timeouts.sweep(runtime)
        drain(redis)  # the intake job run again
    else:
        drain(redis)
        timeouts.sweep(runtime)
    timeouts.sweep(runtime)
    assert sb.messages() == []  # no card, ever
    row = store.get(request_id)
    assert row is not None and (row.status, row.decided_via, row.card_ts) == ("approved", "policy", None)
    assert row.approved_payload == SMALL and row.grant_expires_at is not None
    assert events(store, request_id) == ["requested", "approved", "resume_published"]
    approved = next(e for e in store.audit_trail(request_id) if e.event == "approved")
    assert approved.actor == "policy" and approved.detail["reason"].startswith("auto_approve: ")
    assert _resume_jobs(redis, store, request_id) == [resume_job_id(request_id)]
    drain(redis, agent.QUEUE)
    assert [d["outcome"] for d in agent.resumed(redis)] == ["approved"]


@pytest.mark.parametrize("stored", [True, False])
def test_a_card_an_older_sweep_posted_for_such_a_row_is_rewritten_when_the_policy_approves(
    stored: bool,
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """The trial's trail: the older sweep had posted a review card for the row; the intake job run
    again approves it by policy and the card is rewritten as decided (no Approve, Reject or Edit).
    If that sweep died before storing the card's `ts` (not `stored`), this sweep approves the row
    and adopts and rewrites the card."""
    sb, _ = sandbox
    request_id = client.request(refund(payload=SMALL))
    _left_pending(runtime, redis)
    assert post_card(runtime, store.get(request_id)) == "posted"  # type: ignore[arg-type]
    [card] = sb.messages("C0FINANCE")
    assert decidable(card)
    if stored:
        drain(redis)
    else:
        with store.engine.begin() as connection:
            lost = {
                "card_ts": None,
                "card_lease_until": utcnow_plus(-1),
                "level_started_at": utcnow_plus(-60),
            }
            connection.execute(update(ApprovalRequest).where(ApprovalRequest.id == request_id).values(**lost))
        timeouts.sweep(runtime)
    row = store.get(request_id)
    assert row is not None and (row.status, row.decided_via, row.card_ts) == (
        "approved",
        "policy",
        card["ts"],
    )
    [card] = sb.messages("C0FINANCE")
    assert card["edited"] and not decidable(card)
    assert _resume_jobs(redis, store, request_id) == [resume_job_id(request_id)]


def test_a_request_let_through_is_stored_approved_with_its_resume_job_and_no_card(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id = client.request(refund(payload=SMALL))
    [job] = json_queue(INTAKE_QUEUE, redis).get_jobs()
    assert intake.handle(runtime, job.args[0]) == "auto_approved"
    assert intake.handle(runtime, job.args[0]) == "duplicate"  # the job run again
    row = store.get(request_id)
    assert row is not None and (row.status, row.decided_via, row.card_attempts) == ("approved", "policy", 0)
    assert events(store, request_id) == ["requested", "approved", "resume_published"]
    assert _resume_jobs(redis, store, request_id) == [resume_job_id(request_id)]
    age(store, request_id, level_started_at=-60)
    timeouts.sweep(runtime)
    assert sandbox[0].messages() == []


def test_a_crash_inside_the_approval_by_policy_leaves_nothing_stored(
    engine_policy: Path, client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime
) -> None:
    """The row, its audit events, its resume event and its grant are one transaction: a failure at
    the last of its steps (the resume event, signed last) leaves no row to misread."""
    request_id = client.request(refund(payload=SMALL))
    [job] = json_queue(INTAKE_QUEUE, redis).get_jobs()
    parsed = parse(IntakeMessage, job.args[0], {})
    policy = runtime.policy
    route = policy.admit(parsed.request.action, parsed.request.payload)
    gate = policy.gate(parsed.request.action, facts_of(parsed.request))
    values = intake.columns(request_id, parsed.request, policy, route, gate, list(route.approvers.users))

    def dies(row: Any) -> Any:
        raise SystemExit("the worker dies while the transaction is open")

    with pytest.raises(SystemExit):
        store.create_approved(values, dies)
    assert store.get(request_id) is None and store.audit_trail(request_id) == []
    decided, created = store.create_approved(values, runtime.resume_event)
    assert created and isinstance(decided, Decided) and decided.request.status == "approved"
    again, created = store.create_approved(values, runtime.resume_event)
    assert not created and not isinstance(again, Decided) and again.id == request_id
    other, created = store.create_approved({**values, "id": "01J00000000000000000000099"}, dies)
    assert not created and not isinstance(other, Decided) and other.id == request_id  # same key
    assert events(store, request_id) == ["requested", "approved", "resume_published"]


def test_a_stored_row_keeps_its_own_gates_answer_when_its_duplicate_is_let_through(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """A duplicate of a request sent to review (same key and payload, Redis had forgotten the key),
    which the policy lets through by now, leaves the request to its reviewers and its card as it is."""
    sb, _ = sandbox
    large = {"amount": "220.00", "currency": "USD"}
    first = client.request(refund(payload=large))
    drain(redis)
    [card] = sb.messages("C0FINANCE")
    engine_policy.write_text(engine_policy.read_text().replace("< 50.0", "< 500.0").replace("9\n", "10\n", 1))
    settled(engine_policy)
    redis.flushall()
    second = client.request(refund(payload=large))
    [job] = json_queue(INTAKE_QUEUE, redis).get_jobs()
    assert intake.handle(runtime, job.args[0]) == "duplicate"
    assert runtime.policy.version == 10 and second != first
    row = store.get(first)
    assert row is not None and row.status == "pending" and store.get(second) is None
    assert sb.messages("C0FINANCE") == [card] and decidable(card)
