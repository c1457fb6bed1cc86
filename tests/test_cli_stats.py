"""`countersign stats --action ACTION` for a class with no request in the window says why the table
is empty, on SQLite and PostgreSQL. Trial finding: `--action nothing_at_all` printed an empty table
and nothing else; a misspelled class only a dead-lettered request named is listed with it."""

from __future__ import annotations

import json

import pytest

from countersign.cli import main
from countersign.router.runtime import Runtime


def test_stats_of_an_action_class_no_request_used_says_whether_the_policy_names_it(
    env: dict[str, str], runtime: Runtime, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    misspelled = {"request": {"action": "issue_refnd", "payload": {"amount": "5.00"}}}
    runtime.store.dead_letter("job-refnd", "action class issue_refnd is not in the policy", misspelled)

    assert main(["stats", "--action", "nothing_at_all"]) == 0
    printed = capsys.readouterr()
    assert (
        "countersign stats: nothing_at_all is not an action class: the policy does not name it and no "
        in (printed.err)
    )
    assert "no request used it since " in printed.err and printed.err.endswith(" UTC\n")

    assert main(["stats", "--action", "issue_refund", "--json"]) == 0  # named by the policy, never used
    printed = capsys.readouterr()
    assert json.loads(printed.out)["actions"] == {}
    assert printed.err.startswith(
        "countersign stats: issue_refund is in the policy, and no request used it since "
    )

    assert main(["stats", "--action", "issue_refnd", "--json"]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out)["actions"]["issue_refnd"]["dead_lettered"] == 1
    assert printed.err == ""

    monkeypatch.delenv("COUNTERSIGN_POLICY")
    assert main(["stats", "--action", "nothing_at_all"]) == 0
    assert "(COUNTERSIGN_POLICY unset: no policy to ask)" in capsys.readouterr().err
