"""What the framework adapters share: which tool calls countersign decides, the approval request of
one, and what the model is told when a call was not run."""

from __future__ import annotations

from typing import Any

from ..agent import Decision


class ToolGate:
    """The tools in `interrupt_on` (tool name → card summary, a `str.format` template of the
    arguments by name) ask countersign first; the action class is the tool's name. `resume` is the
    requests' resume target (`{"queue", "func"}` or `{"webhook"}`, schema v1), or None when the agent
    waits for the decision. `requester` defaults to the framework's name (`REQUESTER`)."""

    REQUESTER = "agent"

    def __init__(
        self,
        interrupt_on: dict[str, str],
        *,
        resume: dict[str, str] | None = None,
        requester: str | None = None,
    ) -> None:
        self.interrupt_on = interrupt_on
        self.resume_target = resume
        self.requester = requester or self.REQUESTER

    def request(self, tool: str, args: dict[str, Any], key: str, context: dict[str, Any]) -> dict[str, Any]:
        """The approval request (schema v1) of a call of `tool` with `args`, under idempotency `key`
        and with `context` (what the adapter needs back to resume). Raises `KeyError` for a tool
        not in `interrupt_on`, and what `str.format` raises for a summary naming a missing argument."""
        return {
            "action": tool,
            "payload": args,
            "summary": self.interrupt_on[tool].format(**args),
            "requester": self.requester,
            "idempotency_key": key,
            "context": context,
            "resume": self.resume_target,
        }


def not_run(decision: Decision) -> str:
    """The tool's answer for a decision that runs nothing: a rejection, with the reviewer's reason,
    or an expiry the policy denied."""
    if decision.outcome == "rejected":
        return f"A reviewer rejected this call: {decision.reason or 'no reason given'}. It was not run."
    return "Nobody approved this call in time, and the policy denied it. It was not run."
