"""A test agent: its resume function records each decision it is given in Redis."""

from __future__ import annotations

import json
from typing import Any

from rq import get_current_job

from countersign import approved_action, execute_approved

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
