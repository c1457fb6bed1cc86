"""The router worker as a real process: it survives its own SIGKILL without leaving anything behind
that could take the next job (a forked child holding the dead worker's blocked Redis command)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis
from rq import Worker

from countersign.router.client import ApprovalClient
from countersign.sandbox import Sandbox

from .helpers import wait_for
from .test_flow import refund

ROOT = Path(__file__).resolve().parent.parent


def children(pid: int) -> list[int]:
    """Process ids whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "countersign.cli", "worker"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_a_killed_worker_leaves_nothing_that_steals_the_next_job(
    env: dict[str, str], redis: Redis, client: ApprovalClient, sandbox: tuple[Sandbox, str]
) -> None:
    first = start_worker(env)
    try:
        wait_for(lambda: Worker.all(connection=redis), what="the worker to register")
        helpers = wait_for(lambda: children(first.pid), what="the sweep process")
        first.send_signal(signal.SIGKILL)
        first.wait()
        wait_for(lambda: not any(alive(pid) for pid in helpers), what="the worker's children to exit")

        request_id = client.request(refund(run_id="while-down"))
        second = start_worker(env)
        try:
            wait_for(
                lambda: [m for m in sandbox[0].messages() if request_id in str(m["blocks"])],
                timeout=20,
                what="the new worker to post the card",
            )
        finally:
            second.terminate()
            second.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
