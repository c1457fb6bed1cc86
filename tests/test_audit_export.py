"""`countersign audit export`: one row per audit event in the time range (and action class), with
the request's action class and policy version, the decision's fields and its chain hash."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from countersign.cli import main
from countersign.cli_demo import DEMO_POLICY
from countersign.router.policy import load_policy
from countersign.store import ApprovalRequest, AuditEvent, Store


def _count(store: Store, *where: object) -> int:
    with Session(store.engine) as session:
        stmt = (
            select(func.count())
            .select_from(AuditEvent)
            .join(ApprovalRequest, ApprovalRequest.id == AuditEvent.request_id)
        )
        return session.scalar(stmt.where(*where)) or 0


def test_jsonl_and_csv_carry_every_event_in_range_with_its_hash(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "3", "--per-day", "6"]) == 0
    assert main(["audit", "seal"]) == 0
    capsys.readouterr()
    assert main(["audit", "export", "--since", "4d"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == _count(store)
    assert [line["id"] for line in lines] == sorted(line["id"] for line in lines)
    version = load_policy(DEMO_POLICY).version  # the policy the demo was decided under
    assert all(
        line["hash"] and len(line["hash"]) == 64 and line["policy_version"] == version for line in lines
    )
    decisions = [line for line in lines if line["decision"]]
    assert decisions and all(line["decision"] == line["event"] for line in decisions)
    assert all(line["at"].endswith("Z") for line in lines)

    assert main(["audit", "export", "--since", "4d", "--format", "csv", "--action", "send_email"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == _count(store, ApprovalRequest.action == "send_email") > 0
    assert {row["action"] for row in rows} == {"send_email"}
    assert all(json.loads(row["detail"]) is not None for row in rows)


def test_the_range_is_since_inclusive_until_exclusive(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "3", "--per-day", "4"]) == 0
    capsys.readouterr()
    assert main(["audit", "export", "--since", "4d", "--until", "2d"]) == 0
    old = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["audit", "export", "--since", "2d"]) == 0
    new = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert old and new and len(old) + len(new) == _count(store)
    assert not {line["id"] for line in old} & {line["id"] for line in new}
    with pytest.raises(SystemExit) as exited:
        main(["audit", "export", "--since", "yesterday"])
    assert exited.value.code == 2
    assert "neither a time ago" in capsys.readouterr().err
