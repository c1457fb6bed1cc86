"""`countersign agent-worker QUEUE...`: the RQ worker an agent runs its resume jobs on, set up so it
cannot be got wrong.

- RQ's JSON serializer: countersign enqueues the decision as JSON and never pickles (DESIGN.md,
  invariant 9);
- RQ's scheduler in the worker (`with_scheduler`), which the resume jobs' `Retry` intervals need
  (a retried job waits in `rq:scheduled:<queue>` until a scheduler moves it back:
  https://python-rq.org/docs/exceptions/, "Retrying Failed Jobs", and
  https://python-rq.org/docs/scheduling/);
- RQ's `SimpleWorker`, which runs each job in the worker process instead of forking a work-horse
  for it: the agent's modules, the database pool and the Redis client are loaded once, not once a
  job (a fork per job, which then imported the job's module and connected to the database again,
  held the worker to a few jobs a second: BENCHMARKS.md, "Resume jobs per second"). The price is
  RQ's own: a crash of the agent's code (a segfault, `os._exit`) takes the worker with it, and what
  a job leaves in the process (module state, a leak) stays for the next; the job is then found
  abandoned and run again, as when a worker is killed;
- a heartbeat while a job runs (`job_monitoring_interval`, 30 s, as RQ's forking worker keeps for its
  work-horse), so a killed worker's job is found abandoned about 90 s after its last heartbeat and
  run again, instead of RQ's `SimpleWorker` default of the job's whole timeout (600 s) plus 60 s;
- a short maintenance interval, so a job abandoned by a killed worker is found in about a minute;
- an `ExecutionRefused` raised by a job (`execute_approved` called directly) ends it: one log line
  instead of RQ's traceback, and no retry, which would be refused again (and audited again).

It needs `REDIS_URL` (the queues), and for `execute_approved` in the jobs `DATABASE_URL` and
`COUNTERSIGN_SECRET`, checked at start.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from redis.exceptions import RedisError
from rq import SimpleWorker
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer
from rq.worker import BaseWorker, WorkerStatus

from ..config import Settings
from ..connections import Connections
from ..exceptions import ExecutionRefused
from ..router.jobs import json_queue

MAINTENANCE_INTERVAL_SECONDS = 30


class AgentWorker(SimpleWorker):
    """RQ's non-forking worker that heartbeats a running job every `job_monitoring_interval` seconds
    (as RQ's forking worker does for its work-horse), and for which a job raising `ExecutionRefused`
    has ended: it is logged as one line and not retried (the refusal is audited once, by
    `execute_approved`). Every other exception goes to RQ's own handling (its traceback in the log,
    then the job's `Retry`)."""

    def execute_job(self, job: Job, queue: Queue) -> None:
        execution = self.prepare_execution(job)
        with _heartbeats(self, job, execution):
            self.perform_job(job, queue, execution)
        self.set_state(WorkerStatus.IDLE)

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        """RQ's heartbeat TTL of a job on a forking worker: its monitoring interval plus 60 s (at most
        its remaining timeout plus 60 s), which `_heartbeats` renews while the job runs."""
        return BaseWorker.get_heartbeat_ttl(self, job, working_time)

    def handle_exception(
        self, job: Job, *exc_info: type[BaseException] | BaseException | TracebackType | None
    ) -> Any:
        refused = exc_info[1]
        if not isinstance(refused, ExecutionRefused):
            return super().handle_exception(job, *exc_info)
        job.retries_left = 0  # read by RQ's handle_job_failure, called next: no retry
        self.log.warning("job %s: %s; nothing ran, and trying again would be refused too", job.id, refused)


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


def run_agent_worker(settings: Settings, queues: list[str], burst: bool = False) -> None:
    """Work the agent's resume `queues` until stopped (or, with `burst`, until they are empty).
    Raises `ConfigError` for a missing setting or when the database or Redis does not answer,
    `SchemaOutOfDate` when the database is not migrated (`Connections.check`)."""
    settings.require("COUNTERSIGN_SECRET", needed_by="`countersign agent-worker` (execute_approved)")
    connections = Connections(settings)
    connections.check()
    redis = connections.redis
    worker = AgentWorker(
        [json_queue(name, redis) for name in queues],
        connection=redis,
        serializer=JSONSerializer,
        maintenance_interval=MAINTENANCE_INTERVAL_SECONDS,
    )
    worker.work(burst=burst, with_scheduler=True, logging_level=settings.COUNTERSIGN_LIBRARY_LOG_LEVEL)
