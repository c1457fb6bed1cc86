"""LangChain's `create_agent`: countersign in the place of `HumanInTheLoopMiddleware`.

    from langchain.agents import create_agent
    from countersign.integrations.langchain_agents import CountersignMiddleware

    agent = create_agent(model, [issue_refund, lookup_order], checkpointer=checkpointer,
                         middleware=[CountersignMiddleware({"issue_refund": "Refund {amount} {currency}"})])

The middleware's `wrap_tool_call` is `langgraph.CountersignGate`: the same `interrupt_on` per tool
(tool name → card summary), the same request, pause and resume (`resume_graph`,
`run_until_decided` work on the agent's graph), with countersign's decisions in place of the
middleware's approve / edit / reject answers. Needs `pip install 'countersign[langchain]'`.
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from .langgraph import CountersignGate, Handler


class CountersignMiddleware(AgentMiddleware):
    """Agent middleware that sends the calls of the tools in `interrupt_on` to countersign (the
    arguments of `CountersignGate`: `interrupt_on`, `resume`, `requester`)."""

    def __init__(
        self,
        interrupt_on: dict[str, str],
        *,
        resume: dict[str, str] | None = None,
        requester: str = "langchain",
    ) -> None:
        super().__init__()
        self.gate = CountersignGate(interrupt_on, resume=resume, requester=requester)

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        """Run the tool call as countersign decides, pausing the agent until it is."""
        return self.gate(request, handler)
