"""The RQ callbacks countersign gives every resume job, run by the agent's worker.

`resume_done` is the resume job's `on_success`: RQ deletes the job when it finishes, and the marker
it leaves (`jobs.mark_resumed`) tells the router's relay that the job ran.

`resume_failed` is the resume job's `on_failure` (`router/jobs.py`, `RESUME_FAILED_CALLBACK`).
RQ runs it each time the job raises, before deciding on a retry: also when the job's function
cannot be imported (RQ imports it inside the same `try` as the call, `Worker.perform_job` →
`Job.perform`), and, with `AbandonedJobError`, when the worker running it died (RQ's maintenance).
So a wrong `resume.func`, or a function that raises before `execute_approved` records anything,
is on the card and in the audit trail (`resume_failed`) within the job's first run, instead of
only in the agent worker's log.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

from redis import Redis
from rq.job import Job

from ..connections import current
from ..exceptions import ExecutionRefused
from ..router.jobs import mark_resumed, request_refresh, resumed_request
from ..workers import in_success_transaction
from .execution import AGENT, MAX_DETAIL

log = logging.getLogger(__name__)


def resume_failed(
    job: Job,
    connection: Redis,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    traceback: TracebackType | None,
) -> None:
    """RQ `on_failure` callback of a resume job: note that the agent has not run the decision, with
    the error and how many more times RQ will run the job (`Store.resume_failed`), and queue the
    card's rewrite. Nothing is noted for a refusal (`ExecutionRefused`: audited and on the card
    already) or once the agent recorded an execution (an action that raised is its `failed`
    outcome). Never raises: RQ would record the callback's error instead of the job's (logged)."""
    request_id = resumed_request(job.id)
    if request_id is None or isinstance(exc, ExecutionRefused):
        return
    name = exc_type.__name__ if exc_type is not None else "Exception"
    error = f"{name}: {exc}" if str(exc or "") else name
    try:
        runtime = current()
        if runtime.store.resume_failed(request_id, error[:MAX_DETAIL], job.retries_left or 0, AGENT):
            request_refresh(runtime.redis, request_id)
    except Exception:
        log.exception("request %s: the failure of its resume job was not recorded", request_id)


def resume_done(job: Job, connection: Redis, result: Any) -> None:
    """RQ `on_success` callback of a resume job: leave its marker (`jobs.mark_resumed`), since RQ
    deletes the job itself; on a countersign worker in the transaction that deletes the job
    (`workers.in_success_transaction`), elsewhere at once. Raises redis-py's `RedisError` (RQ then
    records the job as failed and retries it; `execute_approved` still runs a payload once), as
    does that transaction."""
    request_id = resumed_request(job.id)
    if request_id is not None and not in_success_transaction(lambda pipe: mark_resumed(pipe, request_id)):
        mark_resumed(connection, request_id)
