"""A LangGraph agent whose refund tool countersign gates: the graph pauses, a human decides, it resumes.

With `make run` in another terminal:

    make example-langgraph          # python -m examples.langgraph_refund 120.00 --approve

The scripted chat model (no network, no API key) calls `issue_refund`; the gate turns the call into
an approval request and the graph `interrupt()`s. `--approve` presses Approve on the sandbox card as
lee.lead (else press Approve, Edit or Reject on the sandbox page yourself); the agent waits for the
decision, resumes the graph with it, and the tool runs here with the approved (or edited) arguments:
`REFUND EXECUTED: {...}`, then the model's last message.

The checkpointer is LangGraph's in-memory one, or with `--checkpoint-url postgresql://…` its
PostgreSQL one (langgraph-checkpoint-postgres), which lets another process resume the thread:

    python -m examples.langgraph_refund 120.00 --checkpoint-url $PG --no-wait   # pauses, exits
    python -m examples.langgraph_refund --resume REQUEST_ID --checkpoint-url $PG  # after a restart
"""

from __future__ import annotations

import argparse
import contextlib
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from countersign import ApprovalClient
from countersign.integrations.langgraph import CountersignGate, pending, resume_graph
from examples import payments
from examples.sandbox_review import approve_in_sandbox, decision_of

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
    handle_tool_errors: bool = False,
) -> Any:
    """The agent: the model node, then the tools node (gated), until the model answers in words. With
    `handle_tool_errors` the tools node answers the model with what a tool raised (LangGraph's error
    text) instead of raising it out of the graph."""
    model = ScriptedRefundModel().bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    errors = {"handle_tool_errors": True} if handle_tool_errors else {}
    builder.add_node("tools", ToolNode(tools, wrap_tool_call=gate, **errors))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


@contextlib.contextmanager
def checkpointer(url: str | None) -> Iterator[BaseCheckpointSaver[Any]]:
    """LangGraph's PostgreSQL checkpointer on `url` (its tables made on first use), else its in-memory one."""
    if url is None:
        yield InMemorySaver()
        return
    from langgraph.checkpoint.postgres import PostgresSaver  # langgraph-checkpoint-postgres

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        yield saver


def start(graph: Any, amount: str, customer: str, thread: str) -> str:
    """Run the agent on a new thread until it pauses: the approval request's id."""
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [("user", f"refund {amount} USD to {customer}")]}, config)
    [paused] = pending(graph, config)
    return str(paused.value["countersign_request_id"])


def main(options: argparse.Namespace) -> None:
    """Start and pause (unless `--resume`), approve (`--approve`), wait, resume (unless `--no-wait`)."""
    client = ApprovalClient.from_env()
    with checkpointer(options.checkpoint_url) as saver:
        graph = build_graph(saver)
        request_id = options.resume or start(graph, options.amount, options.customer, options.thread)
        print(f"{'resuming' if options.resume else 'paused for'} approval request {request_id}", flush=True)
        if options.no_wait:
            if options.approve:
                approve_in_sandbox(client, request_id)
            return
        decision = decision_of(client, request_id, options.approve)
        result = resume_graph(graph, decision)  # the thread found from the request
        print(
            result["messages"][-1].content if result else "already resumed: nothing waits for this decision"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A LangGraph agent asks a human before it refunds.")
    parser.add_argument("amount", nargs="?", default="120.00", help="decimal string (default 120.00)")
    parser.add_argument("--customer", default="cus_ACME")
    parser.add_argument("--thread", default=f"refund-{uuid.uuid4()}", help="the LangGraph thread id")
    parser.add_argument("--approve", action="store_true", help="approve the card in the sandbox as lee.lead")
    parser.add_argument(
        "--checkpoint-url", help="PostgreSQL URL for LangGraph's checkpoints (default: in memory)"
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="stop once paused (resume later with --resume)"
    )
    parser.add_argument(
        "--resume", metavar="REQUEST_ID", help="wait for this request's decision and resume its thread"
    )
    main(parser.parse_args())
