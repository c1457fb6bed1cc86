"""Loading the policy file: every mistake is one line naming the file, the action class and the field."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from countersign.exceptions import PolicyError, UnknownAction
from countersign.router.gate import GATE_VARIABLES, Gate, facts_of, let_through
from countersign.router.policy import IntakeLimits, Policy, load_policy
from countersign.router.reload import PolicyHolder
from countersign.schema import ApprovalRequestV1
from tests.helpers import settled

ROOT = Path(__file__).resolve().parents[2]


def load(tmp_path: Path, text: str) -> Policy:
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
        ("version: true\n", "version: should be a whole number"),
        ("version: 1\nversion: 2\n", "key written twice: version"),
        (
            "version: 1\ndefaults: {approvers: {users: []}}\n",
            "defaults.approvers: name at least one approver in users or usergroups",
        ),
        (
            "version: 1\ndefaults: {approvers: {usergroups: [finance]}}\n",
            "defaults.approvers.usergroups.0: should be a Slack user group id: S, then 2 to 31 capitals "
            "or digits (e.g. S0123ABC)",
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
        ("", "the policy file is empty; it should be a YAML mapping (version, actions, …)"),
        ("# nothing yet\n", "the policy file is empty"),
        ("- version: 1\n", "should be a YAML mapping (version, actions, …), not a list"),
        ("version\n", "should be a YAML mapping (version, actions, …), not a single value"),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}, self_approval: 'yes'}\n",
            "defaults.self_approval: should be true or false",
        ),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}}\nactions:\n  r:\n"
            "    require: [{when: 'true', approvals: 2}]\n",
            "actions.r: approvers names 1 user but require asks for up to 2 approvals",
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
        ("version: 1\nunknown_actions: allow\n", "unknown_actions: should be 'refuse' or 'route'"),
        (
            "version: 1\nunknown_actions: route\ndefaults: {channel: C0X}\n",
            "unknown_actions is route, so defaults needs a channel and approvers",
        ),
        (
            "version: 1\nactions:\n  r:\n    auto_approve: {rule: 'payload.amount <'}\n",
            "actions.r.auto_approve.rule: not a valid CEL expression",
        ),
        (
            "version: 1\nactions:\n  r:\n    auto_approve: 'payload.amount <'\n",
            "actions.r.auto_approve: not a valid CEL expression",
        ),
        (
            "version: 1\nactions:\n  r:\n"
            "    review_when: 'size(payload.x) > 1 || lowerAscii(payload.s) == \"a\"'\n",
            "actions.r.review_when: CEL has no function lowerAscii (a typo?)",
        ),
        (
            "version: 1\nactions:\n  r:\n    edit_rule: 'dubble(edited.amount) <= original.amount'\n",
            "actions.r.edit_rule: CEL has no function dubble (a typo?)",
        ),
        (
            "version: 1\nactions:\n  r:\n    auto_approve: 'paylod.amount < 50 && confidence > 0.9'\n",
            "actions.r.auto_approve: CEL has no variable paylod here (a typo? the variables "
            "are payload, confidence, requester, action)",
        ),
        (
            "version: 1\nactions:\n  r:\n    require: [{when: 'payload.amount > 9', approvals: 1},"
            " {when: 'requestor == \"bot\"', approvals: 1}]\n",
            "actions.r.require: CEL has no variable requestor here",
        ),
        (
            "version: 1\nactions:\n  r:\n    edit_rule: 'edited.amount <= payload.amount'\n",
            "actions.r.edit_rule: CEL has no variable payload here (a typo? the variables "
            "are original, edited)",
        ),
        (
            "version: 1\nactions:\n  r:\n    auto_approve: {label: small}\n",
            "actions.r.auto_approve.rule: required",
        ),
        (
            "version: 1\nactions:\n  r:\n    edit_rule: {rule: 'true', lable: x}\n",
            "actions.r.edit_rule.lable: unknown field",
        ),
        (
            f"version: 1\nactions:\n  r:\n    review_when: {{rule: 'true', label: {'x' * 151}}}\n",
            "actions.r.review_when.label: should be at most 150 characters",
        ),
        (
            "version: 1\nactions:\n  r:\n    require: [{when: 'true', approvals: 1, label: \"a\\nb\"}]\n",
            "actions.r.require.0.label: should be one line, without line breaks",
        ),
        (
            "version: 1\ndefaults: {limits: {per_minute: 0}}\n",
            "defaults.limits.per_minute: should be 1 or more",
        ),
        (
            "version: 1\nactions:\n  r:\n    limits: {pending: '100'}\n",
            "actions.r.limits.pending: should",
        ),
        (
            "version: 1\nactions:\n  r:\n    limits: {per_hour: 5}\n",
            "actions.r.limits.per_hour: unknown field",
        ),
        (
            f"version: 1\ndefaults: {{key_fields: [{', '.join(f'f{n}' for n in range(10))}]}}\n",
            "defaults.key_fields: should have at most 9 items",
        ),
        (
            "version: 1\nactions:\n  r:\n    key_fields: [amount, amount]\n",
            "actions.r.key_fields: names a field twice",
        ),
        (
            "version: 1\nactions:\n  r:\n    key_fields: [amount, Amount]\n",
            "actions.r.key_fields: keys key_fields.amount and key_fields.Amount look alike",
        ),
        (
            'version: 1\nactions:\n  r:\n    key_fields: ["amount\\u200b"]\n',
            'actions.r.key_fields: key key_fields."amount\\u200b" contains U+200B ZERO WIDTH SPACE',
        ),
        (
            "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}}\nactions:\n  r:\n"
            "    key_fields: [memo]\n    editable: {memo: {type: text, max_length: 299}}\n",
            "actions.r.editable.memo: a key field, which a card shows whole, so its max_length may be at "
            "most 294",
        ),
        (
            "version: 1\nremoved_actions: [r]\nactions:\n  r: {}\n",
            "policy: removed_actions lists r, which actions still names",
        ),
        (
            "version: 1\nadmins: {users: [lee]}\n",
            "admins.users.0: should be a Slack user id: U or W, then 2 to 31 capitals or digits "
            "(e.g. U0123ABC)",
        ),
        ("version: 1\nadmins: {}\n", "admins: name at least one approver in users or usergroups"),
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
        "key_fields": ["amount", "currency", "customer"],
        "editable": {"amount": {"type": "decimal", "places": 2, "min": "0.01", "max_length": 3000}},
        "edit_rule": "double(edited.amount) <= double(original.amount)",
        "edit_rule_label": "a refund may be lowered, never raised",
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
    assert len(policy.sha256) == 64 and policy.version == 1


def test_intake_limits_take_the_action_class_over_the_defaults_field_by_field(tmp_path: Path) -> None:
    policy = load(
        tmp_path,
        "version: 1\nunknown_actions: route\n"
        "defaults: {channel: C0X, approvers: {users: [U0A]}, limits: {pending: 20}}\n"
        "actions:\n  bulk: {limits: {per_minute: 600}}\n  plain: {}\n",
    )
    assert policy.limits("bulk") == IntakeLimits(per_minute=600, pending=20)
    assert policy.limits("plain") == IntakeLimits(per_minute=60, pending=20)  # 60 a minute when unset
    assert load_policy(ROOT / "examples" / "policy.yml").limits("issue_refund") == IntakeLimits(60, 100)


def test_an_action_class_the_policy_does_not_name_is_refused_unless_it_routes_unknown_ones(
    tmp_path: Path,
) -> None:
    example = ROOT / "examples" / "policy.yml"
    with pytest.raises(UnknownAction) as raised:
        load_policy(example).route("issue_refnd")  # a typo must not skip the refund rules
    assert str(raised.value) == (
        f"action class 'issue_refnd' is not named in policy v1 ({example}), which refuses unknown "
        "action classes; known: delete_customer, issue_refund"
    )
    routing = tmp_path / "routing.yml"
    routing.write_text(example.read_text().replace("version: 1\n", "version: 1\nunknown_actions: route\n"))
    other = load_policy(routing).route("send_email")
    assert (other.channel, other.approvers.users, other.rules.reject_reason) == (
        "C0APPROVALS",
        ["U0LEAD"],
        "optional",
    )
    assert other.rules.level(0).timeout_seconds == 24 * 3600
    many = "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}}\nactions:\n" + "".join(
        f"  a{n:02}: {{}}\n" for n in range(25)
    )
    with pytest.raises(UnknownAction, match=r"known: a00, a01, .*, a19 \(\+5 more\)$"):
        load(tmp_path, many).route("b")


def facts(amount: object, confidence: float | None = None) -> dict[str, Any]:
    return {"payload": {"amount": amount}, "confidence": confidence, "requester": "agent", "action": "x"}


SMALL = "double(payload.amount) > 0.0 && double(payload.amount) < 50.0"


def test_worked_example_refund_gates() -> None:
    policy = load_policy(ROOT / "examples" / "policy.yml")
    assert policy.gate("issue_refund", facts("49.99")) == Gate(
        False, f"auto_approve: {SMALL}", says="the auto-approval rule held: refunds under 50 are automatic"
    )
    assert policy.gate("issue_refund", facts("50.00")) == Gate(
        True,
        f"auto_approve did not hold: {SMALL}",
        1,
        "the auto-approval rule did not hold: refunds under 50 are automatic",
    )
    assert policy.gate("issue_refund", facts("10000")) == Gate(
        True,
        f"auto_approve did not hold: {SMALL}; 2 approvals because double(payload.amount) >= 10000.0",
        2,
        "the auto-approval rule did not hold: refunds under 50 are automatic; "
        "2 approvals needed: refunds from 10,000 need two approvers",
    )
    assert policy.gate("issue_refund", facts("-100000.00")).review  # a negative refund is not "small"
    delete = policy.gate("delete_customer", facts("1"))
    assert (delete.reason, delete.says) == (
        "always_review: every delete_customer needs a human",
        "every delete_customer request needs a human",
    )


def test_a_rule_that_cannot_be_evaluated_fails_closed_and_reviewers_read_its_label_not_its_cel() -> None:
    broken = load_policy(ROOT / "examples" / "policy.yml").gate("issue_refund", facts("fifty"))
    assert broken.review and broken.approvals == 2  # reviewed, by the largest quorum listed
    assert broken.says == (
        "the auto-approval rule could not be evaluated: refunds under 50 are automatic; "
        "2 approvals needed because the quorum rule could not be evaluated: "
        "refunds from 10,000 need two approvers"
    )
    error = "RuntimeError: Function 'double' error: string parse error: invalid float literal."
    assert broken.reason.startswith(f"auto_approve could not be evaluated ({SMALL}): {error}")
    assert [e.split(": ")[0] for e in broken.errors] == ["auto_approve", "require[0].when"]
    assert all(error in e for e in broken.errors)


def test_without_labels_reviewers_read_plain_words(tmp_path: Path) -> None:
    policy = load(
        tmp_path,
        """\
