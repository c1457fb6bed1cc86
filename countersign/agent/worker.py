"""`countersign agent-worker QUEUE...`: the RQ worker an agent runs its resume jobs on, set up so it
cannot be got wrong.

- RQ's JSON serializer: countersign enqueues the decision as JSON and never pickles (DESIGN.md,
  invariant 9);
- RQ's scheduler in the worker (`with_scheduler`), which the resume jobs' `Retry` intervals need
  (a retried job waits in `rq:scheduled:<queue>` until a scheduler moves it back:
  https://python-rq.org/docs/exceptions/, "Retrying Failed Jobs", and
  https://python-rq.org/docs/scheduling/);
- countersign's worker class (`countersign/workers.py`): RQ's `SimpleWorker`, which runs each job in
  the worker process instead of forking a work-horse for it, so the agent's modules, the database
  pool and the Redis client are loaded once, not once a job (a fork per job, which then imported the
  job's module and connected to the database again, held the worker to a few jobs a second:
  BENCHMARKS.md, "Resume jobs per second"), with a heartbeat thread while a job runs, so a killed
  worker's job is found abandoned about 90 s after its last heartbeat and run again, and RQ's
  bookkeeping of the worker itself sent every few seconds rather than several times a job. The
  price is RQ's own: a crash of the agent's code (a segfault, `os._exit`) takes the worker with it,
  and what a job leaves in the process (module state, a leak) stays for the next; the job is then
  found abandoned and run again, as when a worker is killed;
- a short maintenance interval (30 s), which an idle worker keeps too (`workers.CountersignWorker`
  waits in a dequeue at most that long), so a job abandoned by a killed worker is run again within
  about two minutes (90 s of heartbeat, up to 30 s to the next maintenance, the first retry's 10 s);
- an `ExecutionRefused` raised by a job (`execute_approved` called directly) ends it: one log line
  saying whether the action had started before (`ExecutionRefused.consequence`) instead of RQ's
  traceback, and no retry, which would be refused again (and audited again). A job whose action
  raised after its claim is not retried either (`execute_approved` leaves it no retry).

It needs `REDIS_URL` (the queues), and for `execute_approved` in the jobs `DATABASE_URL` and
`COUNTERSIGN_SECRET`, checked at start.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rq.job import Job
from rq.serializers import JSONSerializer

from .. import outages
from ..config import Settings
from ..connections import Connections
from ..defaults import ROUTER_QUEUES
from ..exceptions import ExecutionRefused, UsageError
from ..router.jobs import json_queue
from ..workers import CountersignWorker

MAINTENANCE_INTERVAL_SECONDS = 30


class AgentWorker(CountersignWorker):
    """countersign's worker class (`workers.CountersignWorker`) for which a job raising
    `ExecutionRefused` has ended: it is logged as one line and not retried (the refusal is audited
    once, by `execute_approved`). Every other exception goes to RQ's own handling (its traceback in
    the log, then the job's `Retry`)."""

    def handle_exception(
        self, job: Job, *exc_info: type[BaseException] | BaseException | TracebackType | None
    ) -> Any:
        refused = exc_info[1]
        if not isinstance(refused, ExecutionRefused):
            return super().handle_exception(job, *exc_info)
        job.retries_left = 0  # read by RQ's handle_job_failure, called next: no retry
        self.log.warning("job %s: %s; %s", job.id, refused, refused.consequence)


def run_agent_worker(settings: Settings, queues: list[str], burst: bool = False) -> None:
    """Work the agent's resume `queues` until stopped (or, with `burst`, until they are empty).
    Raises `UsageError` for one of countersign's own queues (its jobs are the router's, and an agent
    worker there would run any job put on it: DESIGN.md, invariant 11), `ConfigError` for a missing
    setting or when the database or Redis does not answer, `SchemaOutOfDate` when the database is
    not migrated (`Connections.check`)."""
    taken = sorted(ROUTER_QUEUES.intersection(queues))
    if taken:
        raise UsageError(
            f"{', '.join(taken)} is countersign's own queue, which only `countersign worker` takes; "
            "name your agent's resume queue"
        )
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
    outages.throttle_rq_reconnects()  # a Redis outage: one reconnection line every 30 s, not every 2 s
    worker.work(burst=burst, with_scheduler=True, logging_level=settings.COUNTERSIGN_LIBRARY_LOG_LEVEL)
