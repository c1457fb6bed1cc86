"""The baseline job of the throughput benchmark: nothing to import, nothing to do; and the router's
worker class that runs it."""

from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue

from countersign.router.worker import RouterWorker
from countersign.workers import CountersignWorker

NOOP = "bench.noop.noop"


def noop() -> None:
    """Do nothing."""


class NoopRouterWorker(RouterWorker):
    """`RouterWorker`, which refuses every job but countersign's router jobs (`jobs.foreign`, DESIGN.md
    invariant 11), letting the baseline's `noop` through: the same class, policy refresh and job
    path for the baseline as for intake, but for that one check."""

    def perform_job(self, job: Job, queue: Queue, execution: Execution) -> bool:
        """RQ's `perform_job` for `noop`, `RouterWorker`'s for every other job."""
        if job.func_name == NOOP:
            return CountersignWorker.perform_job(self, job, queue, execution)
        return super().perform_job(job, queue, execution)
