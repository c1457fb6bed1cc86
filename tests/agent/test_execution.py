"""What runs is what was approved, once: grants checked and consumed by `execute_approved`; a
refusal that a retry cannot change ends the resume job, and the card and the audit trail say why."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from redis import Redis

from countersign import ExecutionRefused, approved_action, execute_approved, report_outcome
from countersign.agent import ApprovalClient
from countersign.router import relay
from countersign.router.jobs import REFRESH_KEY, json_queue, resume_job_id, resumed_key
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, anyone, drain
from tests.helpers.builders import age, decided_card, edited_card, new_request


def approve(runtime: Runtime, grant_ttl: int = 60, **kwargs: Any) -> dict[str, Any]:
    """A stored, approved request; returns the decision its resume job would receive."""
    row = new_request(runtime.store)
    result = runtime.store.decide(
        row.id,
        "approved",
        [{"slack_user_id": "U0LEAD", "name": "lee"}],
        via="slack",
        resume=runtime.resume_event,
        grant_ttl=grant_ttl,
        refuse=anyone,
        **kwargs,
    )
    return result.event.body  # type: ignore[union-attr]


def refused_why(store: Store, request_id: str) -> list[str]:
    return [e.detail["why"] for e in store.audit_trail(request_id) if e.event == "execution_refused"]


def test_runs_the_approved_payload_once_and_records_it(runtime: Runtime, redis: Redis) -> None:
    decision = approve(runtime)
    seen: list[dict[str, Any]] = []
    assert (
        execute_approved(decision, lambda payload: seen.append(payload) or "refund re_123", runtime)
        == "refund re_123"
    )
    assert seen == [{"amount": "5.00"}]
    row = runtime.store.get(decision["request_id"])
    assert row is not None and (row.execution, row.execution_detail) == ("executed", "refund re_123")
    assert [e.event for e in runtime.store.audit_trail(row.id)][-2:] == ["execution_started", "executed"]
    # the card's refresh, asked for at "started" and again at the outcome, is one rewrite, no RQ job
    assert redis.smembers(REFRESH_KEY) == {row.id.encode()} and json_queue("countersign", redis).count == 0


def test_edited_payload_is_what_runs(runtime: Runtime) -> None:
    decision = approve(
        runtime,
        approved_payload={"amount": "4.00"},
        edits=[{"field": "amount", "from": "5.00", "to": "4.00"}],
    )
    seen: list[dict[str, Any]] = []
    execute_approved(decision, seen.append, runtime)
    assert seen == [{"amount": "4.00"}] and decision["original_payload"] == {"amount": "5.00"}


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        (lambda d: d["payload"].update(amount="5000.00"), "payload_mismatch"),
        (lambda d: d["grant"].update(signature="0" * 64), "bad_signature"),
        (lambda d: d["grant"].update(expires_at="2999-01-01T00:00:00Z"), "bad_signature"),
        (lambda d: d.update(grant=None), "bad_signature"),
        (lambda d: d.update(outcome="rejected"), "not_approved"),
    ],
)
def test_tampered_decisions_are_refused_and_audited(runtime: Runtime, tamper: Any, why: str) -> None:
    decision = copy.deepcopy(approve(runtime))
    tamper(decision)
    ran: list[Any] = []
    with pytest.raises(ExecutionRefused) as raised:
        execute_approved(decision, ran.append, runtime)
    assert raised.value.why == why and ran == []
    assert refused_why(runtime.store, decision["request_id"]) == [why]
    assert runtime.store.get(decision["request_id"]).execution is None  # type: ignore[union-attr]


def test_a_decision_for_a_request_still_pending_is_refused_as_not_approved(runtime: Runtime) -> None:
    """A decision made up before the approval (a forged grant, or none) for a request the store holds
    as pending: `not_approved`, which says to wait for the decision; not `bad_signature`."""
    decision = copy.deepcopy(approve(runtime))
    pending = new_request(runtime.store)
    for grant in (None, decision["grant"]):
        made_up = {**decision, "request_id": pending.id, "grant": grant}
        with pytest.raises(ExecutionRefused) as raised:
            execute_approved(made_up, print, runtime)
        assert raised.value.why == "not_approved" and "wait for its decision" in raised.value.consequence
    assert refused_why(runtime.store, pending.id) == ["not_approved", "not_approved"]
    assert runtime.store.get(pending.id).status == "pending"  # type: ignore[union-attr]


def test_expired_grant_and_replay_are_refused(runtime: Runtime) -> None:
    expired = approve(runtime, grant_ttl=0)
    with pytest.raises(ExecutionRefused, match="grant_expired"):
        execute_approved(expired, print, runtime)

    decision = approve(runtime)
    execute_approved(decision, lambda payload: None, runtime)
    with pytest.raises(ExecutionRefused, match="already_executed"):
        execute_approved(decision, print, runtime)
    assert refused_why(runtime.store, decision["request_id"]) == ["already_executed"]


def test_two_workers_with_the_same_decision_run_it_once(runtime: Runtime) -> None:
    decision = approve(runtime)
    start = threading.Barrier(4)
    runs: list[Any] = []
    refusals: list[str] = []

    def worker() -> None:
        start.wait()
        try:
            execute_approved(decision, runs.append, runtime)
        except ExecutionRefused as exc:
            refusals.append(exc.why)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # refused as `outcome_unknown` while the run had no outcome yet, `already_executed` once it had
    assert len(runs) == 1 and len(refusals) == 3
    assert set(refusals) <= {"outcome_unknown", "already_executed"}
    client = ApprovalClient(runtime.redis, runtime.store)
    state = client.get(decision["request_id"])  # the outcome answered the refusals
    assert state.resume is not None and state.resume["problem"] is None


def test_a_failing_action_is_recorded_as_failed_and_reraised(runtime: Runtime) -> None:
    decision = approve(runtime)

    def charge(payload: dict[str, Any]) -> None:
        raise RuntimeError("card declined")

    with pytest.raises(RuntimeError, match="card declined"):
        execute_approved(decision, charge, runtime)
    row = runtime.store.get(decision["request_id"])
    assert row is not None and (row.execution, row.execution_detail) == (
        "failed",
        "RuntimeError: card declined",
    )
    assert report_outcome(row.id, True, "retried by hand", runtime) is False  # the outcome is final


def test_decorator_runs_approved_decisions_only(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[Any] = []
    resume = approved_action(ran.append)
    decision = approve(runtime)
    assert resume({**decision, "outcome": "rejected"}) is None and ran == []
    resume(decision)
    assert ran == [decision["payload"]]


def test_the_decorator_ends_a_refused_decision_without_raising(runtime: Runtime) -> None:
    """A refusal a retry cannot change returns from the resume job (RQ then schedules no retry)."""
    ran: list[Any] = []
    resume = approved_action(ran.append)
    decision = approve(runtime)
    resume(decision)
    assert resume(decision) is None  # already_executed
    assert resume(approve(runtime, grant_ttl=0)) is None  # grant_expired
    assert resume({**decision, "payload": {"amount": "5000.00"}}) is None  # payload_mismatch
    assert resume("not a decision") is None  # type: ignore[arg-type]  # malformed_decision
    assert ran == [decision["payload"]]


def test_a_grant_expired_before_the_resume_job_ran_ends_the_job_and_the_card_says_so(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from countersign.cli import main

    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb)
    age(store, request_id, grant_expires_at=-1)  # the agent's worker was down until the grant expired
    relay.sweep(store, redis)
    drain(redis, agent.QUEUE)
    assert agent.executed(redis) == []
    queue, job_id = json_queue(agent.QUEUE, redis), resume_job_id(request_id)
    # finished, no retry (it would be refused again): RQ deleted the job, its marker stays
    assert queue.fetch_job(job_id) is None and redis.ttl(resumed_key(request_id)) > 0
    assert job_id not in queue.scheduled_job_registry and job_id not in queue.failed_job_registry
    drain(redis)  # the router worker rewrites the card
    updated = edited_card(sb, card["ts"])
    assert updated is not None and "Approved by <@U0LEAD>" in str(updated["blocks"])
    assert "Not executed: the grant expired at" in str(updated["blocks"])
    assert refused_why(store, request_id) == ["grant_expired"]
    assert main(["show", request_id]) == 0
    assert '"why": "grant_expired"' in capsys.readouterr().out


def test_a_refusal_raised_to_a_direct_caller_is_on_the_card_until_the_decision_runs(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    """An agent calling `execute_approved` itself still gets `ExecutionRefused`, and the card says
    the action did not run; once the genuine decision runs, the card says that instead."""
    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb)
    event = store.outbox_event(request_id)
    assert event is not None
    tampered = copy.deepcopy(event.body)
    tampered["payload"]["amount"] = "5000.00"
    with pytest.raises(ExecutionRefused, match="payload_mismatch"):
        execute_approved(tampered, print, runtime)
    drain(redis)
    updated = edited_card(sb, card["ts"])
    assert updated is not None and "Not executed: the payload" in str(updated["blocks"])
    execute_approved(event.body, lambda payload: "refund re_1", runtime)
    drain(redis)
    blocks = str(edited_card(sb, card["ts"])["blocks"])  # type: ignore[index]
    assert "Executed ✓" in blocks and "Not executed" not in blocks
