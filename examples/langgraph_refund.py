"""A LangGraph agent whose refund tool countersign gates: the graph pauses, a human decides, it resumes.

With `make run` in another terminal:

    make example-langgraph          # python -m examples.langgraph_refund 120.00 --approve

The scripted chat model (no network, no API key) calls `issue_refund`; the gate turns the call into
an approval request and the graph `interrupt()`s. `--approve` presses Approve on the sandbox card as
lee.lead (else press Approve, Edit or Reject on the sandbox page yourself); the agent waits for the
decision, resumes the graph with it, and the tool runs here with the approved (or edited) arguments:
`REFUND EXECUTED: {...}`, then the model's last message. The checkpointer is LangGraph's in-memory
one; give the graph a `PostgresSaver` (langgraph-checkpoint-postgres) to resume in another process.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from countersign import ApprovalClient
from countersign.integrations.langgraph import CountersignGate, pending, resume_graph
from examples import payments
from examples.sandbox_review import approve_in_sandbox

GATE = CountersignGate({"issue_refund": payments.SUMMARY})


@tool
def issue_refund(amount: str, currency: str, customer: str) -> str:
    """Refund `amount` (a decimal string) in `currency` to `customer`."""
    return payments.refund(amount, currency, customer)


class ScriptedRefundModel(BaseChatModel):
    """A chat model with a script instead of an API: asked "refund AMOUNT CURRENCY to CUSTOMER", it
    calls `issue_refund`; given the tool's answer, it says what the tool said."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"The refund tool said: {last.content}")
        else:
            _, amount, currency, _, customer = str(messages[0].content).split()
            args = {"amount": amount, "currency": currency, "customer": customer}
            reply = AIMessage(
                content="", tool_calls=[{"name": "issue_refund", "args": args, "id": "call_refund"}]
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])

    @property
    def _llm_type(self) -> str:
        return "scripted-refund"

    def bind_tools(self, tools: Sequence[Any], **_: Any) -> ScriptedRefundModel:
        return self


def build_graph(
    checkpointer: BaseCheckpointSaver[Any],
    gate: CountersignGate = GATE,
    tools: Sequence[BaseTool] = (issue_refund,),
) -> Any:
    """The agent: the model node, then the tools node (gated), until the model answers in words."""
    model = ScriptedRefundModel().bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools, wrap_tool_call=gate))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A LangGraph agent asks a human before it refunds.")
    parser.add_argument("amount", help="decimal string, e.g. 120.00")
    parser.add_argument("--customer", default="cus_ACME")
    parser.add_argument("--thread", default=f"refund-{uuid.uuid4()}", help="the LangGraph thread id")
    parser.add_argument("--approve", action="store_true", help="approve the card in the sandbox as lee.lead")
    options = parser.parse_args()
    graph, config = build_graph(InMemorySaver()), {"configurable": {"thread_id": options.thread}}
    graph.invoke({"messages": [("user", f"refund {options.amount} USD to {options.customer}")]}, config)
    [paused] = pending(graph, config)
    client = ApprovalClient.from_env()
    print(f"paused for approval request {paused.value['countersign_request_id']}", flush=True)
    if options.approve:
        approve_in_sandbox(client, paused.value["countersign_request_id"])
    decision = client.wait(paused.value["countersign_request_id"], timeout=600)
    result = resume_graph(graph, decision, config)
    print(result["messages"][-1].content)
