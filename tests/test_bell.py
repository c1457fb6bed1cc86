"""The decision bell on a real redis-server: a ring wakes every waiter, early or late, and expires."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, cast

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from countersign.bell import BELL_TTL_SECONDS, bell_key, listen, listen_async, ring
from tests.helpers.redis_server import RedisServer


def test_unrung_bell_times_out(redis: Redis) -> None:
    started = time.monotonic()
    assert listen(redis, "01UNRUNG", 0.2) is False
    assert time.monotonic() - started >= 0.15


def test_a_ring_wakes_every_waiter_blocked_before_it(redis_server: RedisServer, redis: Redis) -> None:
    woken: list[bool] = []
    clients = [Redis.from_url(redis_server.url) for _ in range(3)]
    threads = [threading.Thread(target=lambda c=c: woken.append(listen(c, "01RING", 10))) for c in clients]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while _blocked(redis) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    ring(redis, ["01RING"])
    for thread in threads:
        thread.join(5)
    assert woken == [True, True, True]


def test_a_waiter_after_the_ring_returns_at_once_and_the_ring_expires(redis: Redis) -> None:
    with redis.pipeline(transaction=False) as pipeline:
        ring(pipeline, ["01LATE", "01LATE"])  # rung twice (relay and sweep): still one element
        pipeline.execute()
    assert listen(redis, "01LATE", 5) is True
    assert listen(redis, "01LATE", 5) is True
    assert redis.llen(bell_key("01LATE")) == 1
    assert 0 < cast(int, redis.ttl(bell_key("01LATE"))) <= BELL_TTL_SECONDS


def test_async_listener_wakes_on_ring(redis_server: RedisServer, redis: Redis) -> None:
    async def wait_then_ring() -> bool:
        client = AsyncRedis.from_url(redis_server.url)
        try:
            waiter = asyncio.create_task(listen_async(client, "01ASYNC", 10))
            await asyncio.sleep(0)
            await asyncio.to_thread(ring, redis, ["01ASYNC"])
            return await asyncio.wait_for(waiter, 5)
        finally:
            await client.aclose()

    assert asyncio.run(wait_then_ring()) is True


def _blocked(redis: Redis) -> int:
    return int(cast("dict[str, Any]", redis.info("clients"))["blocked_clients"])
