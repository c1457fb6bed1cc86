"""OpenAI Agents SDK: tools with `needs_approval` decided by countersign, a paused run kept with its request.

    from countersign.integrations.openai_agents import CountersignApprovals

    approvals = CountersignApprovals({"issue_refund": "Refund {amount} {currency} to {customer}"})
    agent = Agent(name="refunds", tools=[approvals.tool(issue_refund)])
    result = await approvals.run_until_decided(agent, "refund 120.00 USD", run_id="r1", timeout=600)

`tool(t)` marks a function tool `needs_approval` and makes it run only through a countersign
decision. `ask(result, run_id)` turns each of a paused run's interruptions (`ToolApprovalItem`) into
an approval request (the action class is the tool's name; payload: the call's arguments; idempotency
key: `openai-agents:<run_id>:<call id>`) and keeps the serialized `RunState` (`to_string()`) in the
request's `context`, under `openai_agents.run_state`: stored with the request in countersign's
database, so no table or migration of our own, it outlives the agent's process, and the snapshot
is the server-side one the SDK asks for (`RunState.from_json`: never client-supplied state). Its
cost: the request's context is limited to 64 KiB (a longer run is refused with `InvalidRequest`), and
the Details modal shows it.

`resume(agent, decision)` restores that state (`RunState.from_string`), applies `approve` or
`reject` (the reviewer's reason as the `rejection_message` the model sees), and runs on
(`Runner.run`): the approved call then runs with the decision's payload (the reviewer's edited
arguments, which the SDK alone cannot apply) through `execute_approved` (once, only for a valid
grant). What the approved call raises is its `failed` outcome, whatever the tool's
`failure_error_function`, which still gives the model its answer (`_gated`). A decision delivered
twice restores the same snapshot and runs the turn again, but the tool is refused
(`already_executed`) and runs nothing. One gated call per model turn is the tested case.
Needs `pip install 'countersign[openai-agents]'`.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, FunctionTool, Runner, RunResult, RunState
from agents.items import ToolApprovalItem
from agents.tool import (
    maybe_invoke_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext

from ..agent import ApprovalClient, Decision, ExecutionRefused, execute_approved
from ..connections import current
from .gates import ToolGate, not_run

log = logging.getLogger(__name__)
CONTEXT_KEY = "openai_agents"
_DECISIONS: contextvars.ContextVar[dict[str, Decision]] = contextvars.ContextVar("countersign_decisions")
"""The decisions a `resume` applies, by tool call id: what a gated tool runs with."""


class CountersignApprovals(ToolGate):
    """The countersign side of the tools in `interrupt_on` (`ToolGate`: `interrupt_on`, `resume`,
    `requester`); `resume=None` suits `run_until_decided`."""

    REQUESTER = "openai-agents"

    def tool(self, tool: FunctionTool) -> FunctionTool:
        """`tool`, marked `needs_approval`, running only with its countersign decision's payload.
        What the approved call raises is its execution's `failed` outcome, then answered as the
        tool's `failure_error_function` says (`_gated`). Raises `ValueError` for a tool not named
        in `interrupt_on`."""
        if tool.name not in self.interrupt_on:
            raise ValueError(f"tool {tool.name!r} is not in interrupt_on, which gives its card's summary")
        return dataclasses.replace(tool, needs_approval=True, on_invoke_tool=_gated(tool))

    async def ask(self, result: RunResult, run_id: str) -> list[str]:
        """Ask for approval of each interruption of the paused `result` of run `run_id` (a stable
        id of the agent's run or conversation, at most 200 characters); return the request ids. Asking
        again is safe: the same call is the same request. Raises what `ApprovalClient.request` raises."""
        state = result.to_state().to_string()
        client = ApprovalClient.on(current())
        asked = [self._request(item, run_id, state) for item in result.interruptions]
        return [await asyncio.to_thread(client.request, request) for request in asked]

    def _request(self, item: ToolApprovalItem, run_id: str, state: str) -> dict[str, Any]:
        call_id = _call_id(item)
        context = {CONTEXT_KEY: {"run_id": run_id, "call_id": call_id, "run_state": state}}
        key = f"openai-agents:{run_id}:{call_id}"
        return self.request(str(item.tool_name), json.loads(item.arguments or "{}"), key, context)

    async def resume(self, agent: Agent[Any], decision: Decision | dict[str, Any]) -> RunResult:
        """Restore the run paused for `decision` from its request, apply the decision, and run on:
        the `Runner.run` result, which may be paused again (then `ask` again). Raises `ValueError`
        for a request no `ask` made, and what `ApprovalClient.get` raises."""
        decision = Decision.from_json(decision) if isinstance(decision, dict) else decision
        state = await asyncio.to_thread(ApprovalClient.on(current()).get, decision.request_id)
        kept = ((state.request or {}).get("context") or {}).get(CONTEXT_KEY)
        if kept is None:
            raise ValueError(f"request {decision.request_id} was not asked by an OpenAI Agents SDK run")
        run_state: RunState[Any, Agent[Any]] = await RunState.from_string(agent, kept["run_state"])
        [item] = [i for i in run_state.get_interruptions() if _call_id(i) == kept["call_id"]]
        if decision.may_run:
            run_state.approve(item)
        else:
            run_state.reject(item, rejection_message=not_run(decision))
        token = _DECISIONS.set({**_DECISIONS.get({}), kept["call_id"]: decision})
        try:
            return await Runner.run(agent, run_state)
        finally:
            _DECISIONS.reset(token)

    async def run_until_decided(
        self, agent: Agent[Any], run_input: str, *, run_id: str, timeout: float
    ) -> RunResult:
        """`Runner.run(agent, run_input)`, then while it is paused: ask, wait for the decision
        (`ApprovalClient.wait` in a thread, at most `timeout` seconds each) and resume. Raises
        `WaitTimeout` (the request stays pending: `resume` it later)."""
        result = await Runner.run(agent, run_input)
        client = ApprovalClient.on(current())
        while result.interruptions:
            [request_id, *_] = await self.ask(result, run_id)
            decision = await asyncio.to_thread(client.wait, request_id, timeout=timeout)
            result = await self.resume(agent, decision)
        return result


def _gated(tool: FunctionTool) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
    """`tool`'s invocation through `execute_approved`, with the payload of the call's decision.

    The SDK's `function_tool` turns what the function raises into its `failure_error_function`'s
    answer (by default a fixed error text) inside `on_invoke_tool`, where a gate around it would
    see a normal return and record the failure as executed. So the gate runs a copy of `tool`
    with no `failure_error_function` (`set_function_tool_failure_error_function`): the error
    reaches `execute_approved`, which records it (`failed`) and raises it again, and only then is
    it turned into the model's answer (`_answer`), as the tool would have answered without
    countersign. A `FunctionTool` made by hand, whose `on_invoke_tool` is not the SDK's
    failure-handling invoker (the one `FunctionTool` binds to each copy: `__agents_bind_function_tool__`),
    answers no error: what it raises leaves the run, as it would without countersign. So do
    countersign's own errors (e.g. a database outage before the claim), the action not having
    started."""
    invoke = set_function_tool_failure_error_function(dataclasses.replace(tool), None).on_invoke_tool
    answers_errors = callable(getattr(tool.on_invoke_tool, "__agents_bind_function_tool__", None))

    async def gated(context: ToolContext[Any], arguments: str) -> Any:
        decision = _DECISIONS.get({}).get(context.tool_call_id)
        if decision is None:
            return "Not executed: this call was not approved through countersign."
        loop = asyncio.get_running_loop()
        raised: list[Exception] = []  # what the tool itself raised

        def run(payload: dict[str, Any]) -> Any:
            async def call() -> Any:
                try:
                    return await invoke(context, json.dumps(payload))
                except Exception as exc:
                    raised.append(exc)
                    raise

            return asyncio.run_coroutine_threadsafe(call(), loop).result()

        try:  # to_thread carries this context, so the claim finds the RQ job (`get_current_job`)
            return await asyncio.to_thread(execute_approved, decision, run)
        except ExecutionRefused as refused:
            return f"Not executed: {refused}"
        except Exception as exc:
            answer = await _answer(tool, context, exc) if answers_errors and exc in raised else None
            if answer is None:
                raise
            return answer

    return gated


async def _answer(tool: FunctionTool, context: ToolContext[Any], error: Exception) -> str | None:
    """The model's answer for the `error` the approved call of `tool` raised, recorded as failed:
    its `failure_error_function`'s (the SDK's `maybe_invoke_function_tool_failure_error_function`,
    which `function_tool`'s own invocation calls), or None when it has none (the error is raised
    out of the run)."""
    answer = await maybe_invoke_function_tool_failure_error_function(
        function_tool=tool, context=context, error=error
    )
    if answer is not None:
        log.warning(
            "tool %s failed after its approval; the model is told: %s", tool.name, answer, exc_info=error
        )
    return answer


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    return str(raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None))
