"""The RQ worker class countersign's workers share: the router's (`router/worker.py`) and the agent's
(`agent/worker.py`).

RQ's `SimpleWorker` runs each job in the worker process instead of forking a work-horse for it: the
job's modules, the database pool and the Slack and Redis clients are loaded once, not once a job
(BENCHMARKS.md, "Resume jobs per second" and "Intake throughput"). On top of it:

- **An idle worker's maintenance on time.** RQ runs its maintenance (abandoned jobs found in the
  started registry, the scheduler restarted when its process died) between dequeues only, and an idle
  worker blocks in its dequeue for `worker_ttl` - 15 s (405 s by default, `BaseWorker.dequeue_timeout`):
  a worker that was idle when another was killed found that one's job only about 7 minutes later,
  whatever its `maintenance_interval`. This class waits at most `maintenance_interval` seconds in a
  dequeue (one more blocking command an interval while idle), so maintenance runs every interval.
- **A scheduler that ends with its worker.** RQ's worker started with `with_scheduler` forks its
  scheduler into a child process, which outlived a SIGKILLed worker: the orphan kept the scheduler's
  locks (and the dead worker's Redis sockets, with its blocked dequeue) for good, so a worker
  started in its place ran no scheduler. This class's scheduler (`_WorkerBoundScheduler`) stops
  once its worker is gone, within its interval (1 s), releasing its locks; the next worker takes
  them as it starts, or at its next maintenance.
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
- **A job started in one transaction** (`prepare_execution`): RQ sends two, the execution record and
  the worker's `busy` state (`prepare_execution`), then the job's start fields, written twice (its
  heartbeat, then its status, start time and worker, which include that heartbeat), and its removal
  from the intermediate queue (`prepare_job_execution`, run by a forking worker's work-horse, which
  this class has not). The started registry, the execution record and the job's status now change
  together.
- **countersign's own jobs deleted in one transaction as they succeed** (`handle_job_success`):
  an intake or resume job (`defaults.OWN_JOB_PREFIXES`) keeps no result (`result_ttl=0`), has no
  dependents (nothing enqueues a job depending on one), no repeat and no group. For such a job RQ
  WATCHes and reads its dependents, reads its status, reads its execution records back twice
  (`Job.delete`: the executions registry's ZREMRANGEBYSCORE, ZRANGE and each record's HGETALL, once
  to take them out of the started registry and once to delete them), then deletes it in a MULTI/EXEC.
  This class deletes the same keys it knows already (the job's hash, dependents, dependencies and
  results, its execution record and registry, its entries in the started registry and the worker's
  executions set, and for a job in a lane its entry in the lane's waiting set) with the worker's
  counters and its `idle` state, in one MULTI/EXEC, then releases the job's lane slot as RQ does
  (`release_slot`), but with the lane's width the job carries (`rate_limit_concurrency`) instead of
  reading it back from the lane's hash (`_release_lane`: one round trip fewer an intake job). Other
  jobs (card rewrites, an agent's own jobs) take RQ's path.
- **A success callback's writes in that transaction**: a callback of one of countersign's own jobs
  may queue its Redis writes onto the transaction that deletes the job (`in_success_transaction`)
  instead of sending them apart (the resume job's marker, `agent.callbacks.resume_done`: one round
  trip fewer a resume job). RQ runs the callback just before that transaction; outside such a
  worker (RQ's own worker classes) the callback writes as before.
- **One heartbeat thread a worker**, not one a job: it beats for whichever job runs (RQ's
  `maintain_heartbeats` every `job_monitoring_interval` seconds of that job) and waits while none
  does; a beat is sent under the thread's lock, so none is under way for a job once it has ended.
- **A warm shutdown that cannot be lost.** RQ's first SIGTERM or SIGINT (`request_stop`) makes the
  next one a cold shutdown and, in a worker not running a job, raises `StopRequested` wherever the
  signal landed. That is an `Exception`: landing in a log call (`logging.Handler.emit` catches every
  `Exception` and prints "--- Logging error ---"), or in any other `except Exception`, it was
  swallowed, the worker went on taking jobs, and only a second signal or a SIGKILL stopped it (seen
  with the log line RQ writes as it takes a job, while its output pipe was full). This class raises
  `_WarmStop`, a `SystemExit`, which no `except Exception` catches and RQ's work loop lets through
  (after its teardown); and a worker that has taken a job off the queue (RQ's dequeue holds it, or
  `execute_job` runs it) counts as busy: it runs that job, then stops.
- **Child processes stopped within `CHILD_STOP_SECONDS`** (`stop_child`): RQ's stop of the worker's
  scheduler (`stop_scheduler`, a SIGTERM) and `multiprocessing` at exit wait for a child without a
  bound, so a child that SIGTERM cannot reach (stopped, or in a C call) held its worker's stop for
  good; it is killed (SIGKILL) after that time instead.

The changes to RQ's bookkeeping save Redis commands or round trips a job
(`bench/pause_vs_langgraph.py --redis-profile`: BENCHMARKS.md, "Issue 14, second pass" and "Issue
14, fifth pass"). RQ's job records (the execution
record, the registries, the job hash, the intermediate queue) hold what they hold with `SimpleWorker`
while a job runs, and are gone when it has succeeded, so RQ's maintenance (abandoned jobs, the
intermediate queue, lanes), retries, `rq info` and the failed registry work as with `SimpleWorker`;
RQ's failure and retry paths are RQ's own.
"""