version: 1
defaults: {channel: C0X, approvers: {users: [U0A, U0B]}}
actions:
  refund:
    auto_approve: "payload.amount < 50"
    require: [{when: "payload.amount >= 1000", approvals: 2}]
  email: {review_when: "confidence < 0.9"}
  deploy: {}
""",
    )
    gates = [
        policy.gate("refund", facts(100)),
        policy.gate("refund", facts(5000)),
        policy.gate("refund", facts("12")),  # a string compared with a number
        policy.gate("email", facts("1", 0.5)),
        policy.gate("email", facts("1", None)),
        policy.gate("deploy", facts("1")),
    ]
    assert [gate.says for gate in gates] == [
        "the auto-approval rule did not hold",
        "the auto-approval rule did not hold; 2 approvals needed by the quorum rule",
        "the auto-approval rule could not be evaluated; "
        "2 approvals needed because the quorum rule could not be evaluated",
        "the review rule held",
        "the review rule could not be evaluated",
        "the policy reviews every deploy request",
    ]
    assert not any("payload" in gate.says or "confidence" in gate.says for gate in gates)
    assert gates[2].errors[0].startswith("auto_approve: TypeError: No such overload")
    assert gates[4].reason.startswith("review_when could not be evaluated (confidence < 0.9): TypeError")
    # the rule the Details modal shows after "Policy vN rule:", so it names no version itself
    assert gates[5].reason == "no auto_approve or review_when: every deploy needs a human"


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
    assert policy.gate("send_email", facts("1", 0.95)).review is False
    assert policy.gate("send_email", facts("1", 0.5)).review is True
    assert policy.gate("send_email", facts("1", None)).review is True
    assert policy.gate("wipe", facts("1")).review is True


def test_the_stored_reason_tells_a_request_the_gate_let_through(tmp_path: Path) -> None:
    """`let_through(reason)` (the card sweep's test of a stored pending row) holds exactly for the
    reasons of gates that let a request through, whichever rule decided and however it failed."""
    policy = load(
        tmp_path,
        """\
version: 1
defaults: {channel: C0X, approvers: {users: [U0A, U0B]}}
actions:
  refund:
    auto_approve: "payload.amount < 50"
    review_when: "confidence < 0.9"
    require: [{when: "payload.amount >= 1000", approvals: 2}]
  email: {review_when: "confidence < 0.9"}
  deploy: {}
  wipe: {always_review: true, auto_approve: "true"}
""",
    )
    asked = [("refund", 10, None), ("refund", 100, 0.95), ("refund", 100, 0.5), ("refund", 5000, None)]
    asked += [("refund", "x", 0.5), ("email", 1, 0.95), ("email", 1, 0.5), ("email", 1, None)]
    asked += [("deploy", 1, None), ("wipe", 1, None)]
    gates = [policy.gate(action, facts(amount, confidence)) for action, amount, confidence in asked]
    assert [gate.review for gate in gates] == [False, False, True, True, True, False, True, True, True, True]
    assert [let_through(gate.reason) for gate in gates] == [not gate.review for gate in gates]
    assert not let_through(None)


def test_hot_reload_and_a_broken_reload_keeps_the_last_good_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(
        "version: 1\nunknown_actions: route\ndefaults: {channel: C0X, approvers: {users: [U0A]}}\n"
    )
    holder = PolicyHolder(path)
    path.write_text(
        "version: 2\nunknown_actions: route\ndefaults: {channel: C0Y, approvers: {users: [U0A]}}\n"
    )
    assert holder.current().version == 1  # not yet: it may still be being written
    settled(path)
    assert holder.current().version == 2 and holder.current().route("a").channel == "C0Y"
    path.write_text("version: 3\ndefaults: {channel: not-a-channel}\n")
    settled(path)
    with caplog.at_level(logging.ERROR):
        assert holder.current().version == 2
        assert holder.current().version == 2
    assert next(r.message for r in caplog.records if "POLICY NOT RELOADED" in r.message).startswith(
        "POLICY NOT RELOADED, version 2 stays in force:"
    )
    assert len([r for r in caplog.records if "POLICY NOT RELOADED" in r.message]) == 1  # said once per file
    path.write_text("version: 4\ndefaults: {channel: C0Z, approvers: {users: [U0A]}}\n")
    settled(path)
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
    assert good.stdout.endswith("  any other action class: refused (unknown_actions: refuse)\n")
    bad = tmp_path / "bad.yml"
    bad.write_text("version: 1\nactions:\n  refund:\n    chanel: C0X\n")
    result = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "policy", "check", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "actions.refund.chanel: unknown field" in result.stderr
    missing = tmp_path / "nonexist.yml"
    for args in ([str(missing)], ["examples/policy.yml", str(missing)]):  # FILE, or NEW, not there
        unread = subprocess.run(
            [sys.executable, "-m", "countersign.cli", "policy", "check", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert (unread.returncode, unread.stdout) == (2, "")  # bad input, as for every command (README)
        assert unread.stderr == f"countersign: error: {missing}: cannot read (No such file or directory)\n"


def test_rules_may_read_the_names_their_macros_bind(tmp_path: Path) -> None:
    """`x`, `tag`, `line` and `a` are bound by comprehension macros, not misspelt variables; the
    gate's facts are exactly the variables its rules are checked against."""
    path = tmp_path / "policy.yml"
    path.write_text(
        "version: 1\ndefaults: {channel: C0X, approvers: {users: [U0A]}}\nactions:\n  r:\n"
        "    auto_approve: 'payload.lines.all(x, x.amount < 5)\n"
        "      && payload.tags.exists(tag, tag == requester)'\n"
        "    edit_rule: 'edited.lines.map(line, line.amount).all(a, a >= 0)'\n"
    )
    policy = load_policy(path)
    request = ApprovalRequestV1.model_validate(
        {
            "action": "r",
            "summary": "s",
            "requester": "bot",
            "idempotency_key": "k1",
            "payload": {"lines": [{"amount": 1}], "tags": ["bot"]},
        }
    )
    facts = facts_of(request)
    assert set(facts) == set(GATE_VARIABLES)
    assert policy.gate("r", facts).review is False
    assert policy.gate("r", facts | {"requester": "other"}).review is True
