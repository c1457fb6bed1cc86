"""A test agent: its resume function records each decision it is given in Redis."""

from __future__ import annotations

import json
from typing import Any

from rq import get_current_job

RESUMED_KEY = "test-agent:resumed"
QUEUE = "test-agent"
FUNC = "tests.agent.record"


def record(decision: dict[str, Any]) -> str:
    """Resume job: append the decision (JSON) to the Redis list `RESUMED_KEY`."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(RESUMED_KEY, json.dumps(decision))
    return decision["outcome"]


def resumed(redis: Any) -> list[dict[str, Any]]:
    """Every decision the agent has run, in order."""
    return [json.loads(item) for item in redis.lrange(RESUMED_KEY, 0, -1)]
