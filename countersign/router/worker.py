"""The router worker: an RQ worker on the `countersign` queue plus the periodic relay sweep.

RQ settings, chosen so that nothing is lost or run twice by the transport, and for speed:
- countersign's worker class (`countersign/workers.py`): RQ's `SimpleWorker`, which runs jobs in
  the worker process instead of forking a work-horse per job, so the database pool, the Slack and
  Redis clients and SQLAlchemy's compiled-statement cache outlive one job (BENCHMARKS.md, "Intake
  throughput", measures what a fork per job costs), with a heartbeat thread while a job runs and
  RQ's bookkeeping of the worker itself sent every few seconds rather than several times a job.
  Intake jobs are idempotent, and a job left behind by a killed worker is found by RQ's maintenance
  (about 90 s after its last heartbeat) and the card sweep;
- one queue per worker, so RQ dequeues atomically with `BLMOVE` (Redis >= 6.2) instead of a
  `BLPOP` whose move into the started registry is not atomic (rq issue #1716);
- the JSON serializer (DESIGN.md, invariant 9);
- an RQ scheduler, which `Retry` intervals need (https://python-rq.org/docs/exceptions/), run in
  the sweep process below rather than RQ's own forked one: a forked child inherits the worker's
  Redis socket, and after a SIGKILL of the worker it keeps the worker's blocked `BLMOVE` alive in
  Redis, which then moves the next job into a queue nobody reads;
- a short maintenance interval (60 s), which an idle worker keeps too (`workers.CountersignWorker`
  waits in a dequeue at most that long), so jobs abandoned by a killed worker are noticed within a
  minute of their heartbeat running out rather than RQ's default ten
  (https://python-rq.org/docs/workers/).

The sweep runs in a spawned child process rather than a thread, with its own connections, so
that a slow sweep never holds up intake (and the GIL) and RQ's scheduler never shares the
worker's Redis connection; it exits when its parent worker is gone.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable

from redis.exceptions import RedisError
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer
from rq.utils import now

from .. import outages
from ..config import Settings
from ..heap import freeze_loaded
from ..store.chain import AuditChain
from ..untrusted import log_to_stderr
from ..workers import CountersignWorker, stop_child
from . import home, journal, refreshes, relay, reload, timeouts, webhooks
from .jobs import INTAKE_QUEUE, foreign, json_queue, request_refresh, resumed_request
from .reload import PolicyHolder
from .runtime import Runtime, current

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 1.0
MAINTENANCE_INTERVAL_SECONDS = 60
HEAL_EVERY_TICKS = 30  # every 30 s: lost resume and intake jobs, acked actions of dead web processes
REFUSAL_CHARS = 2000  # of a refusal's reason kept in the audit trail and shown on the card
ROUTER_WORKER = "router-worker"
"""The audit actor of a resume job the router worker refused (`refuse`)."""


class RouterWorker(CountersignWorker):
    """countersign's worker class (`workers.CountersignWorker`), refreshing the policy before each
    job, so that every job runs with the newest good policy (and a broken file is reported once),
    and running only countersign's own router jobs (`perform_job`; DESIGN.md, invariant 11)."""

    policies: PolicyHolder | None = None

    def perform_job(self, job: Job, queue: Queue, execution: Execution) -> bool:
        """RQ's `perform_job` for one of countersign's router jobs, with the newest good policy; any
        other job (`jobs.foreign`: e.g. a resume job `func(decision)` that names the router's queue,
        enqueued before requests were refused for it) is failed without its function or callbacks
        being imported or called (`refuse`). Returns True when the job ran and succeeded."""
        if self.policies is not None:
            self.policies.current()
        refusal = foreign(job)
        if refusal is None:
            return super().perform_job(job, queue, execution)
        refuse(self, job, queue, execution, refusal)
        return False


