"""A test agent: its resume function records each decision it is given in Redis."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from rq import get_current_job

from countersign import approved_action, execute_approved
from countersign.integrations.decorator import requires_approval

RESUMED_KEY = "test-agent:resumed"
QUEUE = "test-agent"
FUNC = "tests.helpers.agent.record"
EXECUTE_FUNC = "tests.helpers.agent.execute"
EXECUTED_KEY = "test-agent:executed"


def record(decision: dict[str, Any]) -> str:
    """Resume job: append the decision (JSON) to the Redis list `RESUMED_KEY`."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(RESUMED_KEY, json.dumps(decision))
    return decision["outcome"]


def resumed(redis: Any) -> list[dict[str, Any]]:
    """Every decision the agent has run, in order."""
    return [json.loads(item) for item in redis.lrange(RESUMED_KEY, 0, -1)]


@approved_action
def execute(payload: dict[str, Any]) -> str:
    """Resume job through `approved_action`: append the payload it was allowed to run to `EXECUTED_KEY`."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(EXECUTED_KEY, json.dumps(payload))
    return "done"


def executed(redis: Any) -> list[dict[str, Any]]:
    """Every payload `execute` (or `execute_directly`) ran, in order."""
    return [json.loads(item) for item in redis.lrange(EXECUTED_KEY, 0, -1)]


EXECUTE_DIRECTLY_FUNC = "tests.helpers.agent.execute_directly"


def execute_directly(decision: dict[str, Any]) -> int:
    """Resume job calling `execute_approved` itself, without the decorator: a refusal raises
    `ExecutionRefused` out of the job. Appends the payload it ran to `EXECUTED_KEY`."""
    job = get_current_job()
    assert job is not None
    connection = job.connection

    def run(payload: dict[str, Any]) -> int:
        return int(connection.rpush(EXECUTED_KEY, json.dumps(payload)))

    return execute_approved(decision, run)


FLAKY_FUNC = "tests.helpers.agent.flaky"


def flaky(name: str) -> int:
    """A job that fails on its first run and succeeds on the next; counts its runs in Redis under
    `test-agent:flaky:<name>`."""
    job = get_current_job()
    assert job is not None
    runs = int(job.connection.incr(f"test-agent:flaky:{name}"))
    if runs == 1:
        raise RuntimeError("the first run fails")
    return runs


FAILING_FUNC = "tests.helpers.agent.failing"


@approved_action
def failing(payload: dict[str, Any]) -> str:
    """Resume job through `approved_action` whose action raises (the agent records it as `failed`)."""
    raise RuntimeError("card declined")


PROCESS_FUNC = "tests.helpers.agent.process"
_RUNS = [0]  # jobs `process` has run since this module was imported into the process


def process(_: Any) -> list[int]:
    """A job that says which process ran it and how many jobs this import of the module has run."""
    _RUNS[0] += 1
    return [os.getpid(), _RUNS[0]]


OUTLIVE_HEARTBEAT_FUNC = "tests.helpers.agent.outlive_heartbeat"


def outlive_heartbeat() -> list[float]:
    """A job that runs until its worker has renewed its heartbeat (at most 20 s): returns the seconds
    its first heartbeat gave it in RQ's started registry and the seconds the renewed one gives."""
    job = get_current_job()
    assert job is not None
    registry, connection = job.started_job_registry, job.connection

    def expires_at() -> float:
        scores = [score for member, score in connection.zrange(registry.key, 0, -1, withscores=True)
                  if member.decode().startswith(f"{job.id}:")]  # fmt: skip
        return scores[0]

    first = expires_at()
    given = first - time.time()
    deadline = time.monotonic() + 20
    while expires_at() == first and time.monotonic() < deadline:
        time.sleep(0.05)
    return [given, expires_at() - time.time()]


HANG_FUNC = "tests.helpers.agent.hang"
HANGING_KEY = "test-agent:hanging"


def hang() -> None:
    """A job that says it has started (`HANGING_KEY`), then runs until its worker is killed."""
    job = get_current_job()
    assert job is not None
    job.connection.set(HANGING_KEY, job.id)
    time.sleep(600)


@requires_approval(action="issue_refund", summary="Refund {amount} {currency}", queue=QUEUE)
def gated_refund(amount: str, currency: str = "USD") -> str:
    """A function behind `requires_approval`: on the worker, appends the arguments it ran with to
    `EXECUTED_KEY`."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(EXECUTED_KEY, json.dumps({"amount": amount, "currency": currency}))
    return f"refunded {amount} {currency}"


HANG_APPROVED_FUNC = "tests.helpers.agent.hang_approved"


@approved_action
def hang_approved(payload: dict[str, Any]) -> None:
    """Resume job through `approved_action` whose action says it has started (`HANGING_KEY`), then
    runs until its worker is killed."""
    hang()
