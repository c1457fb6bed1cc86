"""The outbox relays: put committed resume events on the agents' RQ queues, at least once, and
accepted intake messages back on the router's queue when Redis lost them.

A decision commits its outbox row in the same transaction (store.decide); `try_publish` then
enqueues the resume job `func(decision)` on the request's resume queue at once. `sweep` (run by
the router worker every second) publishes whatever is still unpublished, whether it was enqueued
already or its process died before, and marks it published. The job id is derived from the
request id; `try_publish` enqueues it with `unique=True` (https://python-rq.org/docs/, "Unique
Jobs") and `sweep` a batch in one Redis transaction that skips a job already there
(`jobs.enqueue_resumes`), so a second publish of the same event does not create a second job. This
is the transactional outbox pattern (https://microservices.io/patterns/data/transactional-outbox.html).

Every publish also rings the decided requests' bells (`bell.ring`), after the commit, so an agent
waiting in process (`ApprovalClient.wait`) or on the HTTP long poll wakes at once; the sweep rings
again what it publishes, which covers a ring lost with Redis.

A resume the agent has not run is said so on the card and in the audit trail: the agent's worker
notes a job that raised (`agent/callbacks.py`), `note_untaken` a job no worker took, and
`clear_taken` clears either once a worker has run the job to the end.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from .. import bell
from ..store import Event, Store
from . import texts
from .jobs import (
    enqueue_intake,
    enqueue_resume,
    enqueue_resumes,
    intake_job_id,
    request_refresh,
    resumed_key,
    resumed_request,
)

log = logging.getLogger(__name__)

RELAY = "relay"
"""The audit actor of what the relay's sweeps find and do."""
FINISHED = JobStatus.FINISHED.value.encode()

INTAKE_GRACE_SECONDS = 30
"""An accepted intake message is looked for in Redis only this long after `request()` accepted it
(its job is enqueued right after, in the same call)."""
HEAL_WINDOW_SECONDS = 24 * 3600
"""How far back `heal` looks for lost resume jobs: well inside `RESUME_MARKER_TTL_SECONDS`."""


def try_publish(redis: Redis, event: Event) -> bool:
    """Enqueue the resume job of a just-committed `event` at once, so the agent resumes without
    waiting for the sweep. The event stays unpublished in the outbox until the next `sweep`, whose
    unique enqueue finds the job (no second job) and which marks the events of that second published
    in one transaction: the decision path makes no second database transaction. Returns False, and
    leaves the event to the sweep, when Redis is unreachable. A webhook event has no job: the
    sweep POSTs it (`webhooks.Deliverer`), and an event without a resume target (the agent waits in
    process) has nothing to publish but the ring. Either way the request's bell is rung."""
    try:
        if event.queue is None:
            bell.ring(redis, [event.request_id])
        else:
            enqueue_resume(redis, event, bells=[event.request_id])  # one round trip
    except RedisError as exc:
        log.warning("resume %s not published yet (%s); the relay sweep will retry", event.job_id, exc)
        return False
    return True


def publish_all(store: Store, redis: Redis, events: Sequence[Event]) -> int:
    """Enqueue the resume jobs of `events` (each once) in one Redis transaction, then mark them
    published in one database transaction. A job that exists already (the decision path enqueued
    it) or has run (its marker: RQ deleted it when it ran) is only marked (`jobs.enqueue_resumes`).
    If Redis fails, the events are left to the next `sweep`. Returns how many have a job waiting
    (enqueued now or before), not counting those that ran. Raises
    the store's errors (those events are then published again by `sweep`; no job is enqueued
    twice). Webhook events are left to the webhook sweep (`webhooks.Deliverer`), which marks them
    when delivered. The bells of all `events` are rung, which is all an event without a resume
    target needs (it is marked published with the jobs), in the round trip that reads which jobs
    are missing (`jobs.enqueue_resumes`: one round trip a batch fewer)."""
    jobs = [event for event in events if event.queue is not None]
    try:
        waiting = enqueue_resumes(redis, jobs, bells=[event.request_id for event in events])
    except RedisError as exc:
        unpublished = texts.counted(len(events), "resume event")
        log.warning("%s not published yet (%s); the relay sweep will retry", unpublished, exc)
        return 0
    store.mark_all_published([event.id for event in events if event.webhook is None])
    return waiting


def sweep(store: Store, redis: Redis, limit: int = 100) -> int:
    """Publish up to `limit` unpublished outbox events, oldest first (`publish_all`, whose count it
    returns)."""
    return publish_all(store, redis, store.unpublished(limit))


