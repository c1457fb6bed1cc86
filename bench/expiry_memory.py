"""What the sweep's expiry path keeps in memory: RSS and tracemalloc over rounds of expiries.

    python bench/expiry_memory.py --database-url postgresql://postgres@127.0.0.1:5432/test

In this process (traced by tracemalloc from the start), on a scratch PostgreSQL database and a
private redis-server, no Slack: a first round of 10 expiries (the code paths run once), then
`--rounds` rounds of `--due` copies of one request past their deadline, expired as the sweep does
(`Store.expire_due` of 500 while a whole batch comes back, each batch published by
`relay.publish_all`). After each round: this process's RSS, what Python holds (tracemalloc's
current traced size) and its peak during the round; then the lines whose held allocations grew most
over the first full round and over the rounds after it. The snapshots are dumped to disk between
readings, so they do not count in the RSS; tracemalloc's own tables do (its trace table grows to
the round's peak and is kept). Prints its figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path

tracemalloc.start(1)

from redis import Redis  # noqa: E402
from sqlalchemy import Engine, text  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import store_cost  # noqa: E402
from bench.common import bench_database, rss_kib, start_redis  # noqa: E402
from countersign.router import relay  # noqa: E402
from countersign.store import ApprovalRequest, Store, create_db_engine  # noqa: E402


def clone_due(engine: Engine, template: str, count: int, prefix: str) -> None:
    """`count` copies of request `template`, ids starting with `prefix`, past their deadline."""
    columns = [c.name for c in ApprovalRequest.__table__.columns]
    changed = {
        "id": f"'{prefix}' || lpad(g::text, 24, '0')",
        "idempotency_key": f"t.idempotency_key || '-{prefix}' || g",
        "expires_at": "now() - interval '1 second'",
    }
    values = ", ".join(changed.get(column, f"t.{column}") for column in columns)
    with engine.begin() as connection:
        connection.execute(
            text(
                f"INSERT INTO approval_requests ({', '.join(columns)}) SELECT {values}"
                " FROM approval_requests t, generate_series(1, :n) g WHERE t.id = :id"
            ),
            {"n": count, "id": template},
        )


def expire_all(store: Store, redis: Redis) -> int:
    """Expire and publish everything due, 500 a batch, as the sweep does; how many."""
    expired = 0
    while True:
        decided = store.expire_due(store_cost.BATCH, store_cost.resume)
        relay.publish_all(store, redis, [one.event for one in decided])
        expired += len(decided)
        if len(decided) < store_cost.BATCH:
            return expired


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--due", type=int, default=10_000, help="requests expired a round (default 10000)")
    parser.add_argument("--rounds", type=int, default=4, help="full rounds (default 4)")
    parser.add_argument("--database-url", required=True, help="a PostgreSQL server for a scratch database")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    server, url = start_redis(tmp)
    readings: list[tuple[str, float, float, float, Path]] = []
    try:
        with bench_database(args.database_url, tmp) as database_url:
            engine = create_db_engine(database_url)
            store, redis = Store(engine), Redis.from_url(url)
            template = store_cost.create(store)
            store.attach_card(template, "C0REFUNDS", "1700000000.000200")
            for n in range(args.rounds + 1):
                clone_due(engine, template.id, 10 if n == 0 else args.due, f"R{n}")
                expired = expire_all(store, redis)
                redis.flushdb()
                gc.collect()
                current, peak = tracemalloc.get_traced_memory()
                path = tmp / f"round{n}.snapshot"
                tracemalloc.take_snapshot().dump(str(path))
                tracemalloc.reset_peak()
                readings.append(
                    (f"round {n}: {expired} expired", rss_kib(os.getpid()) / 1024, current, peak, path)
                )
            engine.dispose()
    finally:
        server.kill()
    for label, rss, current, peak, _ in readings:
        print(
            f"{label:26} RSS {rss:6.1f} MiB, held by Python {current / 2**20:5.1f} MiB"
            f" (peak {peak / 2**20:5.1f})"
        )
    snapshots = [tracemalloc.Snapshot.load(str(reading[4])) for reading in readings]
    for label, old, new in (("round 1", 0, 1), (f"rounds 2-{args.rounds}", 1, -1)):
        print(f"held allocations that grew most over {label}:")
        for stat in snapshots[new].compare_to(snapshots[old], "lineno")[:8]:
            frame = stat.traceback[0]
            where = "/".join(Path(frame.filename).parts[-2:])
            print(f"  {where}:{frame.lineno} {stat.size_diff / 1024:+.0f} KiB, {stat.count_diff:+d} blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
