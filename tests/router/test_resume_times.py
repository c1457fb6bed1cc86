"""What `countersign show` says about a resume job's publication, on real Redis and databases: the
decision path enqueues the job at once without writing to the database, and the relay's sweep marks
it later, possibly after the agent ran it; so the mark is shown as what it is (`confirmed_at`), never
as a moment of publication that follows the action's start."""

from __future__ import annotations

from datetime import datetime

from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import relay
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, drain
from tests.helpers.builders import refund


def test_a_job_run_before_the_sweep_marks_it_shows_when_the_relay_confirmed_it(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = client.request(
        refund(run_id="times", resume={"queue": agent.QUEUE, "func": agent.EXECUTE_FUNC})
    )
    drain(redis)
    decided = store.vote(
        request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", runtime.resume_event
    )
    assert relay.try_publish(redis, decided.event)  # type: ignore[union-attr]
    assert client.get(request_id).resume == {  # enqueued, not marked yet
        "job_id": f"resume-{request_id}",
        "queue": agent.QUEUE,
        "func": agent.EXECUTE_FUNC,
        "confirmed_at": None,
        "problem": None,
    }
    drain(redis, agent.QUEUE)  # the agent's worker runs it before the sweep comes
    relay.sweep(store, redis)
    shown = client.get(request_id).as_dict()
    started = next(e["at"] for e in shown["audit"] if e["event"] == "execution_started")
    confirmed = shown["resume"]["confirmed_at"]
    assert "published_at" not in shown["resume"]
    assert datetime.fromisoformat(confirmed) >= datetime.fromisoformat(started)  # a mark, after the run
