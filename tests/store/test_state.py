"""The state machine on SQLite and PostgreSQL: first writer wins, one transaction per decision."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, update

from countersign.router.jobs import resume_job_id
from countersign.store import (
    AlreadyDecided,
    ApprovalRequest,
    Decided,
    Decider,
    Level,
    NotExecutable,
    OutboxEvent,
    Outcome,
    Refused,
    Rules,
    Store,
    TimeoutResult,
)
from tests.helpers import anyone
from tests.helpers.builders import age, new_request, resume


def test_create_is_idempotent_on_the_key(store: Store) -> None:
    first = new_request(store)
    again, created = store.create({**_values(first), "id": "01J00000000000000000000001"})
    assert not created and again.id == first.id
    assert [e.event for e in store.audit_trail(first.id)] == ["requested"]


def test_a_request_created_with_its_card_lease_is_claimed_by_nobody_else(store: Store) -> None:
    first = new_request(store)
    unposted = {k: v for k, v in _values(first).items() if k not in {"card_lease_until", "card_attempts"}}
    values = {**unposted, "id": "01J00000000000000000000002", "idempotency_key": "leased"}
    sent = statements(store)
    row, created = store.create(values, card_lease=True)
    assert created and row.card_attempts == 1 and row.card_lease_until is not None
    assert sent == (
        ["WITH changed"]
        if _postgresql(store)
        else ["INSERT approval_requests", "DELETE FROM", "INSERT audit_events"]
    )
    assert store.claim_card(row.id) is None  # the creator posts the card; a second poster waits
    again, created = store.create(values, card_lease=True)
    assert not created and again.card_attempts == 1  # a repeat takes no lease of its own
    store.schedule_card(row, 0, unclaimed=True)  # the creator waits for its channel: the lease passes on
    claimed = store.claim_card(row.id)
    assert claimed is not None and claimed.card_attempts == 1  # no earlier post to look for
    assert store.claim_card(first.id) is not None  # created without: claimed as before


def _values(row: Any) -> dict[str, Any]:
    skip = {"status", "card_ts", "created_at", "decided_at", "decided_by", "decided_via", "decision_reason"}
    return {c.key: getattr(row, c.key) for c in ApprovalRequest.__table__.columns if c.key not in skip}


def test_a_change_and_its_audit_event_are_one_statement_on_postgresql(store: Store) -> None:
    sent = statements(store)
    row = new_request(store)
    store.attach_card(row, "C0X", "1.000100")
    decided = store.decide(row.id, "approved", [], via="policy", resume=resume)
    assert isinstance(decided, Decided)
    store.claim_execution(row.id, "worker")
    store.record_outcome(row.id, True, None, "worker")
    if _postgresql(store):  # the request with its audit event (and intake outbox row) in one statement
        assert sent == [
            *["WITH changed"] * 2,  # create, attach_card
            *["SELECT approval_requests.id,", "UPDATE approval_requests", "WITH audit"],  # decide
            *["WITH changed"] * 2,  # claim_execution, record_outcome
        ]
    else:
        assert sent == [
            *["INSERT approval_requests", "DELETE FROM", "INSERT audit_events"],
            *["UPDATE approval_requests", "INSERT audit_events"],
            *[
                "SELECT approval_requests.id,",
                "UPDATE approval_requests",
                "INSERT outbox",
                "INSERT audit_events",
            ],
            *["UPDATE approval_requests", "INSERT audit_events"] * 2,
        ]
    assert [e.event for e in store.audit_trail(row.id)] == [
        "requested",
        "card_posted",
        "approved",
        "resume_published",
        "execution_started",
        "executed",
    ]


def test_decide_writes_decision_audit_and_outbox_together(store: Store) -> None:
    row = new_request(store)
    result = store.decide(
        row.id,
        "approved",
        [{"slack_user_id": "U0LEAD", "name": "lee"}],
        via="slack",
        resume=resume,
        refuse=anyone,
    )
    assert isinstance(result, Decided)
    assert result.request.status == "approved" and result.request.decided_at is not None
    assert result.event.job_id == resume_job_id(row.id)
    assert result.event.body["outcome"] == "approved" and result.event.body["payload"] == {"amount": "5.00"}
    assert [e.id for e in store.unpublished()] == [result.event.id]
    assert [(e.event, e.actor) for e in store.audit_trail(row.id)] == [
        ("requested", "agent"),
        ("approved", "U0LEAD"),
        ("resume_published", "U0LEAD"),  # the outbox row, in the decision's transaction
    ]


def test_second_decision_loses_and_changes_nothing(store: Store) -> None:
    row = new_request(store)
    store.decide(
        row.id,
        "rejected",
        [{"slack_user_id": "U0LEAD", "name": "lee"}],
        via="slack",
        resume=resume,
        refuse=anyone,
    )
    late = store.decide(
        row.id,
        "approved",
        [{"slack_user_id": "U0ALICE", "name": "alice"}],
        via="slack",
        resume=resume,
        refuse=anyone,
    )
    assert isinstance(late, AlreadyDecided)
    assert late.request.status == "rejected" and late.request.decided_by[0]["slack_user_id"] == "U0LEAD"
    assert len(store.unpublished()) == 1


def test_a_reviewers_decision_is_authorised_on_the_row_it_locks(store: Store) -> None:
    row = new_request(store)
    lee = [{"slack_user_id": "U0LEAD", "name": "lee"}]
    with pytest.raises(ValueError, match="pass refuse"):  # no reviewer decides unchecked
        store.decide(row.id, "approved", lee, via="slack", resume=resume)
    seen: list[Any] = []

    def refuse(locked: Any) -> dict[str, Any]:
        seen.append((locked.id, locked.status))
        return {"why": "not_an_approver", "step": "edit_submit"}

    result = store.decide(row.id, "approved", lee, via="slack", resume=resume, refuse=refuse)
    assert isinstance(result, Refused) and result.why == "not_an_approver"
    assert seen == [(row.id, "pending")]
    refused = store.audit_trail(row.id)[-1]
    assert (refused.event, refused.actor, refused.detail) == (
        "refused",
        "U0LEAD",
        {"why": "not_an_approver", "step": "edit_submit"},
    )
    assert store.get(row.id).status == "pending" and store.unpublished() == []  # type: ignore[union-attr]


def test_concurrent_decisions_have_exactly_one_winner(store: Store) -> None:
    row = new_request(store)
    start = threading.Barrier(8)
    results: list[Any] = []

    def decide(n: int) -> None:
        start.wait()
        outcome = "approved" if n % 2 else "rejected"
        results.append(
            store.decide(
                row.id,
                outcome,
                [{"slack_user_id": f"U{n}", "name": str(n)}],
                via="slack",
                resume=resume,
                refuse=anyone,
            )
        )

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [r for r in results if isinstance(r, Decided)]
    assert len(results) == 8 and len(winners) == 1
    assert len(store.unpublished()) == 1
    decided = [e for e in store.audit_trail(row.id) if e.event in ("approved", "rejected")]
    assert [e.event for e in decided] == [winners[0].request.status]


def test_publish_is_marked_once(store: Store) -> None:
    row = new_request(store)
    event = store.decide(row.id, "approved", [], via="policy", resume=resume).event
    assert store.mark_all_published([event.id]) == 1
    assert store.mark_all_published([event.id]) == 0
    assert store.unpublished() == []
    assert [e.event for e in store.audit_trail(row.id)].count("resume_published") == 1


def test_card_is_attached_once_where_slack_posted_it(store: Store) -> None:
    row = new_request(store)
    attached = store.attach_card(row, "D0LEAD", "1.000100")  # e.g. a user id's DM
    assert attached is not None and (attached.channel, attached.card_ts) == ("D0LEAD", "1.000100")
    assert store.attach_card(row, "C0X", "1.000200") is None
    stored = store.get(row.id)
    assert stored is not None and (stored.channel, stored.card_ts) == ("D0LEAD", "1.000100")


def test_a_card_rewrite_is_audited_only_when_it_shows_something_new(store: Store) -> None:
    row = new_request(store)
    first = {"text": "Refund ACME", "blocks_sha256": "aa" * 32}
    store.attach_card(row, "C0X", "1.000100", first)
    assert store.card_rewritten(row.id, "1.000100", first, "counted") is False  # as posted
    counted = {"text": "Refund ACME", "blocks_sha256": "bb" * 32}
    assert store.card_rewritten(row.id, "1.000100", counted, "counted") is True
    assert store.card_rewritten(row.id, "1.000100", counted, "counted") is False  # recorded already
    assert store.card_rewritten(row.id, "1.000200", counted, "escalated") is True  # another card
    assert store.card_rewritten(row.id, "1.000100", {**counted, "text": "Refund ACME!"}, "counted") is True
    updated = [e.detail for e in store.audit_trail(row.id) if e.event == "card_updated"]
    assert [(d["ts"], d["why"], d["blocks_sha256"][:2]) for d in updated] == [
        ("1.000100", "counted", "bb"),
        ("1.000200", "escalated", "bb"),
        ("1.000100", "counted", "bb"),
    ]


def test_dead_letter_is_kept_once_with_its_reason(store: Store) -> None:
    assert store.dead_letter("job-1", "payload: Input should be a valid dictionary", {"payload": [1]}) is True
    assert store.dead_letter("job-1", "again", {}) is False
    letter = store.get_dead_letter("job-1")
    assert letter is not None and letter.received == {"payload": [1]}
    assert letter.reason.startswith("payload:")
    assert [e.event for e in store.audit_trail("job-1")] == ["dead_lettered"]


def test_times_are_utc_aware(store: Store) -> None:
    row = new_request(store)
    assert row.created_at.utcoffset() is not None and row.created_at.utcoffset().total_seconds() == 0


def test_execution_is_claimed_once_even_under_a_race(store: Store) -> None:
    row = new_request(store)
    store.decide(row.id, "approved", [], via="policy", resume=resume, grant_ttl=60)
    start = threading.Barrier(6)
    claimed: list[Any] = []
    refused: list[str] = []

    def claim() -> None:
        start.wait()
        claim = store.claim_execution(row.id, "agent")
        if isinstance(claim, NotExecutable):
            refused.append(claim.why)
        else:
            claimed.append(claim)

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # the others came while the run had no outcome yet: refused, and not as if it had run
    assert claimed == [None] and refused == ["outcome_unknown"] * 5
    stored = store.get(row.id)
    assert stored is not None and stored.execution == "started"
    events = [e.event for e in store.audit_trail(row.id)]
    assert events.count("execution_started") == 1 and events.count("execution_refused") == 5


def test_expired_or_unapproved_grants_cannot_be_claimed(store: Store) -> None:
    expired = new_request(store)
    store.decide(expired.id, "approved", [], via="policy", resume=resume, grant_ttl=0)
    assert store.claim_execution(expired.id, "agent") == NotExecutable("grant_expired")

    rejected = new_request(store, "01J00000000000000000000002", key="k2")
    store.decide(rejected.id, "rejected", [], via="policy", resume=resume)
    assert store.claim_execution(rejected.id, "agent") == NotExecutable("not_approved")


def test_a_run_claimed_without_an_outcome_is_refused_as_unknown_not_executed_until_reported(
    store: Store,
) -> None:
    """The agent's worker died in the action: the decision coming again does not run it (at most
    once), but is refused as `outcome_unknown`, with the run's start time, noted as the resume
    event's problem; a job that ended does not clear it (`resume_problems` leaves it to the outcome),
    the outcome does, and after it the refusal is `already_executed`."""
    row = new_request(store)
    store.decide(row.id, "approved", [], via="policy", resume=resume)
    assert store.claim_execution(row.id, "agent") is None  # the run started; its worker died in it
    started = store.get(row.id)
    assert started is not None and started.executed_at is not None
    started_at = started.executed_at.isoformat(timespec="microseconds").replace("+00:00", "Z")
    assert started_at.endswith("Z")  # UTC, in the shape of every time countersign shows
    assert store.claim_execution(row.id, "agent") == NotExecutable("outcome_unknown")
    refusal = store.audit_trail(row.id)[-1]
    assert (refusal.event, refusal.detail) == (
        "execution_refused",
        {"why": "outcome_unknown", "started_at": started_at},
    )
    event = store.outbox_event(row.id)
    assert event is not None and event.problem == {"event": "outcome_unknown", "started_at": started_at}
    facts = store.card_facts(row.id)
    assert facts is not None and facts.problem == event.problem and facts.refused == "outcome_unknown"
    assert store.resume_problems() == []  # not for the relay's `clear_taken`: a finished job is no answer
    assert store.claim_execution(row.id, "agent") == NotExecutable("outcome_unknown")  # still, not again
    assert store.record_outcome(row.id, True, "checked: the refund went out", "operator") is True
    event = store.outbox_event(row.id)
    assert event is not None and event.problem is None
    assert store.claim_execution(row.id, "agent") == NotExecutable("already_executed")
    event = store.outbox_event(row.id)
    assert event is not None and event.problem is None


def test_an_outcome_unknown_noted_after_the_outcome_by_a_racing_refusal_is_not_shown(store: Store) -> None:
    """A refusal racing with the outcome may write its note just after the outcome's statement
    cleared the problems: once the outcome is there, the card's facts no longer show it."""
    row = new_request(store)
    store.decide(row.id, "approved", [], via="policy", resume=resume)
    store.claim_execution(row.id, "agent")
    store.record_outcome(row.id, True, None, "agent")
    with store.engine.begin() as connection:  # the racing refusal's write, landing after the outcome
        connection.execute(
            update(OutboxEvent)
            .where(OutboxEvent.request_id == row.id)
            .values(problem={"event": "outcome_unknown", "started_at": "2026-12-02T10:00:00.000000Z"})
        )
    facts = store.card_facts(row.id)
    assert facts is not None and facts.request.execution == "executed" and facts.problem is None


