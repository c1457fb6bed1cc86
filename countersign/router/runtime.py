"""The connections a countersign process uses, built once from `Settings` on first use.

RQ jobs receive only JSON arguments, so a job finds its database, Redis, Slack client and policy
through `current()`. Queues always use RQ's JSON serializer: nothing read from Redis is unpickled
(DESIGN.md, invariant 9).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from redis import Redis
from rq import Queue
from rq.serializers import JSONSerializer
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, ServerErrorRetryHandler

from ..config import Settings, load_settings
from ..store import Store

if TYPE_CHECKING:  # the policy (and its CEL engine) is imported when first needed, not by agents
    from .policy import Policy, PolicyHolder

INTAKE_QUEUE = "countersign"
SLACK_TIMEOUT_SECONDS = 10


@dataclass
class Runtime:
    """Lazily built clients for one process. Each property raises `ConfigError` if its setting is missing."""

    settings: Settings

    @cached_property
    def store(self) -> Store:
        """The database (`DATABASE_URL`)."""
        return Store.from_url(self.settings.DATABASE_URL)

    @cached_property
    def redis(self) -> Redis:
        """The RQ transport (`REDIS_URL`)."""
        return Redis.from_url(self.settings.REDIS_URL, socket_connect_timeout=5, socket_timeout=10)

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
        from .policy import holder

        return holder(self.settings.COUNTERSIGN_POLICY)

    @property
    def policy(self) -> Policy:
        """The policy in force now (see `PolicyHolder.current`)."""
        return self.policies.current()

    def queue(self, name: str = INTAKE_QUEUE) -> Queue:
        """The RQ queue `name` on this process's Redis."""
        return json_queue(name, self.redis)


def json_queue(name: str, redis: Redis) -> Queue:
    """The RQ queue `name` with the JSON serializer."""
    return Queue(name, connection=redis, serializer=JSONSerializer)


@functools.cache
def current() -> Runtime:
    """This process's `Runtime`, from the environment. Tests call `current.cache_clear()`."""
    return Runtime(load_settings())
