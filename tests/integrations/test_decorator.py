"""`@requires_approval`: a call enqueues an approval request and returns its handle; the function runs on
the agent's worker once, with the approved (or edited) arguments only; a rejection runs nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis

from countersign.integrations.decorator import requires_approval
from countersign.router import relay
from countersign.router.jobs import INTAKE_QUEUE, json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from tests.helpers import agent, drain
from tests.helpers.review import REJECT_REASON, REVIEWS, card_of

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the adapter, not SQL


def run_resume_jobs(runtime: Runtime, redis: Redis) -> None:
    """Publish the decisions (the router's relay) and run the agent's worker on them."""
    relay.sweep(runtime.store, redis)
    drain(redis, agent.QUEUE)


@SQLITE
@pytest.mark.parametrize(("review", "ran"), REVIEWS)
def test_a_call_asks_and_the_worker_runs_only_what_was_approved_once(
    runtime: Runtime,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    review: Callable[[Sandbox, dict[str, Any]], None],
    ran: str | None,
) -> None:
    sb, _ = sandbox
    handle = agent.gated_refund("120.00")
    assert agent.executed(redis) == []  # asked, not run
    assert agent.gated_refund(amount="120.00", currency="USD").request_id == handle.request_id  # a retry
    drain(redis)
    request = runtime.store.get(handle.request_id)
    assert request is not None and request.summary == "Refund 120.00 USD"
    assert request.resume_func == "tests.helpers.agent.gated_refund.resume"

    review(sb, card_of(sb, handle.request_id))
    decision = handle.wait(timeout=10)
    run_resume_jobs(runtime, redis)
    runs = [{"amount": ran, "currency": "USD"}] if ran else []
    assert (decision.outcome, agent.executed(redis)) == ("approved" if ran else "rejected", runs)
    assert decision.reason == (None if ran else REJECT_REASON)

    assert agent.gated_refund.resume(decision.to_json()) is None  # a duplicate delivery runs nothing
    assert agent.executed(redis) == runs


def test_a_function_the_worker_cannot_import_or_call_by_keyword_is_refused_at_decoration() -> None:
    gate = requires_approval(action="issue_refund", summary="s", queue="q")

    def local(amount: str) -> None: ...

    def spread(*amounts: str) -> None: ...

    with pytest.raises(TypeError, match="top level"):
        gate(local)
    spread.__qualname__ = "spread"
    with pytest.raises(TypeError, match="by keyword"):
        gate(spread)


@SQLITE
def test_arguments_that_are_not_json_are_refused_before_anything_is_asked(
    runtime: Runtime, redis: Redis
) -> None:
    with pytest.raises(ValueError, match="JSON"):
        agent.gated_refund(amount=object())  # type: ignore[arg-type]
    assert json_queue(INTAKE_QUEUE, redis).count == 0
