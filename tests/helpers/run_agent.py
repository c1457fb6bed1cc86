"""An OpenAI Agents SDK agent resumed by its RQ resume job (`resume`): the paused run is read back from
the request, so the job's process needs nothing but the agent's code; its refund tool records each run
in `RUNS`."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import function_tool

from countersign.integrations.openai_agents import CountersignApprovals
from examples.openai_agents_refund import build_agent

from . import agent

RUNS: list[dict[str, str]] = []
FUNC = "tests.helpers.run_agent.resume"
APPROVALS = CountersignApprovals(
    {"issue_refund": "Refund {amount} {currency}"}, resume={"queue": agent.QUEUE, "func": FUNC}
)


@function_tool
def issue_refund(amount: str, currency: str, customer: str) -> str:
    """Refund `amount` in `currency` to `customer`."""
    RUNS.append({"amount": amount, "currency": currency, "customer": customer})
    return f"refunded {amount} {currency} to {customer}"


def resume(decision: dict[str, Any]) -> str:
    """The resume job: restore the run that asked, apply the decision, run on; the final output."""
    result = asyncio.run(APPROVALS.resume(build_agent(APPROVALS, [issue_refund]), decision))
    return str(result.final_output)
