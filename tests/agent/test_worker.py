"""`countersign agent-worker`: the agent's RQ worker runs its resume jobs with the JSON serializer and
runs a retried job again (its scheduler moves it back onto the queue)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis
from rq import Retry

from countersign.router.jobs import json_queue
from tests.helpers import agent, wait_for

ROOT = Path(__file__).parent.parent.parent
QUEUE = "test-agent-retries"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_a_resume_job_that_failed_once_runs_again_and_succeeds(env: dict[str, str], redis: Redis) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "countersign.cli", "agent-worker", QUEUE],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        job = json_queue(QUEUE, redis).enqueue(agent.FLAKY_FUNC, "once", retry=Retry(max=1, interval=1))
        wait_for(lambda: job.get_status(refresh=True) == "finished", timeout=60, what="the retried job")
        assert redis.get("test-agent:flaky:once") == b"2"  # failed once, then ran again from the schedule
    finally:
        worker.terminate()
        worker.wait(timeout=20)


def test_the_agent_worker_needs_the_secret_its_jobs_verify_grants_with() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "agent-worker", QUEUE],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
    )
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "countersign: error: COUNTERSIGN_SECRET is not set; `countersign agent-worker` (execute_approved) "
        "needs it",
    )
