"""New-user trial, finding 1: a policy file that breaks while the stack runs never breaks a process
that reads the policy only afterwards. Every process loads the policy as it starts
(`reload.at_start`); the worker's sweep, a fresh interpreter, is handed the worker's version; each
keeps that last good version when the file breaks, says so once, and the admin's Home tab (with
"Gates", which only the policy's `admins` see) is still published, by the sweep and on opening."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from redis import Redis

from countersign.router import homedue, reload
from countersign.router.runtime import current
from countersign.router.worker import start_sweep
from countersign.sandbox import Sandbox
from tests.conftest import POLICY
from tests.helpers import settled, wait_for

ADMIN = "U0LEAD"


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(POLICY + f"admins: {{users: [{ADMIN}]}}\n")
    return path


def _break(path: Path) -> None:
    """Save a typo in a field name the way an editor saves: a new file renamed over the old one."""
    typo = path.with_suffix(".tmp")
    typo.write_text(path.read_text().replace("reject_reason: required", "reject_reasn: required"))
    os.replace(typo, path)
    settled(path)


def _gates_shown(sb: Sandbox) -> bool:
    view = sb.home(ADMIN)
    return view is not None and "gates-lines" in json.dumps(view)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # policy behaviour, not SQL
def test_a_sweep_first_reading_the_policy_after_it_broke_keeps_the_last_good_one_and_publishes_home(
    env: dict[str, str],
    policy_file: Path,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    capfd: pytest.CaptureFixture[str],
) -> None:
    sb, _ = sandbox
    good = reload.at_start(policy_file).current()  # the worker starting, before anything breaks
    runtime = current()
    _break(policy_file)
    sweeper = start_sweep(runtime)  # a fresh interpreter that has never read the file
    try:
        homedue.mark_due(redis, [ADMIN], seconds=0)
        wait_for(lambda: _gates_shown(sb), timeout=30, what="the sweep to publish the admin's Home")
    finally:
        sweeper.terminate()
        sweeper.join(10)
    assert runtime.policy.sha256 == good.sha256
    err = capfd.readouterr().err
    assert err.count("POLICY NOT RELOADED, version 3 stays in force") == 1, err  # the sweep's, once
    assert "reject_reasn" in err and "sweep step home failed" not in err


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_web_opening_home_after_the_file_broke_keeps_the_last_good_policy(
    env: dict[str, str], policy_file: Path, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    reload.at_start(policy_file)  # `countersign web` starting (its gunicorn workers inherit it)
    _break(policy_file)
    assert sb.open_home(ADMIN) == (200, "")
    wait_for(lambda: _gates_shown(sb), what="the admin's Home with Gates")
