"""Loading the policy file: every mistake is one line naming the file, the action class and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from countersign.router.policy import PolicyError, load_policy


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "policy.yml"
    path.write_text(text)
    return load_policy(path)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("version: 1\nactions:\n  refund:\n    chanel: C0X\n", "actions.refund.chanel: unknown field"),
        ("version: 1\nactions:\n  refund:\n    timeout: 4h\n", "actions.refund.timeout: unknown field"),
        ("version: true\n", "version: Input should be a valid integer"),
        ("version: 1\nversion: 2\n", "key written twice: version"),
        (
            "version: 1\ndefaults: {approvers: {users: []}}\n",
            "defaults.approvers.users: List should have at least 1 item",
        ),
        (
            "version: 1\ndefaults: {approvers: {users: [U0A], usergroups: [S0F]}}\n",
            "defaults.approvers.usergroups: user groups are not supported by this version yet",
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
        ("version: [1\n", "not valid YAML"),
    ],
)
def test_mistakes_name_the_file_and_the_field(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(PolicyError) as raised:
        load(tmp_path, text)
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'policy.yml'}: ") and error in message and "\n" not in message


def test_route_takes_the_action_class_over_the_defaults(tmp_path: Path) -> None:
    policy = load_policy(Path(__file__).parent.parent / "examples" / "policy.yml")
    refund = policy.route("issue_refund")
    assert (refund.channel, refund.approvers) == ("C0FINANCE", ("U0LEAD", "U0ALICE"))
    assert refund.rules == {
        "editable": {"amount": {"type": "decimal", "places": 2, "min": "0.01", "max_length": 3000}},
        "edit_rule": "edited.amount <= original.amount",
        "reject_reason": "required",
        "grant_ttl": 900,
        "self_approval": False,
    }
    other = policy.route("send_email")
    assert (other.channel, other.approvers, other.rules["reject_reason"]) == (
        "C0APPROVALS",
        ("U0LEAD",),
        "optional",
    )
    assert len(policy.sha256) == 64 and policy.version == 1
