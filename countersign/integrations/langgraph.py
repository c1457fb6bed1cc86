"""LangGraph: a tool call gated by countersign, paused with `interrupt()` and resumed with the decision.

    from langgraph.prebuilt import ToolNode
    from countersign.integrations.langgraph import CountersignGate, resume_graph

    gate = CountersignGate({"issue_refund": "Refund {amount} {currency} to {customer}"})
    tools = ToolNode([issue_refund, lookup_order], wrap_tool_call=gate)    # in your graph
    ...
    resume_graph(graph, decision)   # a resume job `func(decision)`, a webhook receiver, or after a wait

`CountersignGate` is a `ToolNode` `wrap_tool_call` interceptor (the same signature as a LangChain
agent middleware's `wrap_tool_call`): a call of a tool named in `interrupt_on` becomes an approval
request of the action class of the tool's name (payload: the call's arguments; idempotency key:
`langgraph:<thread id>:<node>:<tool call id>`), then the node `interrupt()`s with
`{"countersign_request_id", "action", "args"}`. LangGraph re-runs the node from its start on resume
(https://docs.langchain.com/oss/python/langgraph/interrupts, "Resuming interrupts"): the request is
asked again with the same key and gets the same request id, so nothing is asked twice.

On resume the value is the decision (`Decision.to_json()`): an approval runs the tool with the
approved (possibly edited) arguments through `execute_approved` (once, only for a valid grant); a
rejection or an expiry runs nothing and answers the model with an error `ToolMessage` carrying the
reviewer's reason. A tool error the `ToolNode` answers the model with (an error `ToolMessage`, not
raised) is the execution's failure, recorded as the error's type and message (`ToolFailed`). Needs
`pip install 'countersign[langgraph]'` and a checkpointer on the graph.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt.tool_node import TOOL_CALL_ERROR_TEMPLATE, ToolCallRequest
from langgraph.pregel import Pregel
from langgraph.types import Command, Interrupt, interrupt

from ..agent import ActionFailed, ApprovalClient, Decision, ExecutionRefused, execute_approved
from ..connections import current
from ..untrusted import one_line
from .gates import ToolGate, not_run

REQUEST_ID = "countersign_request_id"
"""The key of the request id in the interrupt's value."""
Handler = Callable[[ToolCallRequest], ToolMessage | Command[Any]]


# `ToolNode(handle_tool_errors=True)` answers the model `TOOL_CALL_ERROR_TEMPLATE` filled with the
# `repr` of what the tool raised: "Error: ValueError('card declined')\n Please fix your mistakes."
# (langgraph/prebuilt/tool_node.py, `_handle_tool_error`).
_BEFORE, _AFTER = TOOL_CALL_ERROR_TEMPLATE.split("{error}")
_REPR = re.compile(r"([A-Za-z_]\w*)\((.*)\)", re.DOTALL)  # `BaseException.__repr__`: Name(args)


class ToolFailed(ActionFailed):
    """The gated tool answered with an error `ToolMessage` (`message`: the `ToolNode`, or the tool's
    own `handle_tool_error`, caught what it raised). Recorded as the original error's type and
    message when the answer is `ToolNode`'s error text (`original`), else as `ToolFailed: <the
    answer>`; on one line (`untrusted.one_line`), cut to `MAX_DETAIL` by `report_outcome`."""

    def __init__(self, message: ToolMessage) -> None:
        kind, text = original(str(message.content))
        super().__init__(kind, one_line(text))
        self.message = message


def original(answer: str) -> tuple[str, str]:
    """The type name and message of the error a `ToolNode` answered the model with `answer` for
    (`"Error: ValueError('card declined')\\n Please fix your mistakes."` → `("ValueError", "card
    declined")`, as `str` gives the message), else `("ToolFailed", answer)`. Arguments that are not
    Python literals are kept as the `repr` wrote them (`("PaymentError", "<Card 42>")`)."""
    if not (answer.startswith(_BEFORE) and answer.endswith(_AFTER)):
        return "ToolFailed", answer
    error = answer[len(_BEFORE) : len(answer) - len(_AFTER)]
    found = _REPR.fullmatch(error)
    if found is None:
        return "ToolFailed", answer
    kind, args = found[1], found[2]
    try:
        values: tuple[Any, ...] = ast.literal_eval(f"({args},)") if args else ()
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return kind, args
    return kind, str(values[0]) if len(values) == 1 else str(values) if values else ""


@dataclass(frozen=True)
class Ran:
    """What the tool returned, recorded as the outcome's detail by its text."""

    result: ToolMessage | Command[Any]

    def __str__(self) -> str:
        return str(self.result.content) if isinstance(self.result, ToolMessage) else repr(self.result)


