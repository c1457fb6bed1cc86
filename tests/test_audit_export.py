"""`countersign audit export`: one row per audit event in the time range (and action class), with
the request's action class and policy version, the decision's fields and its chain hash; a swapped
range is one error, exit 2; a reader that stops early (`| head -2`) ends it quietly."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

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
    assert "neither now, a time ago" in capsys.readouterr().err


def test_a_swapped_range_is_one_clear_error_and_until_may_be_now(
    env: dict[str, str], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-history", "--days", "2", "--per-day", "3"]) == 0
    capsys.readouterr()
    assert main(["audit", "export", "--since", "1d", "--until", "3d"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("countersign: error: --since ") and err.count("\n") == 1
    assert "is not before --until" in err and "did you swap them?" in err
    assert main(["audit", "export", "--since", "3d", "--until", "now", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == _count(store) > 0


def test_a_reader_that_stops_early_ends_the_export_quietly(env: dict[str, str], store: Store) -> None:
    """`audit export | head -2` through a real pipe: the export outgrows the pipe's buffer, so it is
    still writing when the reader closes its end; exit 1, as after any broken pipe, and no traceback."""
    assert main(["demo-history", "--days", "20", "--per-day", "20"]) == 0
    command = [sys.executable, "-m", "countersign.cli", "audit", "export", "--since", "30d"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)
    ) as export:
        assert export.stdout is not None and export.stderr is not None
        first = [json.loads(export.stdout.readline()) for _ in range(2)]
        export.stdout.close()  # what `head -2` does after its second line
        err = export.stderr.read().decode()
        status = export.wait(timeout=60)
    assert [line["id"] for line in first] == sorted(line["id"] for line in first)
    assert err == ""
    assert status == 1  # 0 would mean it finished before the reader left: the test proved nothing
