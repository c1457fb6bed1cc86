"""The rules a request is reviewed under (`store.rules`): their stored JSON form reads back as the
same rules, and a stored request's rules come back as `Rules` on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from countersign.router.policy import load_policy
from countersign.store import EditableField, Level, Rules, Store
from tests.helpers.builders import new_request

ROOT = Path(__file__).resolve().parents[2]

EVERY_RULE = Rules(
    editable={
        "amount": EditableField(type="decimal", places=2, min="0.01", max="10000"),
        "count": EditableField(type="integer", min="1"),
        "memo": EditableField(type="text", max_length=200),
    },
    edit_rule="double(edited.amount) <= double(original.amount)",
    edit_rule_label="a refund may be lowered, never raised",
    review_rule="auto_approve did not hold: double(payload.amount) < 50.0",
    reject_reason="required",
    grant_ttl_seconds=300,
    self_approval=True,
    reminders_seconds=[3600, 10800],
    levels=[
        Level(channel="C0FINANCE", users=["U0LEAD", "U0ALICE"], timeout_seconds=14400, on_timeout="escalate"),
        Level(channel="C0FINLEADS", usergroups=["S0FINLEADS"], timeout_seconds=86400, on_timeout="deny"),
        Level(channel="C0CFO", users=["U0BOB"]),
    ],
)
EXAMPLE = load_policy(ROOT / "examples" / "policy.yml")


@pytest.mark.parametrize(
    "rules",
    [
        Rules(),
        Rules(grant_ttl_seconds=60),
        EVERY_RULE,
        EXAMPLE.route("issue_refund").rules,
        EXAMPLE.route("delete_customer").rules,  # the defaults alone (its one key is no rule of a request)
    ],
    ids=["default", "grant_ttl", "every_rule", "issue_refund", "delete_customer"],
)
def test_the_stored_json_form_reads_back_as_the_same_rules(rules: Rules) -> None:
    assert Rules.model_validate(rules.to_json()) == rules
    assert Rules.model_validate(json.loads(json.dumps(rules.to_json()))) == rules  # through a JSON column


def test_a_stored_requests_rules_come_back_as_rules(store: Store) -> None:
    row = new_request(store, rules=EVERY_RULE)
    stored = store.get(row.id)
    assert stored is not None and isinstance(stored.rules, Rules)
    assert stored.rules == EVERY_RULE
    assert stored.rules.level(1).usergroups == ["S0FINLEADS"] and stored.rules.level(9).channel == "C0CFO"


def test_requests_with_the_same_rules_share_one_parsed_copy(store: Store) -> None:
    same = [new_request(store, rules=EVERY_RULE).id for _ in range(2)]
    other = new_request(store, rules=EVERY_RULE.model_copy(update={"grant_ttl_seconds": 60})).id
    first, second, third = (store.get(request_id) for request_id in (*same, other))
    assert first is not None and second is not None and third is not None
    assert first.rules is second.rules and first.rules == EVERY_RULE  # validated once, frozen
    assert third.rules is not first.rules and third.rules.grant_ttl_seconds == 60
