"""`countersign policy replay` and `policy suggest` on a recorded history with known answers: a
candidate that would auto-approve a rejected request exits 1; a class with one rejection above 500
is never suggested past 500; thin evidence and `always_review` classes get no suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest

from countersign.cli import main
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
    assert "23 recorded request(s) replayed" in out
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
    assert "+      rule: 'double(payload.amount) <= 500.0'" in out
    assert "history: 150 human decisions in this range, 0 rejected, 0 edited" in out
    assert main(["policy", "suggest", "--min-decisions", "151"]) == 0
    out = capsys.readouterr().out
    assert "# issue_refund: nothing suggested: thin evidence: 150 human decisions in range, need 151" in out
    assert "rule:" not in out


def test_a_rejection_just_above_500_bounds_the_suggestion_at_500(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    for n in range(30):
        _decided(store, 400 + n * 3.4)  # up to 498.60
    _decided(store, 500.99)
    _decided(store, 501.00, "rejected")
    assert main(["policy", "suggest", "--min-decisions", "30"]) == 0
    assert "rule: 'double(payload.amount) <= 500.0'" in capsys.readouterr().out


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
