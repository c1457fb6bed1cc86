"""Test helpers, shared by every test module (no test module imports another).

Here: waiting on a condition with a deadline (`wait_for`), for a rewritten policy file to be one a
process may take (`settled`), running RQ queues in-process (`drain`)
and a job RQ scheduled for later now (`run_scheduled`), a channel busy with earlier cards
(`hold_channel`), the README's first request
(`README_REQUEST`), an empty outbox row (`empty_resume`), a reviewer check that refuses nobody
(`anyone`), and a process's children and whether one is alive (`children`, `alive`). Beside it:
`agent` (the test agent whose resume jobs record what they were given), `builders` (requests,
cards and what became of them), `api` (the web app served by uvicorn), `receiver` (a webhook
receiver on a local port), `stack` (`countersign run` as a user runs it), `redis_server` (a
redis-server of the tests' own) and `strategies` (hypothesis strategies).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from redis import Redis
from rq.serializers import JSONSerializer

from countersign.router import refreshes
from countersign.router.jobs import INTAKE_QUEUE, json_queue, resume_job_id
from countersign.router.reload import SETTLE_SECONDS
from countersign.router.runtime import current
from countersign.store import Request, ResumeEvent
from countersign.workers import CountersignWorker

T = TypeVar("T")

# The README's `countersign request` command (the first request a new user sends), as argv.
README_REQUEST = [
    "request", "--action", "issue_refund", "--payload", '{"amount": "120.00", "currency": "USD"}',
    "--summary", "Refund ACME", "--requester", "refund-agent", "--run-id", "r1", "--step", "s1",
    "--resume-queue", "refund-agent", "--resume-func", "examples.refund_agent.resume",
]  # fmt: skip


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def ctrl_c_reaches_it() -> None:
    """A `preexec_fn` for a child a test stops with SIGINT (Ctrl-C): SIGINT at its default action
    there, as a terminal's job has it, even when this test run inherited it ignored. A shell runs a
    background job (`cmd &`) without job control with SIGINT ignored (POSIX, Shell Command
    Language, "Asynchronous Lists"); a child inherits that across exec, and Python then installs no
    KeyboardInterrupt handler, so the child would never see the interrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def settled(path: Path) -> None:
    """Wait until the policy file `path` has not changed for `reload.SETTLE_SECONDS`, so that a
    process looking at it now may take it."""
    wait_for(
        lambda: time.time_ns() - path.stat().st_ctime_ns >= SETTLE_SECONDS * 1e9,
        timeout=SETTLE_SECONDS + 5,
        what=f"{path} to settle",
    )


def drain(redis: Redis, queue: str = INTAKE_QUEUE) -> None:
    """Run every job on `queue` in this process with countersign's worker class (JSON serializer),
    then return; for the router's queue, then also rewrite the cards asked for, as the router's sweep
    does."""
    worker = CountersignWorker([json_queue(queue, redis)], connection=redis, serializer=JSONSerializer)
    worker.work(burst=True)
    if queue == INTAKE_QUEUE:
        refreshes.refresh_requested(current())


def run_scheduled(redis: Redis, job_id: str, queue: str = "countersign") -> None:
    """Run the job `job_id`, which RQ has scheduled to run again later (it returned a `Retry`, or
    raised with retries left), now: move it onto its queue, as RQ's scheduler does once its time
    has come, then `drain` the queue."""
    rq_queue = json_queue(queue, redis)
    job = rq_queue.fetch_job(job_id)
    assert job is not None and job_id in rq_queue.scheduled_job_registry, f"job {job_id} is not scheduled"
    rq_queue.scheduled_job_registry.remove(job)
    rq_queue.enqueue_job(job)
    drain(redis, queue)


def hold_channel(redis: Redis, channel: str, seconds: int = 60) -> None:
    """Make `channel`'s next free posting time `seconds` from now (Redis's clock), as a burst of
    earlier cards would. The cards after it then wait for their times however slowly this machine
    runs the jobs: with the pace alone, a job run more than `PACE_MILLISECONDS` after the one before
    it finds its time already come and posts at once."""
    now_seconds, now_micros = redis.time()
    free = now_seconds * 1000 + now_micros // 1000 + seconds * 1000
    redis.set(f"countersign:pace:{channel}", free, px=seconds * 1000)


def empty_resume(row: Request) -> ResumeEvent:
    """An outbox row with an empty decision, for tests that look only at the state a vote leaves."""
    return ResumeEvent(resume_job_id(row.id), {})


def anyone(row: Request) -> None:
    """A `refuse` for `Store.decide` that lets any reviewer decide, for tests of the transition alone."""
    return None


REPO = Path(__file__).resolve().parents[2]


def countersign(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """`countersign ARGS…` in a process of its own, run from the repository root with this
    environment plus `env`, its output discarded (the caller stops it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "countersign.cli", *args],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches pytest alone; the caller stops it
    )


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM `process` and wait for it; one that has not ended within `timeout` seconds is killed
    (so it cannot take later tests' jobs) and the wait's `TimeoutExpired` raised."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


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
    """Whether process `pid` runs (exists and is not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
