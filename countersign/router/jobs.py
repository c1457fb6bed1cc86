"""Every RQ queue, job and job id countersign uses, named once.

Jobs are enqueued by import path, so the process that enqueues never imports the job's module:
the agent's client enqueues intake and card refreshes without importing the router (Bolt, CEL),
and the router enqueues an agent's resume function without importing agent code. This module
imports nothing of the router; the agent imports it. Every queue uses RQ's JSON serializer:
nothing read from Redis is unpickled (DESIGN.md, invariant 9). Job ids are
`<kind>-<request id>`, within the `[A-Za-z0-9_-]` RQ allows in custom ids, and enqueued with
`unique=True` (https://python-rq.org/docs/, "Unique Jobs"), so a second enqueue of the same job
is refused by RQ rather than run twice; intake jobs, which RQ cannot both rate-limit and enqueue
uniquely, are looked up first instead (`enqueue_intake`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError, WatchError
from rq import Callback, Queue, RateLimit, Retry, get_current_job
from rq.job import Job, JobStatus
from rq.rate_limit import RateLimitRegistry
from rq.scripts import _build_hset_args, get_unique_enqueue_script
from rq.serializers import JSONSerializer
from rq.utils import now

from .. import bell
from ..defaults import INTAKE_JOB_PREFIX, RESUME_JOB_PREFIX, RESUME_MARKER_TTL_SECONDS
from ..defaults import INTAKE_QUEUE as INTAKE_QUEUE  # the router worker's queue, named here with its jobs
from ..store import Event

log = logging.getLogger(__name__)

INTAKE_JOB = "countersign.router.intake.intake"
"""`intake(message)`: an `IntakeMessage` as JSON becomes a stored request and a card."""
INTAKE_RETRY = Retry(max=5, interval=[1, 5, 30, 60, 300])
"""An intake job that raised (e.g. the database was down) runs again; its intervals are also the
back-off of a user-group lookup Slack was too busy to answer (`intake._lookup_later`)."""
INTAKE_TIMEOUT_SECONDS = 60
INTAKE_LANE_WIDTH = 4
"""At most this many intake jobs of one action class are on the router's queue or running at once
(`intake_lane`); the rest of a burst waits its turn outside the queue."""

REFRESH_KEY = "countersign:refresh"
"""A Redis set of the request ids whose decided card the router's sweep rewrites next
(`request_refresh`, `refreshes.refresh_requested`): an id asked for twice before the sweep comes is
rewritten once, with everything known by then."""
REFRESH_KEPT_SECONDS = 24 * 3600
"""The set expires this long after its last ask, should no router sweep it."""

REWRITE_JOB = "countersign.router.delivery.rewrite_message"
"""`rewrite_message(request_id, channel, ts, message)`: a card rewrite Slack was too busy for."""
MAX_REWRITES = 20
"""A rewrite Slack stays busy for is tried this many times (at Slack's `Retry-After`), then logged."""

RESUME_RETRY = Retry(max=3, interval=[10, 60, 300])
"""A resume job whose worker died (RQ moves it to the failed registry as abandoned) runs again;
`execute_approved` still lets the payload run at most once."""
RESUME_TIMEOUT_SECONDS = 600
RESUME_FAILED_CALLBACK = "countersign.agent.callbacks.resume_failed"
"""RQ's `on_failure` callback of a resume job, run by the agent's worker each time the job raises
(also when its function cannot be imported): it notes on the card and in the audit trail that the
agent has not run the decision, and why."""

RESUME_DONE_CALLBACK = "countersign.agent.callbacks.resume_done"
"""RQ's `on_success` callback of a resume job, run by the agent's worker: it leaves the job's marker
(`mark_resumed`). RQ deletes the job itself when it finishes (`result_ttl=0`): its record held the
whole decision for days, and only the fact that it ran is read after (`relay.heal`,
`relay.clear_taken`)."""

ENQUEUE_ATTEMPTS = 5
"""`enqueue_resumes` reads and tries its transaction this many times while the jobs it would enqueue
change under it (each a job enqueued by another process at that moment), then leaves the batch to
the next relay sweep."""

JOB_PATHS = (INTAKE_JOB, REWRITE_JOB, RESUME_FAILED_CALLBACK, RESUME_DONE_CALLBACK)
"""Every job function and callback of ours, by import path (a test imports each)."""

ROUTER_JOBS = frozenset({INTAKE_JOB, REWRITE_JOB})
"""Every function countersign enqueues on its router's queue (`INTAKE_QUEUE`), which is all that
the router worker runs (`foreign`, `worker.RouterWorker`)."""


def foreign(job: Job) -> str | None:
    """Why the router worker refuses `job`, or None for one of countersign's own router jobs: its
    function one of `ROUTER_JOBS` and no callback (countersign gives its router jobs none; a callback
    is code its enqueuer chose, which RQ would run in the worker). Reads the job's fields as loaded,
    importing nothing (RQ imports a function or callback only to call it)."""
    if job.func_name not in ROUTER_JOBS:
        return f"{job.func_name!r} is not one of countersign's router jobs ({', '.join(sorted(ROUTER_JOBS))})"
    names = (job._success_callback_name, job._failure_callback_name, job._stopped_callback_name)
    callbacks = [name for name in names if name]
    if callbacks:
        return f"countersign's router jobs have no callbacks, and it has {', '.join(callbacks)}"
    return None


def json_queue(name: str, redis: Redis) -> Queue:
    """The RQ queue `name` with the JSON serializer."""
    return Queue(name, connection=redis, serializer=JSONSerializer)


def intake_job_id(request_id: str) -> str:
    """The RQ job id of a request's intake job."""
    return f"{INTAKE_JOB_PREFIX}{request_id}"


def resume_job_id(request_id: str) -> str:
    """The RQ job id of a request's resume job."""
    return f"{RESUME_JOB_PREFIX}{request_id}"


def webhook_id(request_id: str) -> str:
    """The `webhook-id` of a request's decision sent by webhook (`router/webhooks.py`), the same on
    every attempt: `msg_<request id>` (a ULID is letters and digits, so the id has no `.`, which
    Standard Webhooks' signed content uses as its separator)."""
    return f"msg_{request_id}"


RESUMED = b"1"
"""The resumed marker's value left by the finished resume job (`mark_resumed`)."""
EXECUTED_NOTED = b"2"
"""The resumed marker's value once the `executed` note is under the card (`note_executed`): the
payload ran, so the marker says that the job ran too. One key a request, where a note key of its
own took another 104 bytes for two days; a small integer, which Redis keeps as a shared object, so
the key stays 104 bytes (`MEMORY USAGE`; a letter would make it 120)."""


def resumed_key(request_id: str) -> str:
    """The Redis key of the marker a request's resume job leaves once it ran (`mark_resumed`,
    `note_executed`); `heal` and `clear_taken` read that it exists."""
    return f"countersign:resumed:{request_id}"


def mark_resumed(redis: Redis, request_id: str) -> None:
    """Leave the marker of a finished resume job, kept `RESUME_MARKER_TTL_SECONDS` (well past the
    relay's heal window), unless one is there already (`SET NX`: an `executed` note taken before
    the job's end stays taken). Raises redis-py's `RedisError`."""
    redis.set(resumed_key(request_id), RESUMED, nx=True, ex=RESUME_MARKER_TTL_SECONDS)


def note_executed(redis: Redis, request_id: str) -> bool:
    """Take the request's `executed` note under the card, once (`SET ... GET`: True for the one
    call that found it untaken). Only for a request whose payload ran, whose marker is then true
    whoever writes it first; kept `RESUME_MARKER_TTL_SECONDS`. Raises redis-py's `RedisError`."""
    held = redis.set(resumed_key(request_id), EXECUTED_NOTED, get=True, ex=RESUME_MARKER_TTL_SECONDS)
    return held != EXECUTED_NOTED


def unnote_executed(redis: Redis, request_id: str) -> None:
    """Give the `executed` note back (Slack refused it), so that a later rewrite tries again; the
    marker stays, since the payload ran. Raises redis-py's `RedisError`."""
    redis.set(resumed_key(request_id), RESUMED, ex=RESUME_MARKER_TTL_SECONDS)


def resumed_request(job_id: str) -> str | None:
    """The request id of the resume job `job_id`, or None for another job."""
    return job_id.removeprefix(RESUME_JOB_PREFIX) if job_id.startswith(RESUME_JOB_PREFIX) else None


def intake_lane(action: str) -> RateLimit:
    """The lane of `action`'s intake jobs: RQ's concurrency limit (`RateLimit`, rq >= 3.0), which
    lets at most `INTAKE_LANE_WIDTH` jobs with its key be queued or running; the others wait in
    RQ's rate-limit registry (`rq:rl:<key>:rate_limited`), oldest first, and each job that ends or
    fails, or is rescheduled (and so leaves its lane: `leave_intake_lane`), lets the next one onto
    the queue's tail. So a burst of one action takes a few places in the router's FIFO queue at a time,
    and the other actions' requests, which go to other channels, are not queued behind all of it
    (BENCHMARKS.md, "One busy channel"). A slot left by a killed worker is freed by RQ's
    maintenance (`RateLimitRegistry.cleanup`, every `worker.MAINTENANCE_INTERVAL_SECONDS`)."""
    return RateLimit(f"countersign:intake:{action}", INTAKE_LANE_WIDTH)


def leave_intake_lane(redis: Redis) -> None:
    """Take the running intake job out of its lane (`intake_lane`) as it is rescheduled: its slot
    goes to the lane's next job now, and its later runs, each scheduled for a time of its own (its
    card's time in its channel, Slack's `Retry-After`), go straight onto the queue's tail instead of
    waiting in the lane behind a burst's first runs and then posting late, in a catch-up burst
    that Slack answers with 429s. Does nothing outside an RQ job or for a job in no lane. RQ has
    no call for this: the job's rate-limit fields are removed from it and from its Redis hash (RQ's
    own `rate_limit_key` and `rate_limit_concurrency`), so that RQ's retry saves it without them.
    Raises redis-py's `RedisError`."""
    job = get_current_job()
    if job is None or not job.has_rate_limit:
        return
    lane = RateLimitRegistry.from_job(job)
    job.rate_limit_key = job.rate_limit_concurrency = None
    redis.hdel(job.key, "rate_limit_key", "rate_limit_concurrency")
    lane.release_and_enqueue(job.id)


def enqueue_intake(
    redis: Redis, request_id: str, action: str, message: dict[str, Any], new: bool = False
) -> None:
    """Enqueue the intake job of `request_id` (`message`: the `IntakeMessage` as JSON) in the lane
    of its `action` (`intake_lane`), once: while the same request's job waits, is queued or runs,
    nothing is added. (RQ refuses `unique=True` with a rate limit, so the job is looked up first,
    unless the id is `new`: made just now by `idempotency.claim_or_find`, so no job can have it;
    two enqueues racing between the look-up and the enqueue cost at most one more run of the job,
    which intake makes harmless.) RQ deletes the job when it has run (`result_ttl=0`): the request
    is in the database by then. Raises redis-py's `RedisError`."""
    job_id = intake_job_id(request_id)
    if not new and redis.exists(Job.key_for(job_id)):
        return
    json_queue(INTAKE_QUEUE, redis).enqueue(
        INTAKE_JOB,
        message,
        job_id=job_id,
        rate_limit=intake_lane(action),
        result_ttl=0,
        retry=INTAKE_RETRY,
        job_timeout=INTAKE_TIMEOUT_SECONDS,
        description=f"intake {action} {request_id}",
    )


def request_refresh(redis: Redis, request_id: str) -> None:
    """Ask the router to rewrite the decided request's card (e.g. after the agent reported): its
    sweep does, within about a second. Two Redis commands, where an RQ job took some sixty. Raises
    redis-py's `RedisError`."""
    with redis.pipeline(transaction=False) as pipeline:
        pipeline.sadd(REFRESH_KEY, request_id)
        pipeline.expire(REFRESH_KEY, REFRESH_KEPT_SECONDS)
        pipeline.execute()


def enqueue_rewrite(
    redis: Redis, request_id: str, channel: str, ts: str, message: dict[str, Any], seconds: int
) -> None:
    """Schedule a rewrite of the message at (`channel`, `ts`) on the router worker in `seconds`.
    Raises redis-py's `RedisError`."""
    json_queue(INTAKE_QUEUE, redis).enqueue_in(
        timedelta(seconds=seconds),
        REWRITE_JOB,
        request_id,
        channel,
        ts,
        message,
        description=f"rewrite message {ts} of {request_id}",
    )


def enqueue_resume(redis: Redis, event: Event, bells: Sequence[str] = ()) -> None:
    """Enqueue an outbox event's resume job `func(decision)` on the agent's queue, once (its job id
    is unique), with `RESUME_FAILED_CALLBACK` as its `on_failure` and `RESUME_DONE_CALLBACK` as its
    `on_success`; RQ deletes it when it finishes (`result_ttl=0`), leaving only the marker. The bells
    of `bells` (decided and committed) are rung (`bell.ring`) in the same round trip. Raises
    redis-py's `RedisError`, and `ValueError` for a webhook event (it has no job).

    RQ's unique enqueue (`Queue.enqueue(unique=True)`, https://python-rq.org/docs/, "Unique Jobs")
    is two round trips: the queue added to RQ's set of queues, then RQ's script that saves and
    queues the job unless its hash exists (`rq.scripts.save_unique_job`). The same two commands go
    on one pipeline here, the script by its SHA, with the bells after them; should Redis not know
    the script (restarted, `SCRIPT FLUSH`), RQ's own call loads and runs it."""
    queue = json_queue(_job_target(event)[0], redis)
    job = _resume_job(queue, event)
    job.redis_server_version = queue.get_redis_server_version()
    job.enqueued_at = now()
    script = get_unique_enqueue_script(redis)  # type: ignore[no-untyped-call]  # once a connection
    fields = _build_hset_args(job)  # type: ignore[no-untyped-call]  # `Job.to_dict`, as RQ's script takes it
    keys, args = [job.key, queue.key], [job.id, "R", -1 if job.ttl is None else job.ttl, *fields]
    try:
        with redis.pipeline(transaction=False) as pipeline:
            pipeline.sadd(queue.redis_queues_keys, queue.key)
            pipeline.evalsha(script.sha, len(keys), *keys, *args)
            bell.ring(pipeline, bells)
            saved = pipeline.execute()[1]
    except NoScriptError:  # the rest of the pipeline ran: the queue is in the set, the bells rung
        saved = script(keys=keys, args=args)
    if not saved:
        log.debug("resume job %s was already enqueued", event.job_id)


def enqueue_resumes(redis: Redis, events: Sequence[Event], bells: Sequence[str] = ()) -> int:
    """Enqueue the resume jobs of `events` as `enqueue_resume` does, in one Redis transaction: all
    of them but those whose job exists (queued, running, failed) or has run (its marker). Returns how
    many had not run when read (enqueued now or before). Raises redis-py's `RedisError` (then none
    was enqueued), `WatchError` when the jobs to enqueue kept changing over `ENQUEUE_ATTEMPTS`.
    The bells of the requests `bells` (decided and committed) are rung (`bell.ring`) in the same
    round trip as the first read of which jobs are missing, whatever is enqueued after.

    RQ's unique enqueue is a script a job (`Queue.enqueue(unique=True)`), and its batch enqueue
    (`Queue.enqueue_many` on a pipeline, https://python-rq.org/docs/, "Bulk Job Enqueueing", which
    `_write_jobs` does more cheaply) does not check for an existing job. So the keys of the jobs
    found missing (job and marker) are
    WATCHed, read again, and those still missing enqueued in a MULTI/EXEC that Redis refuses if any
    of those keys changed meanwhile, e.g. the decision path's `enqueue_resume` of the same job
    (https://redis.io/docs/latest/develop/interact/transactions/, "Optimistic locking using
    check-and-set"); then it is tried again. Only the missing jobs are watched: a queued job's hash
    changes as a worker runs it, which must not make the batch fail.
    """
    missing, ran = _missing(redis, events, bells)
    for _ in range(ENQUEUE_ATTEMPTS):
        if not missing or _enqueue_missing(redis, missing):
            return len(events) - ran
    raise WatchError(f"resume jobs kept changing while enqueued ({len(missing)} missing); none enqueued")


def _enqueue_missing(redis: Redis, events: Sequence[Event]) -> bool:
    """WATCH the job and marker keys of `events`, and enqueue those whose job still neither exists
    nor has run, in one MULTI/EXEC (`_write_jobs`). False, with nothing enqueued, if a watched key
    changed."""
    keys = [key for event in events for key in (Job.key_for(event.job_id), resumed_key(event.request_id))]
    with redis.pipeline() as transaction:
        try:
            transaction.watch(*keys)  # type: ignore[no-untyped-call]
            missing, _ = _missing(redis, events)
            transaction.multi()
            for queue, batch in itertools.groupby(missing, key=lambda event: _job_target(event)[0]):
                _write_jobs(json_queue(queue, redis), list(batch), transaction)
            transaction.execute()
        except WatchError:
            return False
    return True


def _write_jobs(queue: Queue, events: Sequence[Event], pipeline: Pipeline) -> None:
    """Queue on `pipeline` the resume jobs of `events` (all on `queue`) as RQ's `enqueue_many` does
    (the queue in RQ's set of queues, each job's hash as `Job.save` writes it, its id pushed on the
    queue), but with one `Job` a function (`_resume_job`), given each event's id, argument and
    description in turn (public setters), rather than one `Job.create` a job (BENCHMARKS.md,
    "Issue 14, fifth pass"), and the ids pushed in one RPUSH. The hash holds the same fields as
    `enqueue_resume` writes (`Job.to_dict`), so RQ's workers, retries, maintenance and `rq info`
    read it alike."""
    pipeline.sadd(queue.redis_queues_keys, queue.key)
    writers: dict[str, Job] = {}  # by function
    enqueued_at = now()
    for event in events:
        func = _job_target(event)[1]
        job = writers.get(func) or writers.setdefault(func, _resume_job(queue, event))
        job.id, job.args, job.description = event.job_id, [event.body], _description(event)
        job.created_at = job.enqueued_at = enqueued_at
        job.save(pipeline=pipeline)
    pipeline.rpush(queue.key, *(event.job_id for event in events))


def _resume_job(queue: Queue, event: Event) -> Job:
    """`event`'s resume job, queued on `queue`, with every option `enqueue` gives a resume job
    (`_resume_options`), not saved."""
    return Job.create(
        _job_target(event)[1],
        args=[event.body],
        id=event.job_id,
        connection=queue.connection,
        serializer=queue.serializer,
        origin=queue.name,
        status=JobStatus.QUEUED,
        timeout=RESUME_TIMEOUT_SECONDS,
        **_resume_options(event),
    )


def _missing(redis: Redis, events: Sequence[Event], bells: Sequence[str] = ()) -> tuple[list[Event], int]:
    """The `events` whose resume job neither exists nor has run, sorted by queue; and how many of
    `events` have run (their marker). One EXISTS of its job and marker an event, and one of all the
    markers (EXISTS counts the keys that exist); the bells of `bells` rung in the same pipeline."""
    if not events and not bells:
        return [], 0
    with redis.pipeline(transaction=False) as pipeline:
        for event in events:
            pipeline.exists(Job.key_for(event.job_id), resumed_key(event.request_id))
        if events:
            pipeline.exists(*(resumed_key(event.request_id) for event in events))
        bell.ring(pipeline, bells)
        replies = pipeline.execute()
    if not events:
        return [], 0
    found, ran = replies[: len(events)], replies[len(events)]
    missing = [event for event, present in zip(events, found, strict=True) if not present]
    return sorted(missing, key=lambda event: _job_target(event)[0]), ran


def _job_target(event: Event) -> tuple[str, str]:
    """The queue and function of an RQ resume event. Raises `ValueError` for a webhook event."""
    if event.queue is None or event.func is None:
        raise ValueError(f"outbox event {event.id} is a webhook, not an RQ job")
    return event.queue, event.func


def _resume_options(event: Event) -> dict[str, Any]:
    """The RQ job options of a resume job, but its id and timeout (named differently by `enqueue` and
    `prepare_data`)."""
    return {
        "result_ttl": 0,
        "retry": RESUME_RETRY,
        "on_failure": Callback(RESUME_FAILED_CALLBACK),
        "on_success": Callback(RESUME_DONE_CALLBACK),
        "description": _description(event),
    }


def _description(event: Event) -> str:
    """The RQ description of a resume job (`rq info`, RQ's dashboards)."""
    return f"resume {event.body['action']} {event.request_id}: {event.body['outcome']}"
