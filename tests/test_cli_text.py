"""What the CLI prints of an agent's (or a reviewer's) text, on real Redis, SQLite and PostgreSQL:
JSON through `untrusted.json_text`, every control and bidirectional character escaped as `\\uXXXX`,
so that it parses back to exactly what was sent (a payload copied from `show --with-grant` still
matches its grant); error lines through `untrusted.escaped`, table lines through `untrusted.sanitize`
and `one_line`. Never a raw one on the operator's
terminal. Trial findings: a summary with U+202E printed raw, reordering what the operator read; then,
replaced by U+FFFD, a payload printed with its grant no longer matched it."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.cli import main
from countersign.grant import verify_grant
from countersign.router import relay
from countersign.router.runtime import Runtime
from countersign.untrusted import LogFormatter, json_text, sanitize
from tests.helpers import README_REQUEST, anyone, drain
from tests.helpers.builders import refund

SPOOF = "Refund 10\u202e00001 USD\u2066 via\x7f\u200f\u061c\x9b[2J\u2028end"
"""Displays reordered (RLO, LRI, RLM, ALM: the Trojan Source trick, CVE-2021-42574), with DEL, a C1
CSI that starts a terminal escape sequence, and a line separator."""
RAW = set("\u202e\u2066\x7f\u200f\u061c\x9b\u2028")
ESCAPES = ["\\u202e", "\\u2066", "\\u007f", "\\u200f", "\\u061c", "\\u009b", "\\u2028"]
LEAD = {"slack_user_id": "U0LEAD", "name": "lee"}


def _asking(**values: str) -> list[str]:
    """`README_REQUEST` with the values of the flags `values` names (`summary="…"` for `--summary`)."""
    args = list(README_REQUEST)
    for name, value in values.items():
        args[args.index(f"--{name}") + 1] = value
    return args


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `countersign ARGS` in a new process, as the operator would, in `cwd` (no `.run/.env`)."""
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=cwd,
    )


def _escaped_only(printed: str) -> None:
    """`printed` has every escape of `SPOOF` and none of its characters raw."""
    assert all(escape in printed for escape in ESCAPES), printed
    assert not RAW & set(printed)


def test_json_text_escapes_every_character_sanitize_replaces_and_parses_back_exact() -> None:
    """One table: every character `sanitize` will not show is escaped by `json_text`, losslessly,
    and so are the line breaks JSON leaves raw (NEL, U+2028, U+2029); nothing else changes."""
    text = "".join(map(chr, range(0x3000)))
    data = {"text": text, "at": datetime(2026, 12, 3, tzinfo=UTC)}
    for indent in (2, None):
        printed = json_text(data, indent)
        assert json.loads(printed) == {**data, "at": "2026-12-03 00:00:00+00:00"}
        unsafe = {c for c in text if sanitize(c) != c} | set("\x85\u2028\u2029")
        assert set("\x1b\x7f\x9b\u061c\u200f\u202e\u2066") <= unsafe and not unsafe & set(printed)
        assert all(f"\\u{ord(c):04x}" in printed for c in unsafe if c >= " ")
        assert set(text) - unsafe - set("\t\n\r") <= set(printed)  # the rest raw, JSON's escapes aside
        assert indent or "\n" not in printed