def test_outcome_is_recorded_once(store: Store) -> None:
    row = new_request(store)
    store.decide(row.id, "approved", [], via="policy", resume=resume)
    assert store.claim_execution(row.id, "agent") is None  # claimed: the caller runs the action
    assert store.record_outcome(row.id, False, "card declined", "agent") is True
    stored = store.get(row.id)
    assert stored is not None and (stored.execution, stored.execution_detail) == ("failed", "card declined")
    assert store.record_outcome(row.id, True, None, "agent") is False
    stored = store.get(row.id)
    assert stored is not None and (stored.execution, stored.execution_detail) == ("failed", "card declined")
    assert [e.event for e in store.audit_trail(row.id)][-2:] == ["execution_started", "failed"]


def test_outcome_of_an_unknown_or_unapproved_request_is_not_recorded(store: Store) -> None:
    rejected = new_request(store)
    store.decide(rejected.id, "rejected", [], via="policy", resume=resume)
    assert store.record_outcome(rejected.id, True, None, "agent") is False
    assert store.record_outcome("01J0000000000000000000NONE", True, None, "agent") is False
    stored = store.get(rejected.id)
    assert stored is not None and stored.execution is None
    assert "executed" not in [e.event for e in store.audit_trail(rejected.id)]


def test_publishing_many_marks_each_once(store: Store) -> None:
    events = [
        store.decide(new_request(store).id, "approved", [], via="policy", resume=resume).event
        for _ in range(3)
    ]
    assert store.mark_all_published([events[0].id]) == 1
    assert store.mark_all_published([e.id for e in events]) == 2  # the first one was already published
    assert store.mark_all_published([e.id for e in events]) == 0 and store.unpublished() == []
    assert all(
        [a.event for a in store.audit_trail(e.request_id)].count("resume_published") == 1 for e in events
    )


