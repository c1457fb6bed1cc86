"""Wake latency of waiting in process: decision commit -> the waiting agent has the decision.

    python bench/wake_latency.py --requests 200 --database-url postgresql://postgres@127.0.0.1:5432/test

One process, real parts: a private redis-server and a scratch database (with `--database-url`,
PostgreSQL; default a new SQLite file). Per request, stored pending (no Slack, no intake), an agent
waits for its decision and, once it is blocked, the decision path runs as the router runs it
(`Store.decide`, then `relay.try_publish`, which rings the bell). Latency = from the moment
`Store.decide` returned (its transaction committed) to the moment the waiter returned the decision
(`time.monotonic()`, one clock). Three waiters, one request at a time each:

- `ApprovalClient.wait` (blocking, a thread);
- `AsyncApprovalClient.wait` (asyncio: the bell on `redis.asyncio`, the reads in a thread);
- baseline: a database polling loop every `--poll-ms` (what an agent does without the bell), which
  decides only once it has read the decided row.

Also prints the SELECTs each waiter ran per request (a SQLAlchemy event listener on its engine).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from sqlalchemy import event
from ulid import ULID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, percentile, print_table, start_redis, wait_until
from countersign.agent import ApprovalClient, AsyncApprovalClient
from countersign.connections import REDIS_TIMEOUT_SECONDS
from countersign.decision import decision_of
from countersign.router import relay
from countersign.router.jobs import resume_job_id
from countersign.store import ApprovalRequest, Outcome, ResumeEvent, Rules, Store, Via

SECRET = "bench-secret"


def new_request(store: Store) -> str:
    """A stored pending request that names no resume target (the agent waits in process)."""
    request_id = str(ULID())
    store.create(
        {
            "id": request_id,
            "idempotency_key": request_id,
            "action": "issue_refund",
            "payload": {"amount": "5.00"},
            "payload_sha256": "a" * 64,
            "summary": "s",
            "reason": None,
            "context": None,
            "requester": "bench",
            "on_behalf_of": None,
            "run_id": None,
            "step": None,
            "confidence": None,
            "channel": "C0BENCH",
            "approvers": ["U0LEAD"],
            "policy_version": 1,
            "policy_sha256": "b" * 64,
            "rules": Rules(grant_ttl_seconds=60),
        }
    )
    return request_id


def resume(row: ApprovalRequest) -> ResumeEvent:
    return ResumeEvent(resume_job_id(row.id), decision_of(row, SECRET).to_json())


def decide(store: Store, redis: Redis, request_id: str) -> float:
    """Approve by policy as intake does; returns when its transaction had committed (monotonic)."""
    result = store.decide(request_id, Outcome.APPROVED, [], via=Via.POLICY, resume=resume, reason="bench")
    committed = time.monotonic()
    relay.try_publish(redis, result.event)  # type: ignore[union-attr]
    return committed


def blocked(redis: Redis) -> int:
    """How many clients are blocked in Redis now (a waiter on its bell)."""
    return int(cast("dict[str, Any]", redis.info("clients"))["blocked_clients"])


class Counted:
    """SELECTs run on a store's engines (their `before_cursor_execute` event)."""

    def __init__(self, store: Store) -> None:
        self.selects = 0
        for engine in store.engines:  # its transactions' and its single statements' (autocommit)
            event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.selects += statement.lstrip().upper().startswith("SELECT")


Wait = Callable[[str], Any]
"""A waiter: returns once the request `id` is decided."""


def measure(
    wait: Wait, waiting: Callable[[], int], store: Store, redis: Redis, args: argparse.Namespace
) -> list[float]:
    """Wake latencies (s) of `args.requests` requests, one at a time (`wake`)."""
    return [wake(wait, waiting, store, redis, args.poll_ms / 1000) for _ in range(args.requests)]


def wake(wait: Wait, waiting: Callable[[], int], store: Store, redis: Redis, spread: float) -> float:
    """A new request waited on by `wait` in a thread and decided once `waiting()` has grown (the
    waiter is at it) and a random part of `spread` seconds has passed (so a decision falls anywhere
    in the baseline's poll cycle): the seconds from its commit to the waiter's return."""
    request_id = new_request(store)
    woken: list[float] = []
    before = waiting()
    waiter = threading.Thread(target=lambda: (wait(request_id), woken.append(time.monotonic())))
    waiter.start()
    wait_until(lambda: waiting() > before, 10, "the waiter did not start waiting")
    time.sleep(random.uniform(0, spread))
    committed = decide(store, redis, request_id)
    waiter.join(30)
    return woken[0] - committed


def poll(store: Store, request_id: str, every: float) -> None:
    """The baseline: read the request's decision every `every` seconds until there is one."""
    while store.outbox_event(request_id) is None:
        time.sleep(every)


def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="countersign-wake-") as tmp:
        server, redis_url = start_redis(Path(tmp))
        try:
            with bench_database(args.database_url, Path(tmp)) as database_url:
                report(redis_url, database_url, args)
        finally:
            server.kill()


def report(redis_url: str, database_url: str, args: argparse.Namespace) -> None:
    redis = Redis.from_url(redis_url, socket_timeout=REDIS_TIMEOUT_SECONDS)  # as `from_env` makes it
    store = Store.from_url(database_url)
    rows: list[tuple[str, object]] = [("requests per waiter", args.requests)]

    sync_store = Store.from_url(database_url)
    sync, count = ApprovalClient(redis, sync_store), Counted(sync_store)
    latencies = measure(lambda i: sync.wait(i, timeout=30), lambda: blocked(redis), store, redis, args)
    rows += summary("ApprovalClient.wait", latencies, count.selects / args.requests)

    async_store = Store.from_url(database_url)
    bell = AsyncRedis.from_url(redis_url, socket_timeout=REDIS_TIMEOUT_SECONDS)
    async_client, count = AsyncApprovalClient(ApprovalClient(redis, async_store), bell), Counted(async_store)
    loop = asyncio.new_event_loop()
    latencies = measure(
        lambda i: loop.run_until_complete(async_client.wait(i, timeout=30)),
        lambda: blocked(redis),
        store,
        redis,
        args,
    )
    loop.run_until_complete(async_client.aclose())
    loop.close()
    rows += summary("AsyncApprovalClient.wait", latencies, count.selects / args.requests)

    poll_store = Store.from_url(database_url)
    count, every = Counted(poll_store), args.poll_ms / 1000
    latencies = measure(lambda i: poll(poll_store, i, every), lambda: count.selects, store, redis, args)
    rows += summary(f"baseline: poll every {args.poll_ms:g} ms", latencies, count.selects / args.requests)
    print_table(rows)


def summary(name: str, latencies: list[float], selects: float) -> list[tuple[str, object]]:
    return [
        (f"{name}: wake p50 (ms)", f"{percentile(latencies, 50) * 1000:.2f}"),
        (f"{name}: wake p99 (ms)", f"{percentile(latencies, 99) * 1000:.2f}"),
        (f"{name}: SELECTs per wait", f"{selects:.1f}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per waiter (default 200)")
    parser.add_argument(
        "--poll-ms", type=float, default=100.0, help="the baseline's poll interval (default 100)"
    )
    parser.add_argument("--database-url", help="a PostgreSQL server URL (default: a new SQLite file)")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
