"""countersign: a Slack approval router for AI agents.

The agent-facing API is small (`countersign.agent.__all__`):

    from countersign import ApprovalClient, approved_action
    request_id = ApprovalClient.from_env().request(action="issue_refund", payload={...}, ...)
"""

from .agent import *  # noqa: F403 - re-export the agent-facing API
from .agent import __all__ as __all__