def test_a_timeout_allows_only_what_a_posted_card_showed_and_counts_from_the_card(store: Store) -> None:
    rules = Rules(levels=[Level(channel="C0X", users=["U0LEAD"], timeout=60, on_timeout="allow")])
    unseen, seen = new_request(store, rules=rules), new_request(store, rules=rules)
    age(store, seen.id, expires_at=-30)  # as if its card waited 30 s past the deadline intake set
    attached = store.attach_card(seen, "C0X", "1.000100")
    posted = store.get(seen.id)
    assert posted is not None and posted.expires_at is not None and posted.level_started_at is not None
    assert posted.expires_at - posted.level_started_at == timedelta(seconds=60)  # from the card's posting
    assert attached is not None and (attached.expires_at, attached.level_started_at) == (
        posted.expires_at,
        posted.level_started_at,
    )  # the row it returns is the row as stored, clock included
    assert store.expire([(posted, TimeoutResult.ALLOW)], resume) == []  # not due: its minute has begun
    for row in (unseen, seen):
        age(store, row.id, expires_at=-1)
    due = [(store.get(row.id), TimeoutResult.ALLOW) for row in (unseen, seen)]
    decided = store.expire(due, resume)  # type: ignore[arg-type]
    assert [(d.request.id, d.request.timeout_result) for d in decided] == [
        (unseen.id, "deny"),
        (seen.id, "allow"),
    ]
    assert decided[0].request.approved_payload is None and decided[0].event.body["grant"] is None
    shown = [
        e.detail["card_shown"]
        for row in (unseen, seen)
        for e in store.audit_trail(row.id)
        if e.event == "expired"
    ]
    assert shown == [False, True]


