"""The RQ worker class countersign's workers share: the router's (`router/worker.py`) and the agent's
(`agent/worker.py`).

RQ's `SimpleWorker` runs each job in the worker process instead of forking a work-horse for it: the
job's modules, the database pool and the Slack and Redis clients are loaded once, not once a job
(BENCHMARKS.md, "Resume jobs per second" and "Intake throughput"). On top of it:

- **A job's heartbeat while it runs.** RQ's forking worker renews a running job's heartbeat every
  `job_monitoring_interval` seconds (30) from the parent, and gives it that interval plus 60 s;
  `SimpleWorker` has no parent to do so and gives a job its whole timeout plus 60 s instead (660 s for
  a resume job) before RQ's maintenance may call it abandoned. This class keeps the forking worker's
  TTL and renews it from a thread while the job runs (RQ's `maintain_heartbeats`), so a killed
  worker's job is found abandoned and retried about 90 s after its last heartbeat. RQ finds abandoned
  jobs by the started registry's scores, which each execution's heartbeat sets
  (`StartedJobRegistry.cleanup`), not by the worker's own hash.
- **The worker's own heartbeat at most every `HEARTBEAT_EVERY_SECONDS`.** RQ renews the worker's hash
  (`rq:worker:<name>`: HSET `last_heartbeat`, EXPIRE it and its executions set) four or five times a
  job: before and after each dequeue, as it prepares the job, and after it. That hash is what
  `rq info` and `Worker.all` show; nothing in RQ decides anything on it but whether the worker is
  alive, and it stays alive `worker_ttl` + 60 s (480 s by default) after a beat, far longer than the
  few seconds a skipped beat is late. A beat always sets that longer TTL (RQ sets a running job's
  shorter one as it prepares it): a worker that then waits idle on an empty queue, with its last beat
  skipped, must not vanish from `rq info` (RQ's blocking dequeue waits `worker_ttl` - 15 s).
- **The worker's state written when it changes.** RQ writes `idle` before each dequeue, `busy` as it
  prepares a job and `idle` after it; the second `idle` in a row is not sent again (but is after a
  heartbeat, so a hash Redis lost gets its state back).
- **`rq suspend` checked at most every `HEARTBEAT_EVERY_SECONDS`** (RQ checks before every job, a
  MULTI/EXISTS/EXEC): a suspension takes effect within that time; a suspended worker still looks
  every second whether it was lifted.
- **A finished job's execution record removed once**: RQ removes it as the job is deleted
  (`result_ttl=0`) and then again in the same transaction (`cleanup_execution`).
- **No heartbeat on the job hash as it ends** (`handle_execution_ended`): its `last_heartbeat` field is
  read by nothing (the started registry's score is the job's liveness), and the job is deleted or
  marked finished or failed in the next transaction.

Each of these saves Redis commands a job (`bench/pause_vs_langgraph.py --redis-profile`: BENCHMARKS.md,
"Issue 14, second pass"); RQ's own job records (the execution, the registries, the job hash) are
untouched, so RQ's maintenance, retries, `rq info` and the failed registry work as with `SimpleWorker`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis.client import Pipeline
from redis.exceptions import RedisError
from rq import SimpleWorker
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.utils import now
from rq.worker import BaseWorker, WorkerStatus

HEARTBEAT_EVERY_SECONDS = 5.0
"""The worker's own heartbeat is sent at most this often (RQ's default TTL of it: 480 s)."""


class CountersignWorker(SimpleWorker):
    """RQ's non-forking worker with a heartbeat thread while a job runs, the worker's heartbeat at most
    every `heartbeat_every` seconds, and its state written only when it changes (module docstring).
    Takes `SimpleWorker`'s arguments."""

    heartbeat_every: float = HEARTBEAT_EVERY_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._beaten_at = float("-inf")  # time.monotonic() of the last heartbeat sent
        self._state_sent: str | None = None
        self._suspension_checked_at = float("-inf")

    def execute_job(self, job: Job, queue: Queue) -> None:
        execution = self.prepare_execution(job)
        with _heartbeats(self, job, execution):
            self.perform_job(job, queue, execution)
        self.set_state(WorkerStatus.IDLE)

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        """RQ's heartbeat TTL of a job on a forking worker: its monitoring interval plus 60 s (at most
        its remaining timeout plus 60 s), which `_heartbeats` renews while the job runs."""
        return BaseWorker.get_heartbeat_ttl(self, job, working_time)

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        """RQ's worker heartbeat, unless one was sent less than `heartbeat_every` seconds ago; sent
        with at least the worker's idle TTL (`worker_ttl` + 60 s)."""
        if time.monotonic() - self._beaten_at < self.heartbeat_every:
            return
        self._beaten_at = time.monotonic()
        self._state_sent = None  # the next state is sent again, should the hash have been lost
        super().heartbeat(max(timeout or 0, self.worker_ttl + 60), pipeline)

    def maintain_heartbeats(self, job: Job, execution: Execution) -> None:
        """RQ's heartbeat of a running job, its execution and the worker, all three always sent (RQ
        reads the worker's part of the answer)."""
        self._beaten_at = float("-inf")
        super().maintain_heartbeats(job, execution)

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> None:
        """RQ's `set_state`, not sent again when Redis has that state already."""
        self._state = state
        if state != self._state_sent:
            super().set_state(state, pipeline)
            self._state_sent = state

    def check_for_suspension(self, burst: bool) -> None:
        """RQ's check for `rq suspend` (and its wait while suspended) at most every `heartbeat_every`
        seconds: a suspension stops the worker within that time instead of before its next job."""
        if time.monotonic() - self._suspension_checked_at < self.heartbeat_every:
            return
        super().check_for_suspension(burst)
        self._suspension_checked_at = time.monotonic()

    def cleanup_execution(self, job: Job, pipeline: Pipeline, execution: Execution | None = None) -> None:
        """RQ's removal of a job's execution record, but for a job that succeeded and is deleted in the
        same transaction (`result_ttl=0`, no repeat, no rate limit), whose deletion removes the
        record already (RQ's `Job.delete` deletes its executions): only this worker forgets it."""
        if execution is not None and _deleted_on_success(job, self.default_result_ttl):
            self.executions.pop(execution.id, None)
            return
        super().cleanup_execution(job, pipeline, execution)

    def handle_execution_ended(self, job: Job, queue: Queue, heartbeat_ttl: int) -> None:
        """The job has returned or raised: its end time, without RQ's heartbeat on the job's hash."""
        job.ended_at = now()


def _deleted_on_success(job: Job, default_result_ttl: int) -> bool:
    """RQ's `handle_job_success` deletes `job` with its executions (`Job.cleanup` with a TTL of 0):
    it finished, keeps no result, does not repeat and has no rate limit (whose live execution RQ
    keeps)."""
    return (
        job.get_status(refresh=False) == JobStatus.FINISHED
        and job.get_result_ttl(default_result_ttl) == 0
        and not job.repeats_left
        and not job.has_rate_limit
    )


@contextmanager
def _heartbeats(worker: BaseWorker, job: Job, execution: Execution) -> Iterator[None]:
    """Renew the worker's, the job's and its execution's heartbeats every `job_monitoring_interval`
    seconds while the enclosed job runs (RQ's `maintain_heartbeats`, on a thread of its own)."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(worker.job_monitoring_interval):
            try:
                worker.maintain_heartbeats(job, execution)
            except RedisError as exc:  # the next beat tries again; the job goes on
                worker.log.warning("job %s: heartbeat not sent (%s)", job.id, exc)

    thread = threading.Thread(target=beat, name=f"heartbeat {job.id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
