"""countersign: a Slack approval router for AI agents.

The agent-facing API is small (`countersign.router.client.__all__`):

    from countersign import ApprovalClient, approved_action
    request_id = ApprovalClient.from_env().request(action="issue_refund", payload={...}, ...)
"""

from .router.client import *  # noqa: F403 - re-export the agent-facing API
from .router.client import __all__ as __all__
