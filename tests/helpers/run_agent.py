"""An OpenAI Agents SDK agent resumed by its RQ resume job (`resume`): the paused run is read back from
the request, so the job's process needs nothing but the agent's code; its refund tool records each run
in `RUNS`. `FailingRefunds` is the same agent whose refund tool raises after it ran (the payment
provider refuses), with one `failure_error_function` setting each: `FAILING` (None: the error raises
out of the run, and so out of the job), `FAILING_DEFAULT` (the SDK's default text) and
`FAILING_CUSTOM` (`told_the_model`)."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool

from countersign.integrations.openai_agents import CountersignApprovals
from examples.openai_agents_refund import build_agent

from . import agent

RUNS: list[dict[str, str]] = []
FUNC = "tests.helpers.run_agent.resume"
SUMMARIES = {"issue_refund": "Refund {amount} {currency}"}
APPROVALS = CountersignApprovals(SUMMARIES, resume={"queue": agent.QUEUE, "func": FUNC})
DECLINED = RuntimeError("card_declined")


@function_tool
def issue_refund(amount: str, currency: str, customer: str) -> str:
    """Refund `amount` in `currency` to `customer`."""
    RUNS.append({"amount": amount, "currency": currency, "customer": customer})
    return f"refunded {amount} {currency} to {customer}"


def resume(decision: dict[str, Any]) -> str:
    """The resume job: restore the run that asked, apply the decision, run on; the final output."""
    result = asyncio.run(APPROVALS.resume(build_agent(APPROVALS, [issue_refund]), decision))
    return str(result.final_output)


class FailingRefunds:
    """The agent whose refund tool records its run, then raises `DECLINED`; `failure` is the tool's
    `function_tool` options (none: the SDK's default `failure_error_function`). `resume` is its
    resume job, found by RQ as `<this module>.<name>.resume`; `outputs`, its runs' final outputs."""

    def __init__(self, name: str, **failure: Any) -> None:
        func = f"{__name__}.{name}.resume"
        self.approvals = CountersignApprovals(SUMMARIES, resume={"queue": agent.QUEUE, "func": func})

        @function_tool(name_override="issue_refund", **failure)
        def failing_refund(amount: str, currency: str, customer: str) -> str:
            """Refund `amount` in `currency` to `customer`; the payment provider refuses it."""
            RUNS.append({"amount": amount, "currency": currency, "customer": customer})
            raise DECLINED

        self.tool: FunctionTool = failing_refund
        self.outputs: list[str] = []

    def resume(self, decision: dict[str, Any]) -> str:
        """The resume job: as `resume`, with this agent; the run's final output, kept in `outputs`
        (RQ discards a resume job's result)."""
        result = asyncio.run(self.approvals.resume(build_agent(self.approvals, [self.tool]), decision))
        self.outputs.append(str(result.final_output))
        return self.outputs[-1]


def told_the_model(context: RunContextWrapper[Any], error: Exception) -> str:
    """`FAILING_CUSTOM`'s `failure_error_function`: the tool's answer when it raised `error`."""
    return f"the refund was refused ({error})"


FAILING = FailingRefunds("FAILING", failure_error_function=None)
FAILING_DEFAULT = FailingRefunds("FAILING_DEFAULT")
FAILING_CUSTOM = FailingRefunds("FAILING_CUSTOM", failure_error_function=told_the_model)
