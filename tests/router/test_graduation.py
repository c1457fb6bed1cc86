"""`countersign policy replay` and `policy suggest` on a recorded history with known answers: a
candidate that would auto-approve a rejected request exits 1; a class with one rejection above 500
is never suggested past 500; a suggestion keeps the current rule (its lower bound, its other
conditions, its label) and only adds the range humans approved; thin evidence says what it counted;
`always_review` classes get no suggestion."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from countersign.cli import main
from countersign.router.policy import load_policy
from countersign.router.suggest import plain_floor
from countersign.store import Store
from tests.conftest import POLICY
from tests.helpers import anyone
from tests.helpers.builders import new_request, resume

LEE = {"slack_user_id": "U0LEAD", "name": "lee"}


def _decided(store: Store, amount: float, vote: str = "approved", action: str = "issue_refund") -> str:
    row = new_request(store, action=action, payload={"amount": f"{amount:.2f}", "currency": "USD"})
    reason = "too much" if vote == "rejected" else None
    store.vote(row.id, LEE, vote, resume, reason=reason, refuse=anyone)  # type: ignore[arg-type]
    return row.id


def _history(store: Store, approvals: int = 210) -> str:
    """`approvals` refunds approved from 2.00 up to 700.00, one rejected at 740.00, two approved above."""
    for n in range(approvals):
        _decided(store, 2 + n * 698 / (approvals - 1))
    rejected = _decided(store, 740, "rejected")
    _decided(store, 800)
    _decided(store, 900)
    return rejected


def _candidate(tmp_path: Path, bound: float) -> Path:
    rule = f'    auto_approve: {{rule: "double(payload.amount) < {bound}", label: "candidate"}}\n'
    text = POLICY.replace("    reject_reason: required\n", "    reject_reason: required\n" + rule)
    path = tmp_path / "candidate.yml"
    path.write_text(text)
    return path


def test_replay_exits_1_when_the_candidate_lets_a_rejection_through(
    env: dict[str, str], store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rejected = _history(store, approvals=20)
    assert main(["policy", "replay", str(_candidate(tmp_path, 1000.0))]) == 1
    out = capsys.readouterr().out
    assert "23 recorded requests replayed" in out
    assert "would auto-approve 23 (the recorded policy auto-approved 0)" in out
    assert f"would have let through, rejected by a human: 1: {rejected}" in out
    assert main(["policy", "replay", str(_candidate(tmp_path, 500.0))]) == 0
    out = capsys.readouterr().out
    assert "would have let through, rejected by a human: 0" in out
    assert "would auto-approve 14 " in out  # 2.00, 38.74, … in steps of 36.74: 14 under 500


def test_suggest_stays_below_the_rejection_and_says_when_evidence_is_thin(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    _history(store)
    assert main(["policy", "suggest", "--min-decisions", "150"]) == 0
    out = capsys.readouterr().out
    bounds = "double(payload.amount) >= 2.0 && double(payload.amount) <= 500.0"
    assert f"""+      rule: '{bounds} && payload.currency == "USD"'""" in out
    counted = "150 human decisions with amount from 2.0 to 500.0 (not auto-approved by the current policy)"
    assert f"# issue_refund: {counted}, 0 rejected, 0 edited" in out
    assert "label" not in out  # the current policy has no rule, so no label to keep
    assert main(["policy", "suggest", "--min-decisions", "151"]) == 0
    out = capsys.readouterr().out
    assert (
        f"# issue_refund: nothing suggested: thin evidence: {counted}, 0 rejected, 0 edited, need 151" in out
    )
    assert "rule:" not in out


def test_a_rejection_just_above_500_bounds_the_suggestion_at_500(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    for n in range(30):
        _decided(store, 400 + n * 3.4)  # up to 498.60
    _decided(store, 500.99)
    _decided(store, 501.00, "rejected")
    assert main(["policy", "suggest", "--min-decisions", "30"]) == 0
    assert "double(payload.amount) <= 500.0 &&" in capsys.readouterr().out


def test_always_review_classes_get_no_suggestion(
    env: dict[str, str], store: Store, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy_file.write_text(
        POLICY.replace(
            "    reject_reason: required\n", "    reject_reason: required\n    always_review: true\n"
        )
    )
    for n in range(5):
        _decided(store, 10 + n)
    assert main(["policy", "suggest", "--min-decisions", "1"]) == 0
    assert "# issue_refund: nothing suggested: always_review" in capsys.readouterr().out


def test_plain_floor() -> None:
    assert [plain_floor(v) for v in (700.0, 500.99, 499.0, 2.4, 0.07, 10.0)] == [
        500.0,
        500.0,
        250.0,
        2.0,
        0.05,
        10.0,
    ]
    assert plain_floor(0.0) is None


LOWER_BOUNDED = """    auto_approve:
      rule: "double(payload.amount) > 0.0 && double(payload.amount) < 50.0"
      label: small refunds are automatic
