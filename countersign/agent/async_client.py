"""The agent side for asyncio: ask for approval and await the decision without blocking the loop.

    client = AsyncApprovalClient.from_env()
    decision = await client.request_and_wait(action="issue_refund", payload={...}, ..., timeout=600)

The bell is awaited on an asyncio Redis client (`redis.asyncio`); the database reads and the
request's enqueue, which use blocking clients, run in threads (`asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis as AsyncRedis

from ..config import Settings, load_settings
from ..connections import REDIS_CONNECT_TIMEOUT_SECONDS, REDIS_TIMEOUT_SECONDS
from ..decision import Decision
from ..schema import ApprovalRequestV1
from . import waiting
from .client import ApprovalClient, RequestState


class AsyncApprovalClient:
    """`ApprovalClient` with coroutines: `request`, `get`, `wait`, `request_and_wait`, each raising
    what the blocking one raises. Keep one per event loop; `aclose()` it when done."""

    def __init__(self, client: ApprovalClient, redis: AsyncRedis) -> None:
        """`client` enqueues and reads; `redis` (an asyncio client on the same Redis) waits on bells."""
        self._client = client
        self._redis = redis

    @classmethod
    def from_env(cls, settings: Settings | None = None) -> AsyncApprovalClient:
        """A client on `REDIS_URL` and `DATABASE_URL` from the environment (or `settings`)."""
        settings = settings or load_settings()
        redis = AsyncRedis.from_url(
            settings.REDIS_URL,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS,
            socket_timeout=REDIS_TIMEOUT_SECONDS,
        )
        return cls(ApprovalClient.from_env(settings), redis)

    async def request(self, request: dict[str, Any] | ApprovalRequestV1 | None = None, **fields: Any) -> str:
        """`ApprovalClient.request`: the new request's id."""
        return await asyncio.to_thread(self._client.request, request, **fields)

    async def get(self, request_id: str) -> RequestState:
        """`ApprovalClient.get`: the request's current state."""
        return await asyncio.to_thread(self._client.get, request_id)

    async def wait(self, request_id: str, *, timeout: float) -> Decision:
        """`ApprovalClient.wait`: the decision, within `timeout` seconds, or `WaitTimeout`."""
        wait = waiting.steps(request_id, timeout, waiting.longest_block(self._redis))
        return await waiting.run_async(wait, self._redis, self._client.read_decision)

    async def request_and_wait(
        self, request: dict[str, Any] | ApprovalRequestV1 | None = None, *, timeout: float, **fields: Any
    ) -> Decision:
        """`ApprovalClient.request_and_wait`: request, then the decision within `timeout` seconds."""
        return await self.wait(await self.request(request, **fields), timeout=timeout)

    async def aclose(self) -> None:
        """Close the asyncio Redis client's connections."""
        await self._redis.aclose()
