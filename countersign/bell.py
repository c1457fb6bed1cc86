"""The decision bell: wake whoever waits on a request the moment its decision is committed.

A waiter (`ApprovalClient.wait`, the HTTP API's long poll) reads the request from the database
first; if it is undecided it blocks on the request's bell, a Redis list `countersign:decided:<id>`,
then reads the database again. The decision path rings the bell after its transaction commits
(`ring`). The bell keeps its one element for `BELL_TTL_SECONDS`, and a waiter blocks with
`BLMOVE key key RIGHT LEFT timeout`, which hands the element back to the same list
(https://redis.io/docs/latest/commands/blmove/), so a ring is not consumed: every waiter wakes,
and a waiter that blocks after the ring returns at once. No database polling loop: the database is
read once before and once after each wake.

The bell is only a wake-up; the database says what was decided. A lost ring (Redis restarted)
costs a waiter its timeout, never a wrong answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

BELL_TTL_SECONDS = 3600
"""How long a rung bell stays rung: far longer than a waiter takes between its database read and
its block on the bell, short enough that Redis keeps nothing of a decided request for long."""
MAX_BLOCK_SECONDS = 60.0
"""The longest one blocking call waits; longer waits loop, so a dropped connection is noticed."""


def bell_key(request_id: str) -> str:
    """The Redis key of `request_id`'s bell."""
    return f"countersign:decided:{request_id}"


def ring(redis: Any, request_ids: Iterable[str]) -> None:
    """Ring the bells of `request_ids` (decided and committed). `redis` is a `Redis` client or a
    pipeline of one (then the caller executes it; nothing is sent here). Three commands a request,
    no reply read. Raises redis-py's `RedisError`s when given a client."""
    pipeline = redis if hasattr(redis, "command_stack") else redis.pipeline(transaction=False)
    for request_id in request_ids:
        key = bell_key(request_id)
        pipeline.lpush(key, b"1")
        pipeline.ltrim(key, 0, 0)
        pipeline.expire(key, BELL_TTL_SECONDS)
    if pipeline is not redis:
        pipeline.execute()


def _block_seconds(timeout: float) -> float:
    # BLMOVE's timeout is in seconds with decimals (Redis >= 6; redis-py's stubs say int); 0 would
    # block for ever.
    return max(0.01, min(timeout, MAX_BLOCK_SECONDS))


def listen(redis: Redis, request_id: str, timeout: float) -> bool:
    """Block until `request_id`'s bell is rung or `timeout` seconds pass (at most
    `MAX_BLOCK_SECONDS` per call). True if rung. The client's `socket_timeout`, if set, must exceed
    the block. Raises redis-py's `RedisError`s."""
    key = bell_key(request_id)
    moved = redis.blmove(key, key, _block_seconds(timeout), "RIGHT", "LEFT")  # type: ignore[arg-type]
    return moved is not None


async def listen_async(redis: AsyncRedis, request_id: str, timeout: float) -> bool:
    """`listen` for asyncio clients."""
    key = bell_key(request_id)
    moved = await redis.blmove(key, key, _block_seconds(timeout), "RIGHT", "LEFT")  # type: ignore[arg-type]
    return moved is not None
