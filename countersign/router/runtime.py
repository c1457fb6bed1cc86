"""The connections a router process uses (web, worker, sweep), built once from `Settings`.

`Runtime` adds to the database and Redis (`countersign.connections`) the Slack Web API client,
the policy, and the resume event a decision writes to the outbox. RQ jobs find it through
`current()`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, ServerErrorRetryHandler

from ..config import load_settings
from ..connections import Connections
from ..decision import decision_of
from ..defaults import SLACK_TIMEOUT_SECONDS
from ..store import ApprovalRequest, ResumeEvent
from .jobs import resume_job_id

if TYPE_CHECKING:  # the policy (and its CEL engine) is imported when first needed
    from .policy import Policy
    from .reload import PolicyHolder


@dataclass
class Runtime(Connections):
    """Lazily built clients for one router process. Each property raises `ConfigError` if its
    setting is missing."""

    @cached_property
    def slack(self) -> WebClient:
        """Web API client (`SLACK_BOT_TOKEN`, `SLACK_API_URL`); retries connection errors and 5xx once."""
        self.settings.require("SLACK_BOT_TOKEN", needed_by="the Slack Web API client")
        return WebClient(
            token=self.settings.SLACK_BOT_TOKEN,
            base_url=self.settings.slack_api_url,
            timeout=SLACK_TIMEOUT_SECONDS,
            retry_handlers=[ConnectionErrorRetryHandler(), ServerErrorRetryHandler()],
        )

    @cached_property
    def policies(self) -> PolicyHolder:
        """The policy file (`COUNTERSIGN_POLICY`), reloaded on change; raises `PolicyError` if it
        is invalid at first load."""
        self.settings.require("COUNTERSIGN_POLICY", needed_by="routing by policy")
        assert self.settings.COUNTERSIGN_POLICY is not None
        from .reload import holder

        return holder(self.settings.COUNTERSIGN_POLICY)

    @property
    def policy(self) -> Policy:
        """The policy in force now (see `PolicyHolder.current`)."""
        return self.policies.current()

    def resume_event(self, request: ApprovalRequest) -> ResumeEvent:
        """The outbox row of a request the store has just decided (`Store.decide`, `vote`,
        `expire`): its resume job id and its decision, the grant signed with `COUNTERSIGN_SECRET`."""
        decision = decision_of(request, self.settings.COUNTERSIGN_SECRET or "")
        return ResumeEvent(resume_job_id(request.id), decision.to_json())


@functools.cache
def current() -> Runtime:
    """This process's `Runtime`, from the environment. Tests call `current.cache_clear()`."""
    return Runtime(load_settings())
