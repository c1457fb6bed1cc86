"""`countersign agent-worker QUEUE...`: the RQ worker an agent runs its resume jobs on, set up so it
cannot be got wrong.

- RQ's JSON serializer: countersign enqueues the decision as JSON and never pickles (DESIGN.md,
  invariant 9);
- RQ's scheduler in the worker (`with_scheduler`), which the resume jobs' `Retry` intervals need
  (a retried job waits in `rq:scheduled:<queue>` until a scheduler moves it back:
  https://python-rq.org/docs/exceptions/, "Retrying Failed Jobs", and
  https://python-rq.org/docs/scheduling/);
- a forking worker (RQ's default `Worker`): each resume job runs the agent's code in a child
  process, so a crash or a leak in it does not take the worker with it;
- a short maintenance interval, so a job abandoned by a killed worker is found in about a minute.

It needs `REDIS_URL` (the queues), and for `execute_approved` in the jobs `DATABASE_URL` and
`COUNTERSIGN_SECRET`, checked at start.
"""

from __future__ import annotations

from rq import Worker
from rq.serializers import JSONSerializer

from ..config import Settings
from ..connections import Connections
from ..router.jobs import json_queue

MAINTENANCE_INTERVAL_SECONDS = 30


def run_agent_worker(settings: Settings, queues: list[str], burst: bool = False) -> None:
    """Work the agent's resume `queues` until stopped (or, with `burst`, until they are empty).
    Raises `ConfigError` for a missing setting and redis-py's `ConnectionError` when Redis does not
    answer."""
    settings.require("COUNTERSIGN_SECRET", needed_by="`countersign agent-worker` (execute_approved)")
    redis = Connections(settings).redis
    redis.ping()
    worker = Worker(
        [json_queue(name, redis) for name in queues],
        connection=redis,
        serializer=JSONSerializer,
        maintenance_interval=MAINTENANCE_INTERVAL_SECONDS,
    )
    worker.work(burst=burst, with_scheduler=True)
