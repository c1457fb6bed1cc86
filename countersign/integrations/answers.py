"""What a framework's model is told when a gated tool call was not run (shared by the adapters)."""

from __future__ import annotations

from ..agent import Decision


def not_run(decision: Decision) -> str:
    """The tool's answer for a decision that runs nothing: a rejection, with the reviewer's reason,
    or an expiry the policy denied."""
    if decision.outcome == "rejected":
        return f"A reviewer rejected this call: {decision.reason or 'no reason given'}. It was not run."
    return "Nobody approved this call in time, and the policy denied it. It was not run."