def refuse(worker: CountersignWorker, job: Job, queue: Queue, execution: Execution, why: str) -> None:
    """Fail `job` on `worker` for good without calling it (`why`: `jobs.foreign`'s reason): RQ's
    failure handling (the failed registry with `refused by countersign's router worker: <why>`, no
    retry, no callback), an error in the log, and for a request's resume job the request's
    `resume_failed` note (audit trail and card: `Store.resume_failed`, actor `ROUTER_WORKER`)."""
    reason = f"refused by countersign's router worker: {why}"
    log.error("job %s on queue %s: %s", job.id, queue.name, reason)
    job.retries_left = 0
    job.ended_at = now()
    worker.handle_job_failure(
        job, queue, started_job_registry=queue.started_job_registry, exc_string=reason, execution=execution
    )
    request_id = resumed_request(job.id)
    if request_id is None:
        return
    try:
        runtime = current()
        if runtime.store.resume_failed(request_id, f"RefusedJob: {why}"[:REFUSAL_CHARS], 0, ROUTER_WORKER):
            request_refresh(runtime.redis, request_id)
    except Exception:
        log.exception("request %s: the refusal of its resume job was not recorded", request_id)


def run_worker(runtime: Runtime | None = None, burst: bool = False) -> None:
    """Run the router worker until stopped (or, with `burst`, until the queue is empty), with
    `runtime` (default: this process's `current()`, which the jobs use too).

    Checks at start that the policy, the database, Redis and Slack (which must take the token) are
    usable, raising `ConfigError`, `PolicyError` or `SchemaOutOfDate` otherwise.
    """
    runtime = runtime or current()
    settings = runtime.settings
    settings.require(
        "SLACK_BOT_TOKEN", "COUNTERSIGN_POLICY", "COUNTERSIGN_SECRET", needed_by="`countersign worker`"
    )
    assert settings.COUNTERSIGN_POLICY is not None
    policies = reload.at_start(settings.COUNTERSIGN_POLICY)
    policy = policies.current()
    runtime.check()
    reload.against_history(policies, runtime.store.engine)  # after the database check: its lines, if any
    runtime.check_slack()
    log.info("policy %s version %s loaded", policy.path, policy.version)
    signal.signal(signal.SIGHUP, lambda *_: runtime.policies.reload())
    outages.throttle_rq_reconnects()
    sweeper = start_sweep(runtime)
    try:
        worker = RouterWorker(
            [json_queue(INTAKE_QUEUE, runtime.redis)],
            connection=runtime.redis,
            serializer=JSONSerializer,
            maintenance_interval=MAINTENANCE_INTERVAL_SECONDS,
        )
        worker.policies = runtime.policies
        freeze_loaded()  # the worker's modules, policy and connections, out of the full collections' reach
        worker.work(burst=burst, logging_level=settings.COUNTERSIGN_LIBRARY_LOG_LEVEL)
    finally:
        stop_child(sweeper)  # SIGTERM; a sweep still running after CHILD_STOP_SECONDS is killed


def start_sweep(runtime: Runtime) -> multiprocessing.process.BaseProcess:
    """Start `sweep_forever` in a spawned process (see the module's docstring), handed this process's
    policy version in force (`reload.at_start`), so that it never depends on the file being valid
    when it first reads it."""
    sweeper = multiprocessing.get_context("spawn").Process(
        target=sweep_forever,
        args=(runtime.settings, os.getpid(), runtime.policies.last_good()),
        name="countersign-sweep",
        daemon=True,
    )
    sweeper.start()
    return sweeper