class CountersignGate(ToolGate):
    """A `ToolNode(wrap_tool_call=...)` interceptor that sends the calls of the tools in
    `interrupt_on` to countersign and runs them only as decided (`ToolGate`: `interrupt_on`,
    `resume`, `requester`); `resume=None` suits `run_until_decided`. Other tools run at once.
    Raises `InvalidRequest` for a call countersign refuses (e.g. arguments the policy's action class
    does not take) and `KeyError` outside a thread (no `thread_id`)."""

    REQUESTER = "langgraph"

    def __call__(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        """Run the tool call as decided, pausing the graph until it is."""
        call = request.tool_call
        if call["name"] not in self.interrupt_on:
            return handler(request)
        request_id = self._ask(request)
        answer = interrupt({REQUEST_ID: request_id, "action": call["name"], "args": call["args"]})
        decision = Decision.from_json(answer)
        if decision.request_id != request_id:
            raise ValueError(f"resumed with the decision of {decision.request_id}, not of {request_id}")
        if not decision.may_run:
            return _answer(request, not_run(decision))
        return _execute(request, handler, decision)

    def _ask(self, request: ToolCallRequest) -> str:
        call, config = request.tool_call, request.runtime.config
        thread_id = str(config["configurable"]["thread_id"])
        node = config.get("metadata", {}).get("langgraph_node", "tools")
        key = f"langgraph:{thread_id}:{node}:{call['id']}"
        context = {"langgraph": {"thread_id": thread_id, "node": node, "tool_call_id": call["id"]}}
        return ApprovalClient.on(current()).request(self.request(call["name"], call["args"], key, context))


def _execute(request: ToolCallRequest, handler: Handler, decision: Decision) -> ToolMessage | Command[Any]:
    """Run the tool with the approved arguments through `execute_approved`; a refusal or the tool's
    own error is the model's answer."""

    def run(payload: dict[str, Any]) -> Ran:
        result = handler(request.override(tool_call={**request.tool_call, "args": payload}))
        if isinstance(result, ToolMessage) and result.status == "error":
            raise ToolFailed(result)
        return Ran(result)

    try:
        return execute_approved(decision, run).result
    except ToolFailed as failed:
        return failed.message
    except ExecutionRefused as refused:
        return _answer(request, f"Not executed: {refused}")


def _answer(request: ToolCallRequest, text: str) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(content=text, name=call["name"], tool_call_id=call["id"], status="error")


def thread_config(decision: Decision) -> RunnableConfig:
    """The config of the thread that asked for `decision` (read from its request's context)."""
    state = ApprovalClient.on(current()).get(decision.request_id)
    thread_id = (state.request or {}).get("context", {}).get("langgraph", {}).get("thread_id")
    if thread_id is None:
        raise ValueError(f"request {decision.request_id} was not asked by a LangGraph thread")
    return {"configurable": {"thread_id": thread_id}}


def pending(graph: Pregel[Any, Any], config: RunnableConfig) -> list[Interrupt]:
    """The thread's interrupts that wait for a countersign decision."""
    return [
        i for i in graph.get_state(config).interrupts if isinstance(i.value, dict) and REQUEST_ID in i.value
    ]


def resume_graph(
    graph: Pregel[Any, Any], decision: Decision | dict[str, Any], config: RunnableConfig | None = None
) -> Any:
    """Resume the thread paused for `decision` (its thread found from the request unless `config` is
    given) with `Command(resume=...)`, and return what `graph.invoke` returns; None when no
    interrupt of the thread waits for it (already resumed: a repeated delivery changes nothing).
    Use it in a resume job `func(decision)`, a webhook receiver, or after `ApprovalClient.wait`."""
    decision = Decision.from_json(decision) if isinstance(decision, dict) else decision
    config = config or thread_config(decision)
    waiting = [i for i in pending(graph, config) if i.value[REQUEST_ID] == decision.request_id]
    if not waiting:
        return None
    return graph.invoke(Command(resume={waiting[0].id: decision.to_json()}), config)


def run_until_decided(
    graph: Pregel[Any, Any], graph_input: Any, config: RunnableConfig, *, timeout: float
) -> Any:
    """`graph.invoke(graph_input, config)`, then, while the thread waits for countersign decisions,
    wait for each (`ApprovalClient.wait`, at most `timeout` seconds each) and resume it. Returns
    what the last `invoke` returns; raises `WaitTimeout` (the thread stays paused: resume it later
    with `resume_graph`)."""
    result = graph.invoke(graph_input, config)
    client = ApprovalClient.on(current())
    while waiting := pending(graph, config):
        decision = client.wait(waiting[0].value[REQUEST_ID], timeout=timeout)
        result = resume_graph(graph, decision, config)
    return result
