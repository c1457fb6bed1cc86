"""The job names (`router.jobs`): every job of ours is found by its import path, and the job ids
countersign gives are ones RQ accepts."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

import pytest
from redis import Redis

from countersign.idempotency import claim_key
from countersign.router.jobs import JOB_PATHS, intake_job_id, json_queue, resume_job_id

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
