"""An OpenAI Agents SDK agent whose refund tool countersign gates: the run pauses, a human decides, it goes on

With `make run` in another terminal:

    make example-openai-agents      # python -m examples.openai_agents_refund 120.00 --approve

The scripted model (the SDK's `Model` interface, no network, no API key) calls `issue_refund`, which
needs approval; the paused run is kept with the approval request. `--approve` presses Approve on the
sandbox card as lee.lead (else decide it on the sandbox page yourself); the agent waits, restores the
run from the request, applies the decision, and the tool runs here with the approved (or edited)
arguments: `REFUND EXECUTED: {...}`, then the model's last message.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.testing import assistant_message, function_call

from countersign import ApprovalClient
from countersign.integrations.openai_agents import CountersignApprovals
from examples import payments
from examples.sandbox_review import decision_of

APPROVALS = CountersignApprovals({"issue_refund": payments.SUMMARY})


@function_tool
def issue_refund(amount: str, currency: str, customer: str) -> str:
    """Refund `amount` (a decimal string) in `currency` to `customer`."""
    return payments.refund(amount, currency, customer)


class ScriptedRefundModel(Model):
    """A model with a script instead of an API: asked "refund AMOUNT CURRENCY to CUSTOMER", it calls
    `issue_refund`; given the tool's output, it says what the tool said."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        last = items[-1]
        if last.get("type") == "function_call_output":
            output = [assistant_message(f"The refund tool said: {last['output']}")]
        else:
            _, amount, currency, _, customer = str(items[0]["content"]).split()
            args = {"amount": amount, "currency": currency, "customer": customer}
            output = [function_call("issue_refund", args, call_id="call_refund")]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def build_agent(
    approvals: CountersignApprovals = APPROVALS, tools: Sequence[FunctionTool] = (issue_refund,)
) -> Agent[Any]:
    """The agent, its gated tools wrapped by `approvals` (the same agent again after a restart)."""
    set_tracing_disabled(True)  # no OpenAI key: traces are not exported
    return Agent(name="refunds", model=ScriptedRefundModel(), tools=[approvals.tool(t) for t in tools])


async def main(amount: str, customer: str, run_id: str, approve: bool) -> None:
    """Run the agent until it pauses, ask, (approve,) wait, resume; print its last words."""
    agent = build_agent()
    result = await Runner.run(agent, f"refund {amount} USD to {customer}")
    [request_id] = await APPROVALS.ask(result, run_id)
    print(f"paused for approval request {request_id}", flush=True)
    client = ApprovalClient.from_env()
    decision = await asyncio.to_thread(decision_of, client, request_id, approve)
    result = await APPROVALS.resume(build_agent(), decision)  # a new agent object: as after a restart
    print(result.final_output)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="An OpenAI Agents SDK agent asks a human before it refunds.")
    parser.add_argument("amount", help="decimal string, e.g. 120.00")
    parser.add_argument("--customer", default="cus_ACME")
    parser.add_argument("--run-id", default=f"refund-{uuid.uuid4()}", help="the agent run's id")
    parser.add_argument("--approve", action="store_true", help="approve the card in the sandbox as lee.lead")
    options = parser.parse_args()
    asyncio.run(main(options.amount, options.customer, options.run_id, options.approve))
