"""Validation errors read as words wherever they reach a person (`countersign.validation`): a
request's fields (the agent's client, `countersign request`, the HTTP API), the policy file, a
setting, `token create`, and the JSON schema an agent reads. Trial finding: `String should match
pattern '^[a-z0-9_.-]{1,64}$'` and pydantic's own phrasing reached users."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from countersign.api.models import OutcomeReport
from countersign.config import Settings
from countersign.decision import Decision
from countersign.exceptions import InvalidRequest, PolicyError
from countersign.router.policy import PolicyFile, parse_policy
from countersign.schema import ApprovalRequestV1, IntakeMessage, parse
from tests.helpers import README_REQUEST
from tests.helpers.builders import refund

# What a person should never read: pydantic's subjects and stock phrases, or a regex.
RAW = ("String should", "Input should", "List should", "Field required", "match pattern", "^[", "]{")


def _with_pattern(schema: Any) -> Iterator[dict[str, Any]]:
    """Every node of a JSON schema that has a `pattern`."""
    if isinstance(schema, dict):
        if "pattern" in schema:
            yield schema
        for child in schema.values():
            yield from _with_pattern(child)
    elif isinstance(schema, list):
        for child in schema:
            yield from _with_pattern(child)


@pytest.mark.parametrize(
    "model", [ApprovalRequestV1, IntakeMessage, PolicyFile, Settings, OutcomeReport, Decision]
)
def test_every_pattern_a_person_can_miss_says_in_words_what_it_allows(model: type[BaseModel]) -> None:
    """A `pattern` without words (a bare `Field(pattern=...)`) would put its regex in the error."""
    for node in _with_pattern(model.model_json_schema()):
        words = node.get("description", "")
        assert words and not any(raw in words for raw in RAW), node


BAD_FIELDS = {
    "action": "Refund Now!",
    "on_behalf_of": "alice",
    "summary": "",
    "confidence": 1.5,
    "resume": {"queue": "refund agent", "func": "agent.resume"},
    "reason": 7,
    "colour": "red",
}


def test_a_bad_request_is_named_field_by_field_in_one_line_of_words() -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(ApprovalRequestV1, refund(**BAD_FIELDS))
    assert str(refused.value) == (
        "action: should be 1 to 64 lower-case letters, digits, '_', '.' or '-' (e.g. issue_refund); "
        "summary: should not be empty; reason: should be a string; "
        "on_behalf_of: should be a Slack user id: U or W, then 2 to 31 capitals or digits (e.g. U0123ABC); "
        "confidence: should be 1 or less; "
        "resume.queue: should be 1 to 128 letters, digits, '_', '.', ':' or '-' (e.g. refund-agent); "
        "colour: unknown field"
    )
    with pytest.raises(InvalidRequest) as missing:
        parse(ApprovalRequestV1, {"action": "issue_refund", "payload": {}})
    assert str(missing.value) == "summary: required; requester: required"


def test_a_policy_error_names_the_field_in_words(tmp_path: Path) -> None:
    raw = (
        b"version: 1\ndefaults:\n  channel: general\n  approvers: {users: [U0LEAD], usergroups: [finance]}\n"
    )
    with pytest.raises(PolicyError) as refused:
        parse_policy(tmp_path / "p.yml", raw)
    assert str(refused.value) == (
        f"{tmp_path / 'p.yml'}: defaults.channel: should be a Slack channel id: C, G, D or U, then 2 to 31 "
        "capitals or digits (e.g. C0123ABC); defaults.approvers.usergroups.0: should be a Slack user "
        "group id: S, then 2 to 31 capitals or digits (e.g. S0123ABC)"
    )


def _cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`countersign ARGS` in `cwd` (no `.run/.env` there), with `env` alone."""
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        cwd=cwd,
    )


def test_the_command_line_says_the_same_words_on_one_line(tmp_path: Path) -> None:
    """`countersign request` (checked before anything is sent: no Redis or database needed),
    `token create` and a setting: one line each, exit 2 (bad input), no regex."""
    request = [*README_REQUEST]
    request[request.index("issue_refund")] = "Issue-Refund"
    refused = _cli(tmp_path, *request, "--on-behalf-of", "lee")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "countersign: error: action: should be 1 to 64 lower-case letters, digits, '_', '.' or '-' "
        "(e.g. issue_refund); on_behalf_of: should be a Slack user id: U or W, then 2 to 31 capitals or "
        "digits (e.g. U0123ABC)\n"
    )
    token = _cli(tmp_path, "token", "create", "--requester", "agent", "--actions", "issue_refund,Wire Money")
    assert (token.returncode, token.stderr) == (
        2,
        "countersign: error: --actions: each action class should be 1 to 64 lower-case letters, digits, "
        "'_', '.' or '-' (e.g. issue_refund); got 'issue_refund,Wire Money'\n",
    )
    setting = _cli(tmp_path, "web", env={"PORT": "eighty"})
    assert (setting.returncode, setting.stderr) == (
        2,
        "countersign: error: PORT: should be a whole number (got 'eighty')\n",
    )
    assert not any(raw in out for raw in RAW for out in (refused.stderr, token.stderr, setting.stderr))
