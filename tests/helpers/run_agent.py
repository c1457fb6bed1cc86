"""An OpenAI Agents SDK agent resumed by its RQ resume job (`resume`): the paused run is read back from
the request, so the job's process needs nothing but the agent's code; its refund tool records each run
in `RUNS`. `resume_failing` is the same agent whose refund tool raises out of the run (no
`failure_error_function`), so the resume job raises after the execution was claimed."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import function_tool

from countersign.integrations.openai_agents import CountersignApprovals
from examples.openai_agents_refund import build_agent

from . import agent

RUNS: list[dict[str, str]] = []
FUNC = "tests.helpers.run_agent.resume"
SUMMARIES = {"issue_refund": "Refund {amount} {currency}"}
APPROVALS = CountersignApprovals(SUMMARIES, resume={"queue": agent.QUEUE, "func": FUNC})
FAILING = CountersignApprovals(
    SUMMARIES, resume={"queue": agent.QUEUE, "func": "tests.helpers.run_agent.resume_failing"}
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


@function_tool(name_override="issue_refund", failure_error_function=None)
def failing_refund(amount: str, currency: str, customer: str) -> str:
    """Refund `amount` in `currency` to `customer`; the payment provider refuses it."""
    RUNS.append({"amount": amount, "currency": currency, "customer": customer})
    raise RuntimeError("card_declined")


def resume_failing(decision: dict[str, Any]) -> str:
    """`resume` for `FAILING`: its refund tool raises out of the run, and so out of the job."""
    result = asyncio.run(FAILING.resume(build_agent(FAILING, [failing_refund]), decision))
    return str(result.final_output)
