"""The router worker runs countersign's own jobs only (DESIGN.md, invariant 11): a job on its queue
whose function is not one of countersign's router jobs, or that carries callbacks, is failed
without being called, and a request's resume job refused so is on the card and in the audit trail.
A real `RouterWorker` on real Redis, in burst mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis import Redis
from rq import Callback, Retry
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from sqlalchemy import update

from countersign.agent import ApprovalClient
from countersign.router import relay
from countersign.router.jobs import INTAKE_QUEUE, REWRITE_JOB, json_queue, resume_job_id
from countersign.router.runtime import Runtime
from countersign.router.worker import ROUTER_WORKER, RouterWorker
from countersign.sandbox import Sandbox
from countersign.store import OutboxEvent
from tests.helpers import agent
from tests.helpers.builders import decided_card

REFUSED = "refused by countersign's router worker"


def _run_router_worker(redis: Redis) -> None:
    """Run every job on the router's queue with the router worker's class, in this process."""
    worker = RouterWorker([json_queue(INTAKE_QUEUE, redis)], connection=redis, serializer=JSONSerializer)
    worker.work(burst=True)


def _failed(redis: Redis, job_id: str) -> Job:
    """The job `job_id`, which must be in the router queue's failed registry."""
    queue = json_queue(INTAKE_QUEUE, redis)
    assert job_id in queue.failed_job_registry.get_job_ids()
    job = queue.fetch_job(job_id)
    assert job is not None and job.get_status() == JobStatus.FAILED
    return job


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the worker, not SQL
def test_a_job_of_any_other_function_is_failed_without_being_called(
    runtime: Runtime, redis: Redis, tmp_path: Path
) -> None:
    made = tmp_path / "made-by-the-job"
    queue = json_queue(INTAKE_QUEUE, redis)
    queue.enqueue("os.mkdir", str(made), job_id="planted-mkdir")
    queue.enqueue(agent.FUNC, {"outcome": "approved"}, job_id="planted-agent-code", retry=None)

    _run_router_worker(redis)

    assert not made.exists()
    assert agent.resumed(redis) == []
    for job_id, func in (("planted-mkdir", "os.mkdir"), ("planted-agent-code", agent.FUNC)):
        failure = _failed(redis, job_id).latest_result()
        assert failure is not None and failure.exc_string is not None
        assert failure.exc_string.startswith(f"{REFUSED}: {func!r} is not one of countersign's router jobs")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_router_job_with_a_callback_is_refused_and_not_retried(runtime: Runtime, redis: Redis) -> None:
    queue = json_queue(INTAKE_QUEUE, redis)
    queue.enqueue(
        REWRITE_JOB, "01J0000000000000000000000", "C0FINANCE", "1.0", {},
        job_id="planted-callback", on_failure=Callback(agent.FUNC), retry=Retry(max=3),
    )  # fmt: skip

    _run_router_worker(redis)

    job = _failed(redis, "planted-callback")
    assert job.retries_left == 0 and not queue.scheduled_job_registry.get_job_ids()
    failure = job.latest_result()
    assert failure is not None and failure.exc_string == (
        f"{REFUSED}: countersign's router jobs have no callbacks, and it has {agent.FUNC}"
    )
    assert agent.resumed(redis) == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_resume_job_stored_for_the_routers_queue_is_refused_on_the_card_and_in_the_audit_trail(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """A request stored before the router's queue was refused as a resume queue, decided now: its
    resume job lands on the router's queue, which runs none of it and says why."""
    request_id, _ = decided_card(client, redis, runtime, sandbox[0], func=agent.FUNC)
    with runtime.store.engine.begin() as connection:
        connection.execute(
            update(OutboxEvent).where(OutboxEvent.request_id == request_id).values(queue=INTAKE_QUEUE)
        )
    assert relay.sweep(runtime.store, redis) == 1

    _run_router_worker(redis)

    assert agent.resumed(redis) == []
    assert not json_queue(agent.QUEUE, redis).job_ids
    _failed(redis, resume_job_id(request_id))
    problem = client.get(request_id).resume["problem"]
    assert problem["event"] == "resume_failed" and problem["retries_left"] == 0
    assert problem["error"].startswith(f"RefusedJob: {agent.FUNC!r} is not one of countersign's router jobs")
    noted = [e for e in runtime.store.audit_trail(request_id) if e.event == "resume_failed"]
    assert [e.actor for e in noted] == [ROUTER_WORKER]
