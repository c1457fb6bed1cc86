"""Trial finding: a policy file a live reload refused (version 1 after version 2, without the two
action classes version 2 added) was taken without a word when the router restarted on it, and a
version going back was never flagged, live or at start. The router now records each version it
takes (`policy_versions`) and compares the file it starts on with the last one, and with the
highest version a request recorded: one warning line per finding, naming both versions and the
classes dropped. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from countersign.router.reload import PolicyHolder, against_history
from countersign.store import Store
from countersign.store.policies import last_taken
from tests.helpers import settled
from tests.helpers.builders import new_request

VERSION_1 = """\
version: 1
defaults: {channel: C0APPROVALS, approvers: {users: [U0LEAD]}}
actions:
  issue_refund: {channel: C0FINANCE}
"""
VERSION_2 = VERSION_1.replace("version: 1", "version: 2") + (
    "  delete_customer: {channel: C0FINANCE}\n  send_email: {}\n"
)
RELOAD_LOG = "countersign.router.reload"


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.name == RELOAD_LOG and r.levelno >= logging.WARNING]
    caplog.clear()
    return lines


def _start(path: Path, store: Store, caplog: pytest.LogCaptureFixture) -> tuple[PolicyHolder, list[str]]:
    """A router process starting on `path`: its policy loaded, then compared with the database."""
    holder = PolicyHolder(path)
    with caplog.at_level(logging.WARNING, logger=RELOAD_LOG):
        against_history(holder, store.engine)
    return holder, _lines(caplog)


def test_a_restart_on_a_file_a_reload_refused_says_what_it_drops_and_that_its_version_goes_back(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(VERSION_1)
    holder, said = _start(path, store, caplog)
    assert said == []  # a first run, on an empty database
    path.write_text(VERSION_2)
    settled(path)
    with caplog.at_level(logging.WARNING, logger=RELOAD_LOG):
        assert holder.current().version == 2  # a live reload takes it, and records it
        path.write_text(VERSION_1)
        settled(path)
        assert holder.current().version == 2  # and refuses version 1 back
    assert any(line.startswith("POLICY NOT RELOADED, version 2 stays in force") for line in _lines(caplog))
    two = last_taken(store.engine)
    assert two is not None and (two.version, two.actions) == (
        2,
        ["delete_customer", "issue_refund", "send_email"],
    )

    restarted, said = _start(path, store, caplog)  # the router restarted on the file put back
    assert restarted.current().version == 1  # taken: nothing else is in force
    assert len(said) == 2, said
    assert said[0].startswith(
        f"POLICY DROPS ACTION CLASSES AT START: {path} (version 1, sha256 {restarted.current().sha256[:12]}) "
        f"does not name delete_customer, send_email of version 2 (sha256 {two.sha256[:12]}), the version in "
        "force before (since "
    ), said[0]
    assert "restore them, or list them under removed_actions to remove them" in said[0]
    assert said[1].startswith(
        f"POLICY VERSION GOES BACK: {path} says version 1, below version 2 in force before; "
    ), said[1]

    assert _start(path, store, caplog)[1] == []  # said once: version 1 is the one in force now


def test_a_start_below_a_version_requests_recorded_is_flagged(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A database whose requests recorded version 5 (before versions were recorded as taken)."""
    new_request(store, policy_version=5)
    path = tmp_path / "policy.yml"
    path.write_text(VERSION_2)
    assert _start(path, store, caplog)[1] == [
        f"POLICY VERSION GOES BACK: {path} says version 2, below version 5 already recorded on requests; "
        "requests and decisions under it record version 2, so the version no longer tells which policy "
        "came later: give it a version above 5 (a rollback is a new version too)"
    ]
    path.write_text(VERSION_2.replace("version: 2", "version: 6"))
    assert _start(path, store, caplog)[1] == []


def test_a_live_reload_to_a_lower_version_is_taken_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(VERSION_2)
    holder = PolicyHolder(path)
    path.write_text(VERSION_2.replace("version: 2", "version: 1").replace("C0APPROVALS", "C0OTHER"))
    settled(path)
    with caplog.at_level(logging.WARNING, logger=RELOAD_LOG):
        assert holder.current().version == 1
    assert f"POLICY VERSION GOES BACK: {path} says version 1, below version 2 in force; " in "\n".join(
        _lines(caplog)
    )


def test_policy_check_old_new_warns_of_a_lower_version_as_the_reload_does(tmp_path: Path) -> None:
    old, new = tmp_path / "old.yml", tmp_path / "new.yml"
    old.write_text(VERSION_2)
    new.write_text(VERSION_2.replace("version: 2", "version: 1"))
    checked = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "policy", "check", str(old), str(new)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert checked.returncode == 0, checked
    assert checked.stderr.startswith(
        f"countersign: warning: POLICY VERSION GOES BACK: {new} says version 1, below version 2 in force; "
    ), checked.stderr
