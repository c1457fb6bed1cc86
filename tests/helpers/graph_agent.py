"""A LangGraph agent resumed by its RQ resume job (`resume`), its threads kept in one in-memory
checkpointer for the test process; its refund tool records each run in `RUNS`."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from countersign.integrations.langgraph import CountersignGate, resume_graph
from examples.langgraph_refund import build_graph

from . import agent

CHECKPOINTER = InMemorySaver()
RUNS: list[dict[str, str]] = []
FUNC = "tests.helpers.graph_agent.resume"
GATE = CountersignGate(
    {"issue_refund": "Refund {amount} {currency}"}, resume={"queue": agent.QUEUE, "func": FUNC}
)


@tool
def issue_refund(amount: str, currency: str, customer: str) -> str:
    """Refund `amount` in `currency` to `customer`."""
    RUNS.append({"amount": amount, "currency": currency, "customer": customer})
    return f"refunded {amount} {currency} to {customer}"


def graph() -> Any:
    """The agent's graph, as a freshly started process builds it."""
    return build_graph(CHECKPOINTER, GATE, [issue_refund])


def resume(decision: dict[str, Any]) -> str | None:
    """The resume job: resume the thread that asked, with the decision; its model's last words."""
    result = resume_graph(graph(), decision)
    return None if result is None else str(result["messages"][-1].content)