"""


def _gated(policy: Path, amount: str, currency: str = "USD") -> bool:
    """Whether the policy file `policy` sends such a refund to a human, by its own evaluation."""
    facts = {"payload": {"amount": amount, "currency": currency}, "confidence": None}
    return (
        load_policy(policy)
        .gate("issue_refund", {**facts, "requester": "agent", "action": "issue_refund"})
        .review
    )


def test_a_suggestion_keeps_the_lower_bound_the_conditions_and_the_label(
    env: dict[str, str], store: Store, policy_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy_file.write_text(
        POLICY.replace("    reject_reason: required\n", "    reject_reason: required\n" + LOWER_BOUNDED)
    )
    for n in range(41):
        _decided(store, 50 + n * 5)  # 50.00 … 250.00, all USD, all approved as asked
    assert main(["policy", "suggest", "--min-decisions", "40"]) == 0
    out = capsys.readouterr().out
    assert "+      label: 'small refunds are automatic'" in out
    assert "# issue_refund: the label is kept; reword it if it no longer says what the rule does" in out
    assert "history" not in out.split("# issue_refund")[0]  # the evidence is a comment, not the label
    written = next(line for line in out.splitlines() if line.startswith("+      rule: "))
    rule = ast.literal_eval(written.removeprefix("+      rule: "))
    applied = tmp_path / "applied.yml"
    applied.write_text(
        POLICY.replace(
            "    reject_reason: required\n",
            "    reject_reason: required\n"
            f"    auto_approve: {{rule: {json.dumps(rule)}, label: small refunds are automatic}}\n",
        )
    )
    assert not _gated(applied, "10.00")  # what the current rule approved still is
    assert not _gated(applied, "200.00")  # the range humans always approved is added
    assert _gated(applied, "-9000.00")  # never a value nobody sent
    assert _gated(applied, "0.00")
    assert _gated(applied, "300.00")
    assert _gated(applied, "200.00", "EUR")  # the history was all USD


def test_thin_evidence_counts_what_the_current_rule_leaves_to_humans(
    env: dict[str, str], store: Store, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy_file.write_text(
        POLICY.replace("    reject_reason: required\n", "    reject_reason: required\n" + LOWER_BOUNDED)
    )
    for amount in (20, 30, 40, 61, 64, 67, 73):  # three decided before the rule existed
        _decided(store, amount)
    assert main(["policy", "suggest"]) == 0
    out = capsys.readouterr().out
    counted = "4 human decisions with amount from 61.0 to 73.0 (not auto-approved by the current policy)"
    assert f"thin evidence: {counted}, 0 rejected, 0 edited, need 200" in out


def test_a_range_already_auto_approved_is_named(
    env: dict[str, str], store: Store, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy_file.write_text(
        POLICY.replace("    reject_reason: required\n", "    reject_reason: required\n" + LOWER_BOUNDED)
    )
    for amount in (5, 15, 25):
        _decided(store, amount)
    assert main(["policy", "suggest", "--min-decisions", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        "# issue_refund: nothing suggested: the current rule already auto-approves all 3 human decisions"
        in out
    )
