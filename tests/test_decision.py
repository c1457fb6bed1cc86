"""The decision a resume job receives (`countersign.decision`): it survives the trip through JSON
unchanged, and says the payload may run only when it may."""

from __future__ import annotations

import json
from typing import Any

import pytest

from countersign.decision import Decision, decision_of
from countersign.store import Outcome, Store, TimeoutResult
from tests.helpers import anyone
from tests.helpers.builders import age, new_request, resume

SECRET = "test-secret"


def decided(store: Store, outcome: str, timeout_result: str | None = None) -> Any:
    """A stored request decided `outcome` through the store's transitions (a timeout for `expired`,
    after its card was posted: `allow` runs only what a card showed)."""
    row = new_request(store)
    if outcome == "expired":
        store.attach_card(row, "C0X", "1.000100")
        age(store, row.id, expires_at=-1)
        [result] = store.expire([(store.get(row.id), TimeoutResult(timeout_result))], resume)
        return result.request
    by = [{"slack_user_id": "U0LEAD", "name": "lee"}]
    return store.decide(
        row.id, outcome, by, via="slack", resume=resume, reason="why not", refuse=anyone
    ).request  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("outcome", "timeout_result", "may_run"),
    [
        ("approved", None, True),
        ("rejected", None, False),
        ("expired", "deny", False),
        ("expired", "allow", True),
    ],
)
def test_a_stored_decision_round_trips_through_json_and_may_run_only_when_allowed(
    store: Store, outcome: str, timeout_result: str | None, may_run: bool
) -> None:
    decision = decision_of(decided(store, outcome, timeout_result), SECRET)
    assert (decision.outcome, decision.timeout_result) == (outcome, timeout_result)
    assert Decision.from_json(decision.to_json()) == decision
    assert Decision.from_json(json.loads(json.dumps(decision.to_json()))) == decision  # as RQ sends it
    assert decision.may_run is may_run
    assert (decision.grant is not None) is may_run  # a grant only for what may run


def test_may_run_only_when_approved_or_expired_with_allow(store: Store) -> None:
    decision = decision_of(decided(store, "approved"), SECRET).to_json()
    for outcome in Outcome:
        for timeout_result in [None, *TimeoutResult]:
            changed = Decision.from_json({**decision, "outcome": outcome, "timeout_result": timeout_result})
            allowed = outcome == Outcome.APPROVED or (
                outcome == Outcome.EXPIRED and timeout_result == TimeoutResult.ALLOW
            )
            assert changed.may_run is allowed, (outcome, timeout_result)
