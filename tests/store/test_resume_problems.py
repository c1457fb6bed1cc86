"""Why the agent has not run a decision (`OutboxEvent.problem`, finding 3 of issue 13): noted
while no execution is recorded, once for a job no worker took, and cleared when the agent's worker
has the decision or the job finished; each audited."""

from __future__ import annotations

from countersign.store import Store
from tests.helpers import anyone
from tests.helpers.builders import new_request, resume

LEE = {"slack_user_id": "U0LEAD", "name": "lee"}


def decided(store: Store, outcome: str = "approved") -> str:
    """A decided request whose resume event the relay has published; returns its id."""
    row = new_request(store)
    event = store.decide(row.id, outcome, [LEE], via="slack", resume=resume, refuse=anyone).event  # type: ignore[arg-type, union-attr]
    store.mark_all_published([event.id])
    return str(row.id)


def problem(store: Store, request_id: str) -> object:
    event = store.outbox_event(request_id)
    assert event is not None
    return event.problem


def test_a_failed_resume_is_noted_until_the_agent_claims_the_run(store: Store) -> None:
    request_id = decided(store)
    assert store.resume_failed(request_id, "ValueError: Invalid attribute name: m.f", 3, "agent") is True
    assert problem(store, request_id) == {
        "event": "resume_failed",
        "error": "ValueError: Invalid attribute name: m.f",
        "retries_left": 3,
    }
    assert [p.request_id for p in store.resume_problems()] == [request_id]
    failed = store.audit_trail(request_id)[-1]
    assert (failed.event, failed.actor, failed.detail) == (
        "resume_failed",
        "agent",
        {
            "job_id": f"resume-{request_id}",
            "error": "ValueError: Invalid attribute name: m.f",
            "retries_left": 3,
        },
    )
    store.claim_execution(request_id, "agent")  # a retry ran: the agent has its decision
    assert problem(store, request_id) is None and store.resume_problems() == []
    assert store.resume_failed(request_id, "RuntimeError: boom", 2, "agent") is False  # it is the agent's now
    assert [e.event for e in store.audit_trail(request_id)].count("resume_failed") == 1


def test_a_refused_claim_also_clears_the_problem(store: Store) -> None:
    request_id = decided(store, "rejected")
    store.resume_failed(request_id, "ImportError: x", 0, "agent")
    store.claim_execution(request_id, "agent")  # refused (`not_approved`), but the agent has it
    assert problem(store, request_id) is None


def test_an_untaken_resume_is_noted_once_after_the_wait_and_cleared_when_taken(store: Store) -> None:
    request_id = decided(store, "rejected")
    unpublished = new_request(store)
    store.decide(unpublished.id, "rejected", [LEE], via="slack", resume=resume, refuse=anyone)
    waiting = {request_id: "q", unpublished.id: "q"}
    assert store.resumes_not_taken(waiting, 3600, "relay") == []  # published just now
    assert store.resumes_not_taken(waiting, 0, "relay") == [
        request_id
    ]  # the unpublished one waits on no queue
    assert problem(store, request_id) == {"event": "resume_not_taken", "queue": "q", "waited_seconds": 0}
    assert store.resumes_not_taken(waiting, 0, "relay") == []  # noted once
    assert store.resumes_taken([request_id, unpublished.id], "relay") == [request_id]
    assert store.resumes_taken([request_id], "relay") == []
    assert problem(store, request_id) is None
    assert [(e.event, e.actor) for e in store.audit_trail(request_id)][-2:] == [
        ("resume_not_taken", "relay"),
        ("resume_taken", "relay"),
    ]


def test_nothing_is_noted_once_the_agent_recorded_an_execution(store: Store) -> None:
    request_id = decided(store)
    store.claim_execution(request_id, "agent")
    store.record_outcome(request_id, False, "RuntimeError: card declined", "agent")
    assert store.resume_failed(request_id, "RuntimeError: card declined", 3, "agent") is False
    assert store.resumes_not_taken({request_id: "q"}, 0, "relay") == []
    assert problem(store, request_id) is None
