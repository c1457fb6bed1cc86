"""A resume job that fails before the agent recorded anything is on the card, in the audit trail and
in `countersign show` (finding 3 of issue 13): RQ's `on_failure` callback of the job, which RQ runs
also when the job's function cannot be imported."""

from __future__ import annotations

import json

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.cli import main
from countersign.router import relay
from countersign.router.jobs import json_queue, resume_job_id
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, drain, run_scheduled
from tests.helpers.builders import decided_card, edited_card, events

WRONG_FUNC = "tests.helpers.agent.no_such_function"
IMPORT_ERROR = "ValueError: Invalid attribute name: no_such_function"


def card_text(redis: Redis, sb: Sandbox, ts: str) -> str:
    drain(redis)  # the router worker rewrites the card
    card = edited_card(sb, ts)
    assert card is not None
    return str(card["blocks"])


def test_a_resume_function_that_cannot_be_imported_is_said_on_each_try(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb, func=WRONG_FUNC)
    relay.sweep(store, redis)
    drain(redis, agent.QUEUE)  # RQ cannot import the function: the job fails, with 3 retries left
    blocks = card_text(redis, sb, card["ts"])
    assert "Approved by <@U0LEAD>" in blocks
    assert (
        f"⚠ The agent has not run it: its resume job `{WRONG_FUNC}` failed ({IMPORT_ERROR}); "
        "RQ will run it again (3 more times)" in blocks
    )
    for _ in range(3):
        run_scheduled(redis, resume_job_id(request_id), agent.QUEUE)
    assert resume_job_id(request_id) in json_queue(agent.QUEUE, redis).failed_job_registry
    assert f"({IMPORT_ERROR}); RQ will not run it again" in card_text(redis, sb, card["ts"])
    assert events(store, request_id)[-5:] == ["resume_published", *["resume_failed"] * 4]
    capsys.readouterr()
    assert main(["show", request_id]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["resume"]["problem"] == {"event": "resume_failed", "error": IMPORT_ERROR, "retries_left": 0}
    assert (shown["audit"][-1]["event"], shown["audit"][-1]["actor"]) == ("resume_failed", "agent")


def test_an_action_that_raised_is_the_agents_failure_not_a_resume_problem(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb, func=agent.FAILING_FUNC)
    relay.sweep(store, redis)
    drain(redis, agent.QUEUE)  # execute_approved records "failed", then RQ's job fails
    blocks = card_text(redis, sb, card["ts"])
    assert "Failed ✗ RuntimeError: card declined" in blocks and "⚠" not in blocks
    assert "resume_failed" not in events(store, request_id)
    assert client.get(request_id).resume["problem"] is None  # type: ignore[index]
