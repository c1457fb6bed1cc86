"""`countersign token create` checks its action classes against `COUNTERSIGN_POLICY`, as a user runs
it: a class the policy refuses as unknown gets no token (exit 2, one line naming it and the
policy's classes); one the policy routes by its defaults does. Trial finding: `--actions
nonexistent_action` made a token whose every request would be refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from countersign.router.runtime import Runtime
from tests.api.test_tokens import token


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the command, not SQL
def test_an_action_class_the_policy_refuses_gets_no_token(
    env: dict[str, str], runtime: Runtime, tmp_path: Path
) -> None:
    refused = token(env, "create", "--requester", "refund-agent", "--actions", "issue_refund,isue_refund")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"countersign: error: --actions: action class 'isue_refund' is not named in policy v3 "
        f"({env['COUNTERSIGN_POLICY']}), which refuses unknown action classes; "
        "known: issue_refund, send_email"
    ]
    assert json.loads(token(env, "list").stdout) == []

    routed = tmp_path / "routed.yml"
    routed.write_text(Path(env["COUNTERSIGN_POLICY"]).read_text() + "unknown_actions: route\n")
    made = token(
        {**env, "COUNTERSIGN_POLICY": str(routed)}, "create", "--requester", "a", "--actions", "isue_refund"
    )
    assert made.returncode == 0, made.stderr
    assert [t["actions"] for t in json.loads(token(env, "list").stdout)] == [["isue_refund"]]
