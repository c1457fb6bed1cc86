"""What the two durability records cost: the intake outbox row per request, the journal entry per click.

    python bench/durability_cost.py --database-url postgresql://postgres@127.0.0.1:5432/test

- **Intake outbox.** `ApprovalClient.request()` claims the idempotency key, INSERTs the intake
  message into `intake_outbox`, then enqueues the intake job. The baseline is the same call without
  the INSERT (`claim_key` + `enqueue_intake`, the same request data, the same Redis, database and
  JSON serializer). The two alternate call by call, so both see the same machine load.
- **Click journal.** The web journals an acked action (`journal.record`: a ZADD) and drops it when
  its work ends (`journal.forget`: a ZREM). Timed around a real `Action` on the same Redis.

Uses a private redis-server and, with `--database-url`, a scratch PostgreSQL database (default: a
new SQLite file). Nothing runs the intake jobs (only the caller's side is timed). Prints one table;
asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from redis import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, percentile, print_table, start_redis
from countersign import ApprovalClient
from countersign.idempotency import claim_key
from countersign.router import journal
from countersign.router.jobs import enqueue_intake
from countersign.router.review import Action
from countersign.schema import ApprovalRequestV1, IntakeMessage, parse
from countersign.store import Store, create_db_engine


def request(n: int, side: str) -> ApprovalRequestV1:
    """The n-th request of one side: the same shape as the README's refund, a key of its own."""
    return parse(
        ApprovalRequestV1,
        {
            "action": "issue_refund",
            "requester": "bench-agent",
            "run_id": side,
            "step": str(n),
            "summary": f"Refund order #{n}",
            "payload": {"order_id": f"A-{n}", "amount": "49.00", "currency": "EUR"},
            "resume": {"queue": "bench-agent", "func": "bench.noop.resume"},
        },
    )


def without_outbox(redis: Redis) -> Callable[[ApprovalRequestV1], object]:
    """`request()` as it was before the intake outbox: claim the key, enqueue the intake job."""

    def send(req: ApprovalRequestV1) -> object:
        request_id = claim_key(redis, req.requester, req.key, req.action, req.payload_sha256)
        message = IntakeMessage(request_id=request_id, request=req).model_dump(mode="json")
        enqueue_intake(redis, request_id, req.action, message)
        return request_id

    return send


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def summary(samples: list[float]) -> str:
    return " / ".join(f"{percentile(samples, p):.2f}" for p in (50, 95, 99))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per side (default 2000)")
    parser.add_argument("--clicks", type=int, default=5000, help="journaled clicks (default 5000)")
    parser.add_argument("--database-url", help="a PostgreSQL server URL (default: a SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server, redis_url = start_redis(tmp)
        try:
            with bench_database(args.database_url, tmp) as db_url:
                redis = Redis.from_url(redis_url)
                engine = create_db_engine(db_url)
                client = ApprovalClient(redis, Store(engine))
                baseline = without_outbox(redis)
                ours: list[float] = []
                base: list[float] = []
                for n in range(args.requests):
                    mine, theirs = request(n, "outbox"), request(n, "baseline")  # built untimed
                    ours.append(timed(lambda mine=mine: client.request(mine)))
                    base.append(timed(lambda theirs=theirs: baseline(theirs)))
                action = Action(
                    "approve",
                    "01JBENCH0000000000000000AA",
                    {"slack_user_id": "U0LEAD", "name": "lee"},
                    "C0FINANCE",
                )
                clicks = [
                    timed(lambda: journal.forget(redis, journal.record(redis, action) or ""))
                    for _ in range(args.clicks)
                ]
                engine.dispose()
                print_table(
                    [
                        ("database", engine.dialect.name),
                        ("requests per side (alternating)", args.requests),
                        ("request() ms p50 / p95 / p99, with outbox", summary(ours)),
                        ("request() ms p50 / p95 / p99, without (baseline)", summary(base)),
                        ("outbox cost ms, p50", f"{percentile(ours, 50) - percentile(base, 50):.2f}"),
                        ("journaled clicks", args.clicks),
                        ("journal record + forget ms p50 / p95 / p99", summary(clicks)),
                    ]
                )
        finally:
            server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
