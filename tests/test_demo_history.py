"""`countersign demo-history`: demo data made by the store's own transitions, marked as demo data,
spread over the days asked for, and never mixed into a database of real requests unless forced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from countersign.cli import main
from countersign.cli_demo import DEMO_POLICY
from countersign.router.policy import load_policy
from countersign.store import ApprovalRequest, AuditEvent, Store
from tests.helpers.builders import new_request


def _requests(store: Store) -> list[ApprovalRequest]:
    with Session(store.engine) as session:
        return list(session.scalars(select(ApprovalRequest)))


def test_a_demo_history_is_marked_decided_and_spread_over_the_days(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "3", "--per-day", "12"]) == 0
    assert "36 demo requests over 3 days" in capsys.readouterr().out
    rows = _requests(store)
    assert len(rows) == 36
    assert {row.requester for row in rows} == {"demo-agent"}
    assert all(row.context == {"demo": True} and row.idempotency_key.startswith("demo-") for row in rows)
    assert {row.status for row in rows} <= {"approved", "rejected", "expired"}
    now = datetime.now(UTC)
    assert all(now - timedelta(days=3) <= row.created_at <= now - timedelta(hours=1) for row in rows)
    days = {row.created_at.date() for row in rows}
    assert len(days) >= 3
    for row in rows:
        assert row.decided_at is not None and row.decided_at >= row.created_at
        trail = store.audit_trail(row.id)
        assert [e.event for e in trail[:2]] == ["requested", "demo_data"]
        assert [e.at for e in trail] == sorted(e.at for e in trail)
        assert trail[-1].at == row.decided_at


def test_the_same_seed_gives_the_same_history(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "2", "--per-day", "5", "--seed", "7"]) == 0
    first = capsys.readouterr().out
    assert main(["demo-history", "--days", "2", "--per-day", "5", "--seed", "7"]) == 0
    assert capsys.readouterr().out == first


def test_a_database_with_real_requests_is_refused_unless_forced(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    real = new_request(store)
    assert main(["demo-history", "--days", "1", "--per-day", "2"]) == 2
    assert "not demo data" in capsys.readouterr().err
    assert [row.id for row in _requests(store)] == [real.id]
    assert main(["demo-history", "--days", "1", "--per-day", "2", "--force"]) == 0
    with Session(store.engine) as session:
        marked = session.scalar(select(func.count()).where(AuditEvent.event == "demo_data"))
    assert marked == 2 and len(_requests(store)) == 3


def test_the_audit_commands_seal_verify_and_anchor_the_demo_history(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "1", "--per-day", "4"]) == 0
    assert main(["audit", "seal"]) == 0
    assert main(["audit", "head"]) == 0
    capsys.readouterr()
    assert main(["audit", "head"]) == 0
    head = capsys.readouterr().out.strip()
    assert main(["audit", "verify", "--head", head]) == 0
    assert json.loads(capsys.readouterr().out)["unsealed"] == 0
    with Session(store.engine) as session, session.begin():
        session.execute(update(AuditEvent).where(AuditEvent.id == 3).values(detail={"note": "changed"}))
    assert main(["audit", "verify"]) == 1
    assert "audit chain broken: edited: event id 3 (seq 3)" in capsys.readouterr().err
    forged = json.dumps({**json.loads(head), "signature": "0" * 64})
    assert main(["audit", "verify", "--head", forged]) == 2
    assert "signature does not match" in capsys.readouterr().err


def test_stats_of_the_demo_history_as_json_and_as_tables(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "2", "--per-day", "15"]) == 0
    capsys.readouterr()
    assert main(["stats", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert sum(tally["requests"] for tally in shown["actions"].values()) == 30
    assert set(shown["reviewers"]) <= {"U0DEMOLEE", "U0DEMOALICE", "U0DEMOSAM"}
    assert main(["stats", "--since", "3d"]) == 0
    out = capsys.readouterr().out
    classes, reviewers = out.split("\n\n", 1)
    header, *rows = [line.split() for line in classes.splitlines() if not line.startswith("(")]
    outcomes = ["auto_approved", "approved", "edited", "rejected", "expired", "pending", "dead_lettered"]
    assert header[2:11] == ["requests", *outcomes, "escalated"]
    assert rows and all(int(row[1]) == sum(int(cell) for cell in row[2:9]) for row in rows)
    assert reviewers.split()[:6] == ["reviewer", "decisions", "approved", "edited", "rejected", "escalated"]


def test_the_demo_policy_replays_the_demo_history_unchanged_and_a_looser_one_is_caught(
    env: dict[str, str], store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "3", "--per-day", "100"]) == 0
    told = capsys.readouterr().out
    assert f"policy replay {DEMO_POLICY} --since 60d" in told and "audit verify" in told
    policy = load_policy(DEMO_POLICY)
    assert {row.policy_version for row in _requests(store)} == {policy.version}
    assert main(["policy", "replay", DEMO_POLICY, "--since", "4d"]) == 0
    out = capsys.readouterr().out
    for unchanged in ("would have let through, rejected by a human: 0", "edited by a human: 0"):
        assert unchanged in out
    assert "channel would change: 0\n" in out and "quorum would change: 0\n" in out
    assert "cannot route: 0" in out
    looser = tmp_path / "looser.yml"
    looser.write_text(Path(DEMO_POLICY).read_text().replace("< 50.0", "< 5000.01"))
    assert main(["policy", "replay", str(looser), "--since", "4d"]) == 1
    out = capsys.readouterr().out
    rejected = [r.id for r in _requests(store) if r.status == "rejected" and r.action == "issue_refund"]
    assert rejected and f"would have let through, rejected by a human: {len(rejected)}: " in out


def test_a_policy_that_cannot_route_the_demo_classes_is_refused_before_anything_is_written(
    env: dict[str, str], store: Store, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "1", "--policy", str(policy_file)]) == 2
    assert "cannot route the demo's action classes" in capsys.readouterr().err
    groups = Path(DEMO_POLICY).read_text().replace("{users: [U0DEMOLEE]}", "{usergroups: [S0DEMOLEADS]}")
    policy_file.write_text(groups)
    assert main(["demo-history", "--days", "1", "--policy", str(policy_file)]) == 2
    assert "needs users (not user groups) at every level of delete_customer" in capsys.readouterr().err
    assert _requests(store) == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # what it prints, not SQL
def test_the_commands_suggested_next_are_spelt_as_the_user_ran_it(env: dict[str, str], store: Store) -> None:
    """New-user trial, finding 14: run as `.venv/bin/countersign` (the README's way), the demo
    suggests `.venv/bin/countersign ...`, which works in that shell, not a bare `countersign`."""
    command = Path(sys.executable).parent / "countersign"
    ran = subprocess.run(
        [str(command), "demo-history", "--days", "2", "--per-day", "5"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    suggested = ran.stdout.split("try next:\n")[1].splitlines()
    assert suggested[0] == f"  {command} audit seal && {command} audit verify"
    assert all(line.startswith(f"  {command} ") for line in suggested)
