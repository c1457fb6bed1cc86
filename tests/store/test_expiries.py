"""Issue 14, sixth pass: on PostgreSQL the expiries that deny get their resume event and audit events
from the expiry's own statement, built in SQL (`store.expiries`); everywhere else, and for those that
`allow`, Python builds them (`Runtime.resume_event`, `Store._expired`). The two must write the same
thing: the same decision JSON (compared as PostgreSQL's canonical text of the stored JSONB, so key
order, numbers and strings alike) and the same audit events, in the same order."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text, update

from countersign.router.runtime import Runtime
from countersign.schema import iso
from countersign.store import ApprovalRequest, OutboxEvent, Store, TimeoutResult
from countersign.store.rules import Level, Rules
from tests.helpers.builders import age, new_request

PAYLOAD = {
    "amount": "120.00",
    "rate": 0.1,
    "n": 10**17,
    "big": 1e300,
    "note": 'café ✓ "q"',
    "x": [None, True],
}
ALLOW = Rules(grant_ttl_seconds=60, levels=[Level(channel="C0X", on_timeout="allow")])
IDS = ("request_id", "idempotency_key", "decided_at")  # differ between two requests


def written(store: Store, request_id: str) -> tuple[str, list[tuple[str, str | None, str]], dict[str, Any]]:
    """The stored resume event's body (its JSONB as PostgreSQL prints it, without `IDS`), the
    request's audit events after `requested` (event, actor, detail as printed, the request's id as
    `<id>`), and the outbox row."""
    with store.engine.connect() as connection:
        body = connection.execute(
            text(
                "SELECT (body - 'request_id' - 'idempotency_key' - 'decided_at')::text"
                " FROM outbox WHERE request_id = :i"
            ),
            {"i": request_id},
        ).scalar_one()
        audits = connection.execute(
            text(
                "SELECT event, actor, detail::text FROM audit_events"
                " WHERE request_id = :i AND event <> 'requested' ORDER BY id"
            ),
            {"i": request_id},
        ).all()
        event = connection.execute(select(OutboxEvent).where(OutboxEvent.request_id == request_id)).one()
    trail = [(name, actor, detail.replace(request_id, "<id>")) for name, actor, detail in audits]
    return body, trail, dict(event._mapping)


@pytest.mark.parametrize(
    ("rules", "columns", "card"),
    [
        (Rules(grant_ttl_seconds=60), {}, True),  # deny, a queue, a card
        (ALLOW, {"resume_queue": None, "resume_func": None, "resume_webhook": "https://a.example/h"}, False),
        (Rules(grant_ttl_seconds=60), {"resume_queue": None, "resume_func": None}, False),  # waits in process
    ],
    ids=["deny-queue-card", "allow-unseen-webhook", "deny-in-process"],
)
def test_sql_and_python_write_the_same_deny(
    store: Store, runtime: Runtime, rules: Rules, columns: dict[str, Any], card: bool
) -> None:
    """Two requests alike but for their ids: one expired the Python way (`Store.expire`, which reads
    the rows and signs in Python, as the sweep does for what escalates), one by the sweep's batch
    (`Store.expire_due`: in SQL on PostgreSQL). Their decisions and audit events are the same."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has one path (Python) for both")
    python, batch = (new_request(store, rules=rules, payload=PAYLOAD, **columns) for _ in range(2))
    if card:
        with store.engine.begin() as connection:
            connection.execute(update(ApprovalRequest).values(card_ts="1700000000.000100"))
    age(store, batch.id, expires_at=-1)
    [one] = store.expire_due(10, runtime.resume_event)
    assert (one.request.id, one.request.timeout_result) == (batch.id, TimeoutResult.DENY)
    age(store, python.id, expires_at=-1)
    row = store.get(python.id)
    assert row is not None
    asked = TimeoutResult.ALLOW if rules is ALLOW else TimeoutResult.DENY
    [other] = store.expire([(row, asked)], runtime.resume_event)
    assert other.request.timeout_result == TimeoutResult.DENY

    body, audits, event = written(store, batch.id)
    python_body, python_audits, python_event = written(store, python.id)
    assert body == python_body and audits == python_audits
    targeted = columns.get("resume_webhook") or columns.get("resume_queue", "q")
    assert [a[0] for a in audits] == (["expired", "resume_published"] if targeted else ["expired"])
    for key in ("queue", "func", "webhook"):
        assert event[key] == python_event[key]
    assert (event["next_attempt_at"] is None) == (python_event["next_attempt_at"] is None)
    for request_id, one_event in ((batch.id, event), (python.id, python_event)):
        stored = store.get(request_id)
        assert stored is not None and stored.status == "expired"
        assert one_event["job_id"] == f"resume-{request_id}"
        assert {k: one_event["body"][k] for k in IDS} == {
            "request_id": request_id,
            "idempotency_key": stored.idempotency_key,
            "decided_at": iso(stored.decided_at),
        }
        # the decision as the Python path builds it from the stored row, field for field
        assert one_event["body"] == runtime.resume_event(stored).body