def heal(store: Store, redis: Redis, window_seconds: int = HEAL_WINDOW_SECONDS, limit: int = 1000) -> int:
    """Enqueue again the resume jobs Redis lost: events published in the last `window_seconds` whose
    RQ job no longer exists and that left no marker of having run (a Redis restart without
    persistence, a FLUSHALL, an eviction).

    The window is shorter than the markers' TTL, so a job that ran is never mistaken for a lost
    one, and a resume whose payload has started running, or whose grant was refused as expired,
    is never enqueued again (the store records both:
    `Store.published_not_run`). The job id is the same, and `execute_approved` lets a payload run
    once, so a job enqueued twice cannot act twice. Returns how many were enqueued again.
    """
    events = store.published_not_run(window_seconds, limit)
    with redis.pipeline(transaction=False) as pipeline:
        for event in events:
            pipeline.exists(Job.key_for(event.job_id), resumed_key(event.request_id))
        present = pipeline.execute()
    lost = [event for event, exists in zip(events, present, strict=True) if not exists]
    for event in lost:  # audited first, so the event precedes what the agent records after it
        store.record(
            event.request_id, "resume_republished", RELAY, why="resume_job_lost", job_id=event.job_id
        )
        enqueue_resume(redis, event)
        log.warning("resume job %s was lost from Redis; enqueued again", event.job_id)
    return len(lost)


def note_untaken(store: Store, redis: Redis, waited_seconds: int, per_queue: int = 100) -> int:
    """Say on the card and in the audit trail (`resume_not_taken`) that no worker has taken a
    resume job: one still waiting on its RQ queue (among the `per_queue` oldest of each queue
    Redis knows) though published at least `waited_seconds` ago (database clock), with no problem
    noted yet and no execution recorded (`Store.resumes_not_taken`). Returns how many were noted."""
    queues = Queue.all(connection=redis, serializer=JSONSerializer)
    with redis.pipeline(transaction=False) as pipeline:
        for queue in queues:
            pipeline.lrange(queue.key, 0, per_queue - 1)
        heads = pipeline.execute()
    waiting = {
        request_id: queue.name
        for queue, job_ids in zip(queues, heads, strict=True)
        for job_id in job_ids
        if (request_id := resumed_request(job_id.decode()))
    }
    noted = store.resumes_not_taken(waiting, waited_seconds, RELAY)
    for request_id in noted:
        log.warning("request %s: no worker has taken its resume job in %d s", request_id, waited_seconds)
        request_refresh(redis, request_id)
    return len(noted)


def clear_taken(store: Store, redis: Redis, page: int = 500) -> int:
    """Clear the problem noted on resume jobs a worker has since run to the end (their marker, or RQ
    status `finished`), audited `resume_taken`, and rewrite their cards; all of them, `page` at a time (a
    job that failed for good keeps its problem, and must not hide the others). A job the agent's
    worker takes for an approval clears it itself, when `execute_approved` claims the run.
    Returns how many were cleared."""
    cleared: list[str] = []
    events = store.resume_problems(limit=page)
    while events:
        with redis.pipeline(transaction=False) as pipeline:
            for event in events:
                pipeline.hget(Job.key_for(event.job_id), "status")
                pipeline.exists(resumed_key(event.request_id))
            answers = pipeline.execute()
        finished = [
            e.request_id
            for e, status, marked in zip(events, answers[::2], answers[1::2], strict=True)
            if status == FINISHED or marked
        ]
        cleared += store.resumes_taken(finished, RELAY)
        events = store.resume_problems(after=events[-1].id, limit=page) if len(events) == page else []
    for request_id in cleared:
        request_refresh(redis, request_id)
    return len(cleared)


def requeue_intake(store: Store, redis: Redis, grace_seconds: int = INTAKE_GRACE_SECONDS) -> int:
    """Enqueue again the intake jobs Redis lost: messages in the intake outbox (accepted by an
    agent's `request()` more than `grace_seconds` ago, not yet taken by intake) whose RQ job no
    longer exists. The job id is the same and unique, and intake is idempotent, so a job enqueued
    twice makes one request. Returns how many were enqueued again."""
    waiting = store.intake_waiting(grace_seconds)
    with redis.pipeline(transaction=False) as pipeline:
        for accepted in waiting:
            pipeline.exists(Job.key_for(intake_job_id(accepted.id)))
        present = pipeline.execute()
    lost = [accepted for accepted, exists in zip(waiting, present, strict=True) if not exists]
    for accepted in lost:  # audited first, so the event precedes what intake records after it
        store.record(accepted.id, "intake_requeued", RELAY, why="intake_job_lost")
        action = str((accepted.message.get("request") or {}).get("action"))
        enqueue_intake(redis, accepted.id, action, accepted.message)
        log.warning("intake job of request %s was lost from Redis; enqueued again", accepted.id)
    return len(lost)
