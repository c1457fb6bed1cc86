"""LangChain's `create_agent` with `CountersignMiddleware` in the place of `HumanInTheLoopMiddleware`: the
scripted model calls the refund tool, the agent pauses on countersign's request, and the reviewer's
decision (an edit, a rejection) is what the tool runs or the model is told."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.integrations.langchain_agents import CountersignMiddleware
from countersign.integrations.langgraph import pending, resume_graph
from countersign.sandbox import Sandbox
from examples.langgraph_refund import ScriptedRefundModel
from tests.helpers import drain
from tests.helpers.review import REVIEWS, answer_for, card_of

RUNS: list[str] = []


@tool
def issue_refund(amount: str, currency: str, customer: str) -> str:
    """Refund `amount` in `currency` to `customer`."""
    RUNS.append(amount)
    return f"refunded {amount} {currency} to {customer}"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the adapter, not SQL
@pytest.mark.parametrize(("review", "ran"), REVIEWS)
def test_the_middleware_pauses_the_agent_and_runs_what_the_reviewer_decided(
    client: ApprovalClient,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    review: Callable[[Sandbox, dict[str, Any]], None],
    ran: str | None,
) -> None:
    sb, _ = sandbox
    RUNS.clear()
    middleware = CountersignMiddleware({"issue_refund": "Refund {amount} {currency} to {customer}"})
    agent = create_agent(
        ScriptedRefundModel(), [issue_refund], middleware=[middleware], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "create-agent-1"}}
    agent.invoke({"messages": [("user", "refund 120.00 USD to cus_ACME")]}, config)
    [waiting] = pending(agent, config)
    request_id = waiting.value["countersign_request_id"]
    drain(redis)
    card = card_of(sb, request_id)
    assert RUNS == []

    review(sb, card)
    result = resume_graph(agent, client.wait(request_id, timeout=10), config)
    assert ([ran] if ran else []) == RUNS
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answer.content == answer_for(ran)
    assert result["messages"][-1].content == f"The refund tool said: {answer_for(ran)}"
