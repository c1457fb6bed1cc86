"""countersign: a Slack approval router for AI agents.

The agent-facing API is small:

    from countersign import ApprovalClient
    request_id = ApprovalClient.from_env().request(action="issue_refund", payload={...}, ...)
"""

from .router.client import (
    ApprovalClient,
    ExecutionRefused,
    IdempotencyConflict,
    RequestState,
    RouterUnavailable,
    approved_action,
    execute_approved,
    report_outcome,
)
from .router.schema import InvalidRequest

__all__ = [
    "ApprovalClient",
    "ExecutionRefused",
    "IdempotencyConflict",
    "InvalidRequest",
    "RequestState",
    "RouterUnavailable",
    "approved_action",
    "execute_approved",
    "report_outcome",
]
