"""Loading the policy file: every mistake is one line naming the file, the action class and the field."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from countersign.exceptions import PolicyError
from countersign.router.policy import Gate, PolicyHolder, load_policy

ROOT = Path(__file__).resolve().parents[2]


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "policy.yml"
    path.write_text(text)
    return load_policy(path)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("version: 1\nactions:\n  refund:\n    chanel: C0X\n", "actions.refund.chanel: unknown field"),
        ("version: 1\nactions:\n  refund:\n    timeouts: 4h\n", "actions.refund.timeouts: unknown field"),
        ("version: 1\nactions:\n  refund:\n    channel: C0X\n", "no approvers for action class 'refund'"),
        (
            "version: 1\nactions:\n  refund:\n    approvers: {users: [U0A]}\n",
            "no channel for action class 'refund'",
        ),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}, timeout: 1h,\n"
            "  on_timeout: escalate}\nactions: {r: {}}\n",
            "actions.r: on_timeout is escalate, but no escalate level follows",
        ),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}, on_timeout: allow}\n"
            "actions: {r: {}}\n",
            "actions.r: on_timeout and escalate need a timeout",
        ),
        (
            "version: 1\nactions:\n  r:\n    require: [{when: 'payload.amount >', approvals: 2}]\n",
            "actions.r.require.0.when: not a valid CEL expression",
        ),
        ("version: true\n", "version: Input should be a valid integer"),
        ("version: 1\nversion: 2\n", "key written twice: version"),
        (
            "version: 1\ndefaults: {approvers: {users: []}}\n",
            "defaults.approvers: name at least one approver in users or usergroups",
        ),
        (
            "version: 1\ndefaults: {approvers: {usergroups: [finance]}}\n",
            "defaults.approvers.usergroups.0: String should match pattern",
        ),
        (
            "version: 1\nactions:\n  r:\n    edit_rule: 'edited.amount <='\n",
            "actions.r.edit_rule: not a valid CEL expression",
        ),
        (
            "version: 1\nactions:\n  r:\n    grant_ttl: 5 minutes\n",
            "actions.r.grant_ttl: '5 minutes' is not a duration",
        ),
        (
            "version: 1\nactions:\n  r:\n    editable: {amount: {type: decimal, min: '10', max: '1'}}\n",
            "actions.r.editable.amount: min 10 is above max 1",
        ),
        (
            "version: 1\nactions:\n  r:\n    editable: {amount: {type: decimal, min: 'ten'}}\n",
            "actions.r.editable.amount.min: 'ten' is not a decimal number",
        ),
        ("", "policy: should be a JSON object"),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}, self_approval: 'yes'}\n",
            "defaults.self_approval: Input should be a valid boolean",
        ),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}}\nactions:\n  r:\n"
            "    require: [{when: 'true', approvals: 2}]\n",
            "actions.r: approvers names 1 user(s) but require asks",
        ),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}, timeout: 1h}\nactions:\n  r:\n"
            "    escalate: [{channel: C0Y, timeout: 1h}]\n",
            "escalate levels after level 0 are never reached",
        ),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}, timeout: 1h,\n"
            "  on_timeout: escalate}\n",
            "actions.defaults: on_timeout is escalate, but no escalate level follows",
        ),
        ("version: [1\n", "not valid YAML"),
    ],
)
def test_mistakes_name_the_file_and_the_field(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(PolicyError) as raised:
        load(tmp_path, text)
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'policy.yml'}: ") and error in message and "\n" not in message


def test_route_takes_the_action_class_over_the_defaults() -> None:
    policy = load_policy(ROOT / "examples" / "policy.yml")
    refund = policy.route("issue_refund")
    assert (refund.channel, refund.approvers.users) == ("C0FINANCE", ["U0LEAD", "U0ALICE"])
    assert refund.rules.to_json() == {  # the stored form
        "editable": {"amount": {"type": "decimal", "places": 2, "min": "0.01", "max_length": 3000}},
        "edit_rule": "double(edited.amount) <= double(original.amount)",
        "reject_reason": "required",
        "grant_ttl": 900,
        "self_approval": False,
        "reminders": [3600],
        "levels": [
            {
                "channel": "C0FINANCE",
                "users": ["U0LEAD", "U0ALICE"],
                "usergroups": [],
                "timeout": 4 * 3600,
                "on_timeout": "escalate",
            },
            {
                "channel": "C0FINLEADS",
                "users": [],
                "usergroups": ["S0FINLEADS"],
                "timeout": 24 * 3600,
                "on_timeout": "deny",
            },
        ],
    }
    other = policy.route("send_email")
    assert (other.channel, other.approvers.users, other.rules.reject_reason) == (
        "C0APPROVALS",
        ["U0LEAD"],
        "optional",
    )
    assert other.rules.level(0).timeout_seconds == 24 * 3600
    assert len(policy.sha256) == 64 and policy.version == 1


def facts(amount: str, confidence: float | None = None) -> dict[str, Any]:
    return {"payload": {"amount": amount}, "confidence": confidence, "requester": "agent", "action": "x"}


def test_worked_example_refund_gates() -> None:
    policy = load_policy(ROOT / "examples" / "policy.yml")
    assert policy.gate("issue_refund", facts("49.99")) == Gate(
        False, "auto_approve: double(payload.amount) > 0.0 && double(payload.amount) < 50.0"
    )
    assert policy.gate("issue_refund", facts("50.00")) == Gate(
        True, "auto_approve did not hold: double(payload.amount) > 0.0 && double(payload.amount) < 50.0", 1
    )
    assert policy.gate("issue_refund", facts("10000")).approvals == 2
    assert policy.gate("issue_refund", facts("-100000.00")).review  # a negative refund is not "small"
    broken = policy.gate("issue_refund", facts("fifty"))  # CEL cannot read it: fail closed
    assert broken.review and broken.approvals == 2 and "could not be evaluated" in broken.reason
    assert (
        policy.gate("delete_customer", facts("1")).reason
        == "always_review: every delete_customer needs a human"
    )


def test_confidence_gate_and_always_review_win(tmp_path: Path) -> None:
    policy = load(
        tmp_path,
        """\