from __future__ import annotations

import multiprocessing.process
import os
import signal
import time
from collections.abc import Callable
from contextvars import ContextVar
from types import FrameType
from typing import Any

from redis.client import Pipeline
from rq import SimpleWorker
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.rate_limit import RateLimitRegistry
from rq.registry import StartedJobRegistry
from rq.results import Result
from rq.scheduler import RQScheduler
from rq.utils import now
from rq.worker import BaseWorker, WorkerStatus

from .defaults import OWN_JOB_PREFIXES
from .heartbeat import JobHeartbeat
from .outages import lost, summary

HEARTBEAT_EVERY_SECONDS = 5.0
"""The worker's own heartbeat is sent at most this often (RQ's default TTL of it: 480 s)."""
CHILD_STOP_SECONDS = 5.0
"""How long a worker waits for a child process of its own (the router's sweep, RQ's scheduler) to
end after its SIGTERM before it kills it (`stop_child`)."""


class _WarmStop(SystemExit):
    """A warm shutdown of a worker that runs no job, raised where the signal landed instead of RQ's
    `StopRequested`: a `SystemExit`, which no `except Exception` swallows (module docstring)."""


class CountersignWorker(SimpleWorker):
    """RQ's non-forking worker with a heartbeat thread for the running job, the worker's heartbeat at
    most every `heartbeat_every` seconds, its state written only when it changes, a job started in one
    transaction and countersign's own jobs deleted in one as they succeed (module docstring). Takes
    `SimpleWorker`'s arguments."""

    heartbeat_every: float = HEARTBEAT_EVERY_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._beaten_at = float("-inf")  # time.monotonic() of the last heartbeat sent
        self._state_sent: str | None = None
        self._suspension_checked_at = float("-inf")
        self._job_heartbeat = JobHeartbeat(self)
        self._holds_job = False  # execute_job runs: a warm shutdown waits for the job
        self._jobs_run = 0

    @property
    def dequeue_timeout(self) -> int:
        """Seconds an idle worker blocks in a dequeue: RQ's (`worker_ttl` - 15 s), at most
        `maintenance_interval`, so that RQ's maintenance, which runs between dequeues, runs every
        interval while the worker is idle (module docstring)."""
        return max(1, min(super().dequeue_timeout, int(self.maintenance_interval)))

    def _start_scheduler(
        self,
        burst: bool = False,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        """RQ's start of the worker's scheduler (`work(with_scheduler=True)`), with a scheduler that
        stops once this worker is gone (`_WorkerBoundScheduler`): with `burst`, the due jobs moved
        onto their queues now, else the scheduler forked into its own process, if it got its locks.
        Raises `RedisError`."""
        self.scheduler = _WorkerBoundScheduler(
            self.queues,
            connection=self.connection,
            logging_level=logging_level if logging_level is not None else self.log.level,
            date_format=date_format,
            log_format=log_format,
            serializer=self.serializer,
        )
        self.scheduler.acquire_locks()  # type: ignore[no-untyped-call]
        if not self.scheduler.acquired_locks:
            return
        if not burst:
            self.scheduler.start()  # type: ignore[no-untyped-call]
            return
        try:
            self.scheduler.register_birth()
            self.scheduler.enqueue_scheduled_jobs()  # type: ignore[no-untyped-call]
        finally:
            self.scheduler.release_locks()  # type: ignore[no-untyped-call]
            self.scheduler.register_death()

    def execute_job(self, job: Job, queue: Queue) -> None:
        self._holds_job = True
        writes: list[Write] | None = [] if _ends_with_its_job(job, self.default_result_ttl) else None
        token = _SUCCESS_WRITES.set(writes)
        try:
            execution = self.prepare_execution(job)
            with self._job_heartbeat.running(job, execution):
                self.perform_job(job, queue, execution)
            self.set_state(WorkerStatus.IDLE)
        finally:
            _SUCCESS_WRITES.reset(token)
            self._holds_job = False
        self._jobs_run += 1

    def work(self, *args: Any, **kwargs: Any) -> bool:
        """RQ's work loop (same arguments), which a warm shutdown of this worker while it runs no job
        ends by `_WarmStop` (after RQ's teardown). Returns whether it ran any job."""
        try:
            return bool(super().work(*args, **kwargs))
        except _WarmStop:
            return self._jobs_run > 0

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        """RQ's warm shutdown, the handler of a first SIGTERM or SIGINT: the next one is a cold
        shutdown (`request_force_stop`); a worker that holds a job (`execute_job` runs it, or RQ's
        dequeue has just taken it: `_dequeued`) stops after it, as RQ's busy worker does; one that
        holds none stops at once, by `_WarmStop` raised where the signal landed (module docstring)."""
        self._shutdown_requested_date = now()
        signal.signal(signal.SIGINT, self.request_force_stop)
        signal.signal(signal.SIGTERM, self.request_force_stop)
        self.handle_warm_shutdown_request()  # type: ignore[no-untyped-call]
        if not (self._holds_job or self.get_state() == WorkerStatus.BUSY or _dequeued(frame)):
            raise _WarmStop(0)
        self._stop_requested = True
        self.set_shutdown_requested_date()  # type: ignore[no-untyped-call]
        if self.scheduler:
            self.stop_scheduler()

    def stop_scheduler(self) -> None:
        """RQ's stop of the worker's scheduler process (a SIGTERM and a wait), killed if it has not
        ended within `CHILD_STOP_SECONDS` (`stop_child`)."""
        process = self.scheduler._process if self.scheduler else None
        if process is not None and process.pid:
            stop_child(process)

    def teardown(self) -> None:
        """RQ's teardown (the worker's death registered), then the heartbeat thread ended."""
        super().teardown()  # type: ignore[no-untyped-call]
        self._job_heartbeat.stop()

    def prepare_execution(self, job: Job) -> Execution:
        """RQ's `prepare_execution` and `prepare_job_execution` in one transaction: the execution record
        (its hash, the job's executions registry, the started registry, the worker's executions set),
        the worker's `busy` state (and heartbeat, when due), the job's start fields (status, start
        time, worker, heartbeat) written once, and the job taken off the intermediate queue (RQ's
        `remove_from_intermediate_queue`: when the worker has one queue). Raises `RedisError`."""
        with self.connection.pipeline() as pipeline:
            heartbeat_ttl = self.get_heartbeat_ttl(job)
            execution = Execution.create(job, heartbeat_ttl, pipeline=pipeline, worker_name=self.name)
            self.set_state(WorkerStatus.BUSY, pipeline=pipeline)
            self.heartbeat(heartbeat_ttl, pipeline=pipeline)
            job.prepare_for_execution(self.name, pipeline=pipeline)
            pipeline.persist(job.key)
            if len(self.queues) == 1:  # the job came from it: its intermediate queue, no new `Queue`
                pipeline.lrem(self.queues[0].intermediate_queue_key, 1, job.id)
            pipeline.execute()
        self.executions[execution.id] = execution
        return execution

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        """Done by `prepare_execution` already; only the process title, as RQ sets it."""
        self.procline(f"Processing {job.func_name} from {job.origin} since {time.time()}")  # type: ignore[no-untyped-call]

    def handle_job_success(
        self, job: Job, queue: Queue, started_job_registry: StartedJobRegistry, execution: Execution
    ) -> None:
        """RQ's success handling, but for countersign's own jobs (`_ends_with_its_job`) one transaction
        that deletes the job and its execution record by the keys known (no read of them), with the
        worker's counters and `idle` state; then the job's lane slot is released, as RQ does. Raises
        `RedisError`."""
        if not _ends_with_its_job(job, self.default_result_ttl):
            super().handle_job_success(job, queue, started_job_registry, execution)
            return
        assert job.started_at and job.ended_at  # set by perform_job and handle_execution_ended
        with self.connection.pipeline() as pipeline:
            self.increment_successful_job_count(pipeline=pipeline)
            self.increment_total_working_time(job.ended_at - job.started_at, pipeline)
            _delete_succeeded(job, execution, pipeline)
            for write in _SUCCESS_WRITES.get() or ():  # queued by its success callback
                write(pipeline)
            self._send_idle(pipeline)
            pipeline.execute()
        self.executions.pop(execution.id, None)
        _release_lane(job)
        taken = job.ended_at - job.started_at
        self.log.info("Successfully completed job %s in %ss on worker %s", job.id, taken, self.name)

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        """RQ's heartbeat TTL of a job on a forking worker: its monitoring interval plus 60 s (at most
        its remaining timeout plus 60 s), which `heartbeat.JobHeartbeat` renews while the job runs."""
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

    def _send_idle(self, pipeline: Pipeline) -> None:
        """`idle` written to the worker's hash on `pipeline`, the process's own state left `busy`
        until the job has returned (`execute_job` then sets it without sending it again), so that
        RQ's view of the worker, like `request_stop`'s, is of a worker still running its job."""
        pipeline.hset(self.key, "state", WorkerStatus.IDLE)
        self._state_sent = WorkerStatus.IDLE

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


def stop_child(process: multiprocessing.process.BaseProcess, seconds: float = CHILD_STOP_SECONDS) -> None:
    """SIGTERM `process` (a child of this one) and wait for it to end, at most `seconds`; then SIGKILL
    and reap it if it still runs, also when the wait is cut short (a cold shutdown's `SystemExit`).
    multiprocessing joins its children at exit without a bound: a child that SIGTERM cannot reach
    (stopped, or waiting in a C call) would hold its parent's exit for as long as it lasts."""
    try:
        process.terminate()
        process.join(seconds)
    finally:
        if process.is_alive():
            process.kill()
            process.join()


_DEQUEUE = BaseWorker.dequeue_job_and_maintain_ttl.__code__


def _dequeued(frame: FrameType | None) -> bool:
    """Whether the main thread, interrupted at `frame` (a signal handler's), is in RQ's dequeue
    (`dequeue_job_and_maintain_ttl`) after it took a job off the queue: its `result` is set (the job
    is then in RQ's intermediate queue, which only this worker would take it from at once)."""
    while frame is not None:
        if frame.f_code is _DEQUEUE:
            return frame.f_locals.get("result") is not None
        frame = frame.f_back
    return False


Write = Callable[[Pipeline], object]
"""A Redis write queued onto a pipeline (`in_success_transaction`)."""
_SUCCESS_WRITES: ContextVar[list[Write] | None] = ContextVar("countersign_success_writes", default=None)
"""While a countersign worker runs one of countersign's own jobs, the writes its success callback
queued for the transaction that deletes it (`CountersignWorker.handle_job_success`); else None."""


def in_success_transaction(write: Write) -> bool:
    """For an RQ success callback: queue `write` onto the MULTI/EXEC in which a countersign worker
    deletes the job that succeeded, which RQ sends right after the callback returns, instead of a
    round trip of its own. False when no countersign worker runs one of countersign's own jobs here
    (RQ's own worker classes, another job): then the caller writes itself."""
    writes = _SUCCESS_WRITES.get()
    if writes is None:
        return False
    writes.append(write)
    return True


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


def _ends_with_its_job(job: Job, default_result_ttl: int) -> bool:
    """`job` is one of countersign's own (intake, resume: no dependents, by `defaults.OWN_JOB_PREFIXES`),
    keeps no result, does not repeat and is in no group: its success deletes it (`_delete_succeeded`)."""
    return (
        job.id.startswith(OWN_JOB_PREFIXES)
        and job.get_result_ttl(default_result_ttl) == 0
        and not job.repeats_left
        and not job.group_id
    )


def _delete_succeeded(job: Job, execution: Execution, pipeline: Pipeline) -> None:
    """Queue on `pipeline` what RQ's `Job.delete` and `cleanup_execution` remove of a job that
    succeeded on this worker, by key: its hash, dependents, dependencies and results; its execution
    record, its entries in the started registry and the worker's executions set; its executions
    registry (a job in a lane: only this execution in it, and the job out of the lane's waiting set,
    as RQ's `Job.delete` keeps a lane's live executions)."""
    registry = job.execution_registry.key
    keys = [job.key, job.dependents_key, job.dependencies_key, Result.get_key(job.id), execution.key]  # type: ignore[no-untyped-call]
    pipeline.delete(*keys, *([] if job.has_rate_limit else [registry]))
    pipeline.zrem(job.started_job_registry.key, execution.composite_key)
    pipeline.srem(execution.worker_executions_key, execution.composite_key)
    if job.has_rate_limit:
        pipeline.zrem(registry, execution.id)
        RateLimitRegistry.from_job(job).cancel(job.id, pipeline=pipeline)


def _release_lane(job: Job) -> None:
    """RQ's `release_slot` of a job that succeeded (`handle_job_success`): free its slot in its lane
    and let the lane's next waiting jobs onto the queue, in one script. RQ reads the lane's width
    from the lane's hash (`RateLimitRegistry.concurrency`, an HGET: a round trip of its own each
    job); the job carries the width it was enqueued with (`rate_limit_concurrency`, the width that
    enqueue wrote into that hash: `jobs.INTAKE_LANE_WIDTH`), so it is used instead. Does nothing for
    a job in no lane (or taken out of it: `jobs.leave_intake_lane`). Raises `RedisError`."""
    if not job.has_rate_limit:
        return
    lane = RateLimitRegistry.from_job(job)
    lane.__dict__["concurrency"] = job.rate_limit_concurrency  # the value of its cached_property
    lane.release_and_enqueue(job.id)


class _WorkerBoundScheduler(RQScheduler):
    """RQ's scheduler, made in the worker's process and run by RQ in a process forked from it
    (`RQScheduler.start`), that stops, releasing its locks and registering its death, once that
    worker is gone: its parent is then another process. RQ's scheduler loop sends a heartbeat
    every `interval` seconds (1); the first after the worker died asks the loop to stop, which it
    does after that one pass."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._worker_pid = os.getpid()

    def work(self) -> None:
        """RQ's scheduler loop, run in the scheduler's process, ended by Redis going away (its
        connection refused or timing out, `outages.lost`) with one warning line: RQ's `run` would
        log the error with its traceback and raise it again, which `multiprocessing` prints as a
        second traceback, burying the line that says Redis is gone (`countersign run`'s last). Any
        other failure is raised as before. The worker starts a scheduler again at its maintenance
        once its own connection works (RQ's `Worker.run_maintenance_tasks`)."""
        try:
            super().work()  # type: ignore[no-untyped-call]
        except Exception as exc:
            if lost(exc) != "Redis":
                raise
            self.log.warning("scheduler: stopped, as Redis is unreachable (%s)", summary(exc))

    def heartbeat(self) -> None:
        """RQ's heartbeat of the scheduler and its locks, or, in the scheduler's process once its
        worker is gone, a stop asked for instead."""
        if os.getpid() != self._worker_pid and os.getppid() != self._worker_pid:
            self.log.warning("scheduler: its worker (pid %s) is gone; stopping", self._worker_pid)
            self.request_stop()  # type: ignore[no-untyped-call]
            return
        super().heartbeat()  # type: ignore[no-untyped-call]
