"""The audit trail tells what happened in the order it happened, each event by whoever caused it
(finding 8 of issue 13): a quorum's decision names the vote that completed it, and a resume event
is published before anything the agent's worker records."""

from __future__ import annotations

from countersign.store import Store, TimeoutResult
from tests.helpers import anyone, empty_resume
from tests.helpers.builders import age, new_request, resume

LEE = {"slack_user_id": "U0LEAD", "name": "lee"}
ALICE = {"slack_user_id": "U0ALICE", "name": "alice"}


def trail(store: Store, request_id: str) -> list[tuple[str, str | None]]:
    return [(e.event, e.actor) for e in store.audit_trail(request_id)]


def test_a_quorum_is_decided_by_the_vote_that_completed_it(store: Store) -> None:
    row = new_request(store, required_approvals=2, approvers=["U0LEAD", "U0ALICE"])
    store.vote(row.id, LEE, "approved", empty_resume)
    decided = store.vote(row.id, ALICE, "approved", empty_resume)
    assert decided.request.decided_by == [LEE, ALICE]  # type: ignore[union-attr]
    assert trail(store, row.id) == [
        ("requested", "agent"),
        ("vote", "U0LEAD"),
        ("vote", "U0ALICE"),
        ("approved", "U0ALICE"),
        ("resume_published", "U0ALICE"),
    ]


def test_the_resume_is_published_before_the_agent_runs_it_even_when_the_relay_marks_it_later(
    store: Store,
) -> None:
    row = new_request(store)
    event = store.decide(row.id, "approved", [LEE], via="slack", resume=resume, refuse=anyone).event  # type: ignore[union-attr]
    store.claim_execution(row.id, "agent")  # the agent's worker ran the job enqueued after the commit
    store.record_outcome(row.id, True, "refund re_1", "agent")
    assert store.mark_all_published([event.id]) == 1  # the relay's sweep marks it a second later
    assert trail(store, row.id) == [
        ("requested", "agent"),
        ("approved", "U0LEAD"),
        ("resume_published", "U0LEAD"),
        ("execution_started", "agent"),
        ("executed", "agent"),
    ]
    published = store.outbox_event(row.id)
    assert published is not None and published.published_at is not None
    times = [e.at for e in store.audit_trail(row.id)]
    assert times == sorted(times)


def test_decisions_no_reviewer_made_are_the_policys(store: Store) -> None:
    by_rule = new_request(store)
    store.decide(by_rule.id, "approved", [], via="policy", resume=resume, reason="auto_approve: cheap")
    timed_out = new_request(store)
    age(store, timed_out.id, expires_at=-1)
    stored = store.get(timed_out.id)
    assert stored is not None
    [expired] = store.expire([(stored, TimeoutResult.DENY)], resume)
    assert expired.request.status == "expired"
    assert trail(store, by_rule.id)[1:] == [("approved", "policy"), ("resume_published", "policy")]
    assert trail(store, timed_out.id)[1:] == [("expired", "policy"), ("resume_published", "policy")]