def sweep_forever(settings: Settings, parent_pid: int, policy: reload.Version) -> None:
    """Every `SWEEP_INTERVAL_SECONDS` until the parent worker is gone: move due scheduled jobs (RQ
    retries) onto the queue, time out / escalate / remind what is due, publish unpublished outbox
    events, start the webhook attempts due (`webhooks.Deliverer`, on threads of its own), rewrite
    the decided cards asked for (`jobs.request_refresh`), publish the reviewers' App Home tabs due
    (`home.publish_due`), seal the committed audit events into the audit chain
    (`store.chain.AuditChain.seal`), and (every `HEAL_EVERY_TICKS`) enqueue
    again resume and intake jobs that Redis lost, note resume jobs no worker took in
    `COUNTERSIGN_RESUME_WAIT_SECONDS` (and clear that once one did), and replay the
    reviewers' actions that a dead web process had acked but not recorded."""
    signal.signal(signal.SIGTERM, _exit_once)
    signal.signal(signal.SIGINT, _exit_once)  # Ctrl-C in a terminal reaches the whole process group
    log_to_stderr()
    assert settings.COUNTERSIGN_POLICY is not None
    policies = reload.at_start(settings.COUNTERSIGN_POLICY, policy)
    runtime = Runtime(settings)
    reload.record_reloads(policies, runtime.store.engine)
    wait = settings.COUNTERSIGN_RESUME_WAIT_SECONDS
    scheduler = RQScheduler(
        [INTAKE_QUEUE],
        connection=runtime.redis,
        serializer=JSONSerializer,
        logging_level=settings.COUNTERSIGN_LIBRARY_LOG_LEVEL,
    )
    deliverer = webhooks.Deliverer(runtime)
    chain = AuditChain(runtime.store.engine)
    failures = outages.Steps(log)  # an outage: one line, then a short line a step now and then
    ticks = 0
    try:
        while os.getppid() == parent_pid:
            started = time.monotonic()
            steps: list[tuple[str, Callable[[], object]]] = [
                ("scheduler", lambda: _schedule(scheduler)),
                ("timeouts", lambda: timeouts.sweep(runtime)),
                ("relay", lambda: _relay(runtime)),
                ("webhooks", deliverer.tick),
            ]
            if ticks % HEAL_EVERY_TICKS == 0:  # before the cards: a card they ask to rewrite is, this tick
                steps.append(("heal", lambda: relay.heal(runtime.store, runtime.redis)))
                steps.append(("untaken", lambda: relay.note_untaken(runtime.store, runtime.redis, wait)))
                steps.append(("taken", lambda: relay.clear_taken(runtime.store, runtime.redis)))
                steps.append(("intake", lambda: relay.requeue_intake(runtime.store, runtime.redis)))
                steps.append(("journal", lambda: journal.replay(runtime)))
            steps.append(("cards", lambda: refreshes.refresh_requested(runtime)))
            steps.append(("home", lambda: home.publish_due(runtime)))
            steps.append(("seal", chain.seal))
            for name, step in steps:  # each step on its own: one failing does not stop the others
                failures.run(name, step)
            ticks += 1
            # ticks start a second apart: a tick that ran long (a backlog) is followed at once
            time.sleep(max(0.0, SWEEP_INTERVAL_SECONDS - (time.monotonic() - started)))
    finally:  # also on SIGTERM, so a restarted worker schedules at once; with Redis gone, so are they
        with contextlib.suppress(RedisError):
            scheduler.release_locks()


def _schedule(scheduler: RQScheduler) -> None:
    if scheduler.acquired_locks:
        scheduler.heartbeat()
    else:
        scheduler.acquire_locks()
    if scheduler.acquired_locks:
        scheduler.enqueue_scheduled_jobs()


def _exit_once(*_: object) -> None:
    """SIGTERM or SIGINT in the sweep process: exit now, where the signal landed (`SystemExit`,
    releasing the scheduler's locks on the way out). Every step is one the sweep redoes if a process
    dies in it (a transaction not committed, a lease that runs out, an outbox event left unpublished).
    Further SIGTERMs and SIGINTs, e.g. the worker's after Ctrl-C reached the whole process group, are
    ignored, so that they cannot interrupt the exit itself (a traceback from Python's atexit); the
    worker kills a sweep that has not ended `CHILD_STOP_SECONDS` after its SIGTERM (`stop_child`)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(0)


def _relay(runtime: Runtime) -> None:
    published = relay.sweep(runtime.store, runtime.redis)
    if published:  # the decision path has enqueued these already: the sweep only marks them published
        log.debug("relay sweep published %d resume event(s)", published)