def test_a_batch_of_deny_and_allow_signs_only_the_allow(store: Store, runtime: Runtime) -> None:
    """One batch holding an `allow` with a card and a `deny`: the `allow` gets its signed grant from
    Python, the `deny` none; each one event, one `expired` and one `resume_published` audit event."""
    allowed = new_request(store, rules=ALLOW, card_ts="1700000000.000100")
    denied = new_request(store)
    for request in (allowed, denied):
        age(store, request.id, expires_at=-1)
    decided = {one.request.id: one for one in store.expire_due(10, runtime.resume_event)}
    assert decided.keys() == {allowed.id, denied.id}
    assert decided[allowed.id].event.body["grant"]["signature"]
    assert decided[denied.id].event.body["grant"] is None
    assert decided[allowed.id].event.body == runtime.resume_event(store.get(allowed.id)).body  # type: ignore[arg-type]
    for request in (allowed, denied):
        trail = [e.event for e in store.audit_trail(request.id)]
        assert trail == ["requested", "expired", "resume_published"]
    assert store.expire_due(10, runtime.resume_event) == []  # nothing twice


def test_an_expiry_of_a_request_without_a_resume_target_claims_no_resume_published(
    store: Store, runtime: Runtime
) -> None:
    """A request taken by long poll or in process (no queue, no webhook) has nothing to publish: its
    expiry, whether it denies (on PostgreSQL, built in SQL) or allows (in Python), audits `expired`
    alone, though its outbox row is written (it rings the request's bell)."""
    allowed = new_request(
        store, rules=ALLOW, card_ts="1700000000.000100", resume_queue=None, resume_func=None
    )
    denied = new_request(store, resume_queue=None, resume_func=None)
    for request in (allowed, denied):
        age(store, request.id, expires_at=-1)
    assert {one.request.id for one in store.expire_due(10, runtime.resume_event)} == {allowed.id, denied.id}
    for request in (allowed, denied):
        assert [e.event for e in store.audit_trail(request.id)] == ["requested", "expired"]
        assert store.outbox_event(request.id) is not None


@pytest.mark.parametrize("plan", ["hash join", "nested loop"])
def test_a_batch_expires_at_most_its_limit_whatever_plan_postgresql_picks(
    database_url: str, runtime: Runtime, plan: str
) -> None:
    """The due rows are picked once (`LIMIT … FOR UPDATE SKIP LOCKED`), not again for each row the
    UPDATE visits: a nested-loop plan re-ran the pick and expired every due row in one batch."""
    if not database_url.startswith("postgresql"):
        pytest.skip("query plans: PostgreSQL")
    off = "enable_hashjoin=off -c enable_mergejoin=off" if plan == "nested loop" else "enable_nestloop=off"
    store = Store.from_url(database_url + f"?options=-c {off}".replace(" ", "%20"))
    due = [new_request(store).id for _ in range(12)]
    for request_id in due:
        age(store, request_id, expires_at=-60)
    try:
        first = store.expire_due(5, runtime.resume_event)
        assert len(first) == 5
        assert len(store.expire_due(5, runtime.resume_event)) == 5
        assert len(store.expire_due(5, runtime.resume_event)) == 2
    finally:
        store.engine.dispose()
