"""`store.stats` on a history whose answers are known: outcomes per action class and reviewer (a
class's add up to its requests, pending and dead-lettered ones included; a reviewer's carry only
what a reviewer can do), the human decisions' median and p95, rubber stamps (quick, no edit, no
Details opened) and the rejection reasons; requests older than `since` left out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from countersign.store import Store, TimeoutResult
from countersign.store.history import backdate, make_due
from countersign.store.stats import DETAILS_OPENED, OUTCOMES, stats
from tests.helpers import anyone
from tests.helpers.builders import new_request, resume

LEE = {"slack_user_id": "U0LEAD", "name": "lee"}
ALICE = {"slack_user_id": "U0ALICE", "name": "alice"}
NOW = datetime.now(UTC)


def _made(store: Store, action: str = "issue_refund", days_ago: float = 1) -> tuple[str, datetime]:
    row = new_request(store, requester="demo-test", action=action, approvers=["U0LEAD", "U0ALICE"])
    return row.id, NOW - timedelta(days=days_ago)


def _voted(store: Store, who: dict, vote: str, after: float, reason: str | None = None, **kw: object) -> str:
    request_id, created = _made(store, **kw)  # type: ignore[arg-type]
    store.vote(request_id, who, vote, resume, reason=reason, refuse=anyone)  # type: ignore[arg-type]
    backdate(store.engine, request_id, created, created + timedelta(seconds=after))
    return request_id


def _history(store: Store) -> None:
    auto, created = _made(store)
    store.decide(auto, "approved", [], via="policy", resume=resume, reason="auto_approve: cheap")
    backdate(store.engine, auto, created, created)
    _voted(store, LEE, "approved", 5)  # a rubber stamp
    looked = _voted(store, LEE, "approved", 5)  # as quick, but LEE read the Details first
    store.record(looked, DETAILS_OPENED, "U0LEAD")
    edited, created = _made(store)
    edits = [{"field": "amount", "from": "5.00", "to": "4.00"}]
    payload = {"amount": "4.00"}
    store.decide(
        edited,
        "approved",
        [ALICE],
        via="slack",
        resume=resume,
        approved_payload=payload,
        edits=edits,
        refuse=anyone,
    )  # type: ignore[arg-type]
    backdate(store.engine, edited, created, created + timedelta(seconds=100))
    _voted(store, ALICE, "rejected", 200, reason="too much")
    _voted(store, LEE, "rejected", 50, reason="too much")
    expired, created = _made(store, "send_email")
    make_due(store.engine, expired)
    store.expire([(store.get(expired), TimeoutResult.DENY)], resume)  # type: ignore[list-item]
    backdate(store.engine, expired, created, created + timedelta(hours=4))
    escalated, created = _made(store, "send_email")
    make_due(store.engine, escalated)
    store.escalate(store.get(escalated), "C0LEADS", ["U0LEAD"])  # type: ignore[arg-type]
    store.vote(escalated, LEE, "approved", resume, refuse=anyone)  # type: ignore[arg-type]
    backdate(store.engine, escalated, created, created + timedelta(seconds=30))
    _voted(store, ALICE, "rejected", 9, reason="old", days_ago=40)  # before `since`


def test_the_numbers_of_a_known_history(store: Store) -> None:
    _history(store)
    found = stats(store.engine, NOW - timedelta(days=30))
    assert found.actions["issue_refund"].as_dict() == {
        "requests": 6,
        "auto_approved": 1,
        "approved": 2,
        "edited": 1,
        "rejected": 2,
        "expired": 0,
        "pending": 0,
        "dead_lettered": 0,
        "escalated": 0,
        "median_seconds": 50.0,
        "p95_seconds": 200.0,
        "rubber_stamp_share": 0.333,
        "rejection_reasons": {"too much": 2},
    }
    email = found.actions["send_email"].as_dict()
    assert (email["requests"], email["expired"], email["escalated"], email["approved"]) == (2, 1, 1, 1)
    assert (email["median_seconds"], email["rubber_stamp_share"]) == (30.0, 0.0)
    lee, alice = found.reviewers["U0LEAD"].as_reviewer_dict(), found.reviewers["U0ALICE"].as_reviewer_dict()
    assert (lee["decisions"], lee["approved"], lee["rejected"], lee["rubber_stamp_share"]) == (4, 3, 1, 0.333)
    assert (lee["median_seconds"], lee["escalated"]) == (17.5, 1)
    assert (alice["decisions"], alice["edited"], alice["rejected"], alice["rubber_stamp_share"]) == (
        2,
        1,
        1,
        0.0,
    )
    assert set(found.reviewers) == {"U0LEAD", "U0ALICE"}


def test_one_action_class_and_the_quick_threshold(store: Store) -> None:
    _history(store)
    found = stats(store.engine, NOW - timedelta(days=60), action="issue_refund", quick=6)
    assert set(found.actions) == {"issue_refund"}
    refunds = found.actions["issue_refund"].as_dict()
    assert refunds["requests"] == 7 and refunds["rejection_reasons"] == {"too much": 2, "old": 1}
    assert stats(store.engine, NOW - timedelta(days=60), quick=1).actions["issue_refund"].quick == 0


def test_a_class_outcomes_add_up_to_its_requests_and_a_reviewer_row_has_no_class_only_columns(
    store: Store,
) -> None:
    _history(store)
    waiting = [_made(store, "send_email")[0] for _ in range(3)]  # never decided
    make_due(store.engine, waiting[0])
    store.escalate(store.get(waiting[0]), "C0LEADS", ["U0LEAD"])  # type: ignore[arg-type]
    refused = {"v": 1, "request_id": "01" + "Z" * 24, "request": {"action": "send_email", "payload": {}}}
    store.dead_letter("01" + "Z" * 24, "intake limit reached", refused)
    store.dead_letter("job-1", "not an intake message", "garbage")
    found = stats(store.engine, NOW - timedelta(days=30))
    for tally in found.actions.values():
        shown = tally.as_dict()
        assert sum(shown[name] for name in OUTCOMES) == shown["requests"]
    email = found.actions["send_email"].as_dict()
    assert (email["requests"], email["pending"], email["dead_lettered"], email["escalated"]) == (6, 3, 1, 2)
    assert found.actions["(unreadable)"].as_dict()["dead_lettered"] == 1
    for tally in found.reviewers.values():
        shown = tally.as_reviewer_dict()
        assert not {"requests", "auto_approved", "expired", "pending"} & set(shown)
        assert shown["approved"] + shown["edited"] + shown["rejected"] == shown["decisions"]