def test_a_log_line_shows_what_it_quotes_escaped_on_one_line() -> None:
    """A log record quoting a reviewer's command text (C0, C1, DEL, bidirectional controls, a line
    break starting what looks like another record) is one line with them as `\\uXXXX`; its
    traceback keeps its lines."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(LogFormatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("tests.log_line")
    logger.addHandler(handler)
    try:
        raise ValueError("boom")
    except ValueError:
        logger.error("/countersign %s failed", "show\x07\x1b[2J\x7f\x9b\u202e\nERROR forged", exc_info=True)
    finally:
        logger.removeHandler(handler)
    first, *trace = out.getvalue().splitlines()
    assert first == "ERROR /countersign show\\u0007\\u001b[2J\\u007f\\u009b\\u202e\\u000aERROR forged failed"
    assert trace[0] == "Traceback (most recent call last):" and trace[-1] == "ValueError: boom"


def test_pending_and_show_print_agent_text_escaped_and_exact(
    env: dict[str, str], redis: Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = {"amount": "120.00", "currency": "USD", "note": SPOOF}
    assert main(_asking(summary=SPOOF, payload=json.dumps(payload))) == 0
    request_id = capsys.readouterr().out.strip()
    drain(redis)
    assert main(["pending", "--approver", "U0ALICE"]) == 0
    printed = capsys.readouterr().out
    (listed,) = json.loads(printed)
    assert listed["request_id"] == request_id and listed["summary"] == SPOOF
    _escaped_only(printed)
    assert main(["show", request_id]) == 0
    printed = capsys.readouterr().out
    shown = json.loads(printed)
    assert (shown["request"]["summary"], shown["request"]["payload"]) == (SPOOF, payload)
    _escaped_only(printed)


def test_a_payload_copied_from_show_with_grant_matches_its_grant(
    env: dict[str, str],
    runtime: Runtime,
    client: ApprovalClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The operator's copy of what `show --with-grant` and `wait --with-grant` print verifies, with
    the project's own check (`grant.verify_grant`), bidirectional controls and all."""
    payload = {"amount": "120.00", "currency": "USD", "note": SPOOF}
    request_id = client.request(refund(payload=payload))
    drain(runtime.redis)
    decided = runtime.store.vote(request_id, LEAD, "approved", runtime.resume_event, refuse=anyone)
    assert relay.try_publish(runtime.redis, decided.event)  # type: ignore[union-attr]  # as a click does
    shown = _cli("show", request_id, "--with-grant", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    decision = json.loads(shown.stdout)["decision"]
    verify_grant(env["COUNTERSIGN_SECRET"], decision)  # raises ExecutionRefused when it does not match
    assert decision["outcome"] == "approved" and decision["payload"] == payload
    _escaped_only(shown.stdout)
    assert main(["wait", request_id, "--timeout", "10", "--with-grant"]) == 0
    printed = capsys.readouterr().out
    _escaped_only(printed)
    verify_grant(env["COUNTERSIGN_SECRET"], json.loads(printed))


def test_stats_and_audit_export_show_a_reject_reason_safely(
    env: dict[str, str], runtime: Runtime, client: ApprovalClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reviewer's reason: exact and escaped in JSON (`stats --json`, `audit export`); in the
    `stats` table on one line, a control or bidirectional character as U+FFFD."""
    request_id = client.request(refund())
    drain(runtime.redis)
    reason = f"no\n{SPOOF}"
    runtime.store.vote(request_id, LEAD, "rejected", runtime.resume_event, reason=reason, refuse=anyone)
    assert main(["stats", "--json"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed)["actions"]["issue_refund"]["rejection_reasons"] == {reason: 1}
    _escaped_only(printed)
    assert main(["stats"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[-1] == (
        "rejected issue_refund: 1: no⏎Refund 10\ufffd00001 USD\ufffd via\ufffd\ufffd\ufffd\ufffd[2J⏎end"
    )
    assert not RAW & set(printed)
    assert main(["audit", "export", "--since", "1d"]) == 0
    printed = capsys.readouterr().out
    lines = [json.loads(line) for line in printed.splitlines()]
    assert [line["reason"] for line in lines if line["event"] == "rejected"] == [reason]
    _escaped_only(printed)


def test_policy_check_and_errors_never_print_a_control_raw(
    env: dict[str, str], policy_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run prints the payload as escaped JSON; an error line escapes what it quotes
    (`untrusted.escaped`), an agent's value (a field the policy declares editable) or anything else
    (a path): C0 (BEL, ESC), DEL, C1 (CSI, NEL) and bidirectional controls as `\\uXXXX`."""
    payload = {"amount": "120.00", "currency": "USD", "note": SPOOF}
    assert main(["policy", "check", str(policy_file), "--request", json.dumps(refund(payload=payload))]) == 0
    printed = capsys.readouterr().out
    (line,) = [line for line in printed.splitlines() if line.startswith("request: ")]
    assert json.loads(line.split(", payload ", 1)[1]) == payload
    _escaped_only(printed)
    assert main(_asking(payload=json.dumps({"amount": SPOOF, "currency": "USD"}))) == 2
    error = capsys.readouterr().err
    assert error.startswith('countersign: error: payload.amount: "Refund 10\\u202e00001 USD\\u2066 via')
    assert not RAW & set(error)
    path = "/no/such/\x07\x1b[2J\x7f\x9b\x85\u202epolicy.yml"
    refused = _cli("show", "x", env={**env, "COUNTERSIGN_POLICY": path}, cwd=tmp_path)
    shown = "/no/such/\\u0007\\u001b[2J\\u007f\\u009b\\u0085\\u202epolicy.yml"
    assert refused.returncode == 2 and shown in refused.stderr, refused.stderr
    assert (
        not set("\x07\x1b\x7f\x9b\x85\u202e") & set(refused.stderr) and len(refused.stderr.splitlines()) == 1
    )
