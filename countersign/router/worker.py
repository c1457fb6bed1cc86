"""The router worker: an RQ worker on the `countersign` queue plus the periodic relay sweep.

RQ settings, chosen so that nothing is lost or run twice by the transport:
- one queue per worker, so RQ dequeues atomically with `BLMOVE` (Redis >= 6.2) instead of a
  `BLPOP` whose move into the started registry is not atomic (rq issue #1716);
- the JSON serializer (DESIGN.md, invariant 9);
- the RQ scheduler on (`with_scheduler=True`), which `Retry` intervals need
  (https://python-rq.org/docs/exceptions/);
- a short maintenance interval, so jobs abandoned by a killed work-horse are noticed in about a
  minute rather than RQ's default ten (https://python-rq.org/docs/workers/).

The sweep runs in a child process rather than a thread: the RQ worker forks a work-horse per job,
and forking a process that has other threads can copy locks in a held state.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time

from rq import Worker
from rq.serializers import JSONSerializer

from ..config import Settings
from .relay import sweep
from .runtime import INTAKE_QUEUE, Runtime

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 2.0
MAINTENANCE_INTERVAL_SECONDS = 60


def run_worker(settings: Settings, burst: bool = False) -> None:
    """Run the router worker until stopped (or, with `burst`, until the queue is empty).

    Checks at start that the Slack token, the policy and Redis are usable, raising `ConfigError`
    or `PolicyError` with one line otherwise.
    """
    runtime = Runtime(settings)
    settings.require("SLACK_BOT_TOKEN", "COUNTERSIGN_POLICY", command="worker")
    log.info("policy %s version %s loaded", runtime.policy.path, runtime.policy.version)
    runtime.redis.ping()
    sweeper = multiprocessing.get_context("spawn").Process(
        target=sweep_forever, args=(settings, os.getpid()), name="countersign-sweep", daemon=True
    )
    sweeper.start()
    try:
        worker = Worker(
            [runtime.queue(INTAKE_QUEUE)],
            connection=runtime.redis,
            serializer=JSONSerializer,
            maintenance_interval=MAINTENANCE_INTERVAL_SECONDS,
        )
        worker.work(with_scheduler=True, burst=burst)
    finally:
        sweeper.terminate()


def sweep_forever(settings: Settings, parent_pid: int) -> None:
    """Run the relay sweep every `SWEEP_INTERVAL_SECONDS` until the parent worker is gone."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    runtime = Runtime(settings)
    while os.getppid() == parent_pid:
        try:
            published = sweep(runtime.store, runtime.redis)
            if published:
                log.info("relay sweep published %d resume event(s)", published)
        except Exception:
            log.exception("relay sweep failed; retrying")
        time.sleep(SWEEP_INTERVAL_SECONDS)