version: 1
defaults: {channel: C0X, approvers: {users: [U0A]}}
actions:
  send_email: {review_when: "confidence < 0.9"}
  wipe: {always_review: true, auto_approve: "true"}
""",
    )
    assert policy.gate("send_email", facts("1", 0.95)).review is False  # type: ignore[attr-defined]
    assert policy.gate("send_email", facts("1", 0.5)).review is True  # type: ignore[attr-defined]
    assert policy.gate("send_email", facts("1", None)).review is True  # type: ignore[attr-defined]
    assert policy.gate("wipe", facts("1")).review is True  # type: ignore[attr-defined]


def test_hot_reload_and_a_broken_reload_keeps_the_last_good_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text("version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}}\n")
    holder = PolicyHolder(path)
    path.write_text("version: 2\ndefaults: {channel: C0Y, approvers: {users: [U0A]}}\n")
    assert holder.current().version == 2 and holder.current().route("a").channel == "C0Y"
    path.write_text("version: 3\ndefaults: {channel: not-a-channel}\n")
    with caplog.at_level(logging.ERROR):
        assert holder.current().version == 2
        assert holder.current().version == 2
    assert next(r.message for r in caplog.records if "POLICY NOT RELOADED" in r.message).startswith(
        "POLICY NOT RELOADED, version 2 stays in force:"
    )
    assert len([r for r in caplog.records if "POLICY NOT RELOADED" in r.message]) == 1  # said once per file
    path.write_text("version: 4\ndefaults: {channel: C0Z, approvers: {users: [U0A]}}\n")
    assert holder.current().version == 4


def test_policy_check_prints_a_summary_or_the_errors(tmp_path: Path) -> None:
    good = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "policy", "check", "examples/policy.yml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert good.returncode == 0
    assert "issue_refund: C0FINANCE (U0LEAD, U0ALICE; after 14400 s: escalate) → C0FINLEADS" in good.stdout
    bad = tmp_path / "bad.yml"
    bad.write_text("version: 1\nactions:\n  refund:\n    chanel: C0X\n")
    result = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "policy", "check", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "actions.refund.chanel: unknown field" in result.stderr
