"""The job names (`router.jobs`): every job of ours is found by its import path, and the job ids
countersign gives are ones RQ accepts; a resume job is the job RQ's unique enqueue makes, sent
with the request's bell in one round trip, and still when Redis has forgotten RQ's script."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

import pytest
from redis import Redis
from rq.job import Job

from countersign.bell import bell_key
from countersign.idempotency import claim_key
from countersign.router.jobs import (
    JOB_PATHS,
    RESUME_TIMEOUT_SECONDS,
    _resume_options,
    enqueue_resume,
    intake_job_id,
    json_queue,
    resume_job_id,
)
from countersign.store import OutboxEvent

RQ_JOB_ID = re.compile(r"[A-Za-z0-9_-]+")
"""The characters RQ allows in a custom job id (https://python-rq.org/docs/jobs/)."""


@pytest.mark.parametrize("path", JOB_PATHS)
def test_every_job_path_imports_to_a_callable(path: str) -> None:
    module, _, name = path.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))


@pytest.mark.parametrize("job_id", [intake_job_id, resume_job_id])
def test_job_ids_use_only_what_rq_allows_and_rq_takes_them(
    redis: Redis, job_id: Callable[[str], str]
) -> None:
    request_id = claim_key(
        redis, "agent", "agent:run:step", "issue_refund", "0" * 64
    )  # as the client gets one
    assert RQ_JOB_ID.fullmatch(job_id(request_id)), job_id(request_id)
    queue = json_queue("job-ids", redis)
    queue.enqueue(JOB_PATHS[0], {}, job_id=job_id(request_id))  # RQ refuses an id it does not allow
    assert queue.job_ids == [job_id(request_id)]


def resume_event(request_id: str = "01JD3XYZABCDEFGHJKMNPQRSTV") -> OutboxEvent:
    body = {"request_id": request_id, "action": "issue_refund", "outcome": "approved", "payload": {"a": 1}}
    return OutboxEvent(
        id=1,
        request_id=request_id,
        queue="agent-jobs",
        func="agent.resume",
        job_id=resume_job_id(request_id),
        body=body,
    )


def test_a_resume_job_is_the_one_rqs_unique_enqueue_makes_and_rings_its_bell(redis: Redis) -> None:
    event = resume_event()
    queue = json_queue("agent-jobs", redis)
    enqueue_resume(redis, event, bells=[event.request_id])
    ours = redis.hgetall(Job.key_for(event.job_id))
    assert queue.job_ids == [event.job_id] and redis.sismember("rq:queues", queue.key)
    assert (
        redis.lrange(bell_key(event.request_id), 0, -1) == [b"1"]
        and redis.ttl(bell_key(event.request_id)) > 0
    )
    redis.delete(Job.key_for(event.job_id), queue.key)
    queue.enqueue(
        "agent.resume", event.body, job_id=event.job_id, unique=True, job_timeout=RESUME_TIMEOUT_SECONDS,
        **_resume_options(event),
    )  # fmt: skip
    theirs = redis.hgetall(Job.key_for(event.job_id))
    times = (b"created_at", b"enqueued_at")
    assert {k: v for k, v in ours.items() if k not in times} == {
        k: v for k, v in theirs.items() if k not in times
    }
    assert ours.keys() == theirs.keys()


def test_a_resume_job_is_enqueued_once_also_after_redis_forgot_rqs_script(redis: Redis) -> None:
    event = resume_event()
    redis.script_flush()
    enqueue_resume(redis, event, bells=[event.request_id])  # NOSCRIPT in the pipeline: RQ's call loads it
    enqueue_resume(redis, event)  # its hash exists: refused
    redis.script_flush()
    enqueue_resume(redis, event)
    assert json_queue("agent-jobs", redis).job_ids == [event.job_id]
    assert redis.lrange(bell_key(event.request_id), 0, -1) == [b"1"]