def test_a_card_attached_after_its_request_was_decided_leaves_the_decided_row_clock_alone(
    store: Store,
) -> None:
    """A card posted while its request was decided (or found for a decided request whose poster died)
    is stored, and the decided row is returned so the card can be rewritten; no deadline or reminder
    starts for a request that is no longer pending."""
    rules = Rules(levels=[Level(channel="C0X", users=["U0LEAD"], timeout=60)], reminders_seconds=[3600])
    row = new_request(store, rules=rules)
    lee = [{"slack_user_id": "U0LEAD", "name": "lee"}]
    store.decide(row.id, "rejected", lee, via="slack", resume=resume, refuse=anyone)  # type: ignore[arg-type]
    decided = store.get(row.id)
    assert decided is not None
    attached = store.attach_card(row, "C0X", "1.000100")
    assert attached is not None and attached.status == "rejected" and attached.card_ts == "1.000100"
    stored = store.get(row.id)
    assert stored is not None and (stored.expires_at, stored.level_started_at, stored.next_reminder_at) == (
        decided.expires_at,
        decided.level_started_at,
        decided.next_reminder_at,
    )


def statements(store: Store) -> list[str]:
    """The SQL statements `store` sends from now on (its transactions' BEGINs left out)."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("BEGIN"):
            sent.append(
                statement.split()[0] + " " + statement.split()[2 if statement.startswith("INSERT") else 1]
            )

    for engine in store.engines:
        event.listen(engine, "before_cursor_execute", record)
    return sent


def _postgresql(store: Store) -> bool:
    return store.engine.dialect.name == "postgresql"


def test_an_approval_one_vote_settles_is_four_statements_three_on_postgresql_and_keeps_no_votes_row(
    store: Store,
) -> None:
    row = new_request(store)
    sent = statements(store)
    lee: Decider = {"slack_user_id": "U0LEAD", "name": "lee"}
    shown = {"text": "Refund ACME", "blocks_sha256": "ab" * 32}  # what the click says lee was shown
    decided = store.vote(row.id, lee, Outcome.APPROVED, resume, refuse=anyone, where="card", shown=shown)
    assert isinstance(decided, Decided)
    inserts = (
        ["WITH audit"]  # the resume event, and vote, approved, resume_published in the same statement
        if _postgresql(store)
        else ["INSERT outbox", "INSERT audit_events"]  # the resume event; vote, approved, resume_published
    )
    assert sent == [
        "SELECT approval_requests.id,",  # the row, locked
        "UPDATE approval_requests",  # the decision, conditional on pending
        *inserts,
    ]
    assert store.votes(row.id) == [] and store.get(row.id).decided_by == [lee]  # type: ignore[union-attr]
    trail = store.audit_trail(row.id)
    assert [e.event for e in trail] == ["requested", "vote", "approved", "resume_published"]
    assert trail[1].detail["shown"] == trail[2].detail["shown"] == shown  # in the events it writes anyway


def test_a_batch_of_expiries_is_three_statements_whatever_its_size_two_on_postgresql(store: Store) -> None:
    rules = Rules(levels=[Level(channel="C0X", users=["U0LEAD"], timeout=60, on_timeout="allow")])
    rows = [new_request(store, rules=rules) for _ in range(5)]
    for row in rows[:3]:  # three were shown a card, two were not
        store.attach_card(row, "C0X", f"1.00010{row.id[-1]}")
    for row in rows:
        age(store, row.id, expires_at=-1)
    due = [(store.get(row.id), TimeoutResult.ALLOW) for row in rows]
    sent = statements(store)
    decided = store.expire(due, resume)  # type: ignore[arg-type]
    # on PostgreSQL the audit events are inserted by the outbox INSERT's statement (a CTE)
    inserts = ["WITH audit"] if _postgresql(store) else ["INSERT outbox", "INSERT audit_events"]
    assert sent == ["UPDATE approval_requests", *inserts]
    assert [d.request.id for d in decided] == [row.id for row in rows]
    assert [d.request.timeout_result for d in decided] == ["allow"] * 3 + ["deny"] * 2
    assert [d.request.card_refresh_due_at is not None for d in decided] == [True] * 3 + [False] * 2
    assert [e.request_id for e in store.unpublished()] == [row.id for row in rows]
    for row in rows:  # each request's events in causal order, whatever the batch
        assert [e.event for e in store.audit_trail(row.id)][-2:] == ["expired", "resume_published"]
