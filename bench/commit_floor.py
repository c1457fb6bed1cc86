"""The floor of a durable vote on this machine: PostgreSQL COMMIT latency alone, at a click rate.

    python bench/commit_floor.py --rate 50 --database-url postgresql://postgres@127.0.0.1:5432/test

Open loop, as `decision_latency.py` sends clicks: transaction `i` starts at `start + i / rate` on a
pool of 16 threads (one psycopg connection each, as the web's decision threads hold theirs), whatever
the answers so far. Two shapes, each for `--seconds`, in a scratch database (`common.bench_database`)
with one table of 1,000 rows:

- `update`: `BEGIN`, `UPDATE t SET n = n + 1 WHERE id = $1`, `COMMIT` (psycopg sends the `BEGIN`
  before the first statement, a round trip of its own, as for the store's transactions; the COMMIT waits
  for the write-ahead log to be flushed up to its record: https://www.postgresql.org/docs/15/wal-async-commit.html);
- `vote`: the vote's round trips as `Store.vote` sends them today: `BEGIN`, `SELECT ... FOR UPDATE`,
  `UPDATE`, an `INSERT` of an audit-sized row and an `INSERT` of an outbox-sized row, `COMMIT` (no
  ORM, no Python work between them: what the vote would cost if countersign's own code took no time).

Per transaction: the COMMIT's own wall time and the whole transaction's, p50 / p95 / p99 / max in
ms, and the WAL the server wrote meanwhile (every database on it). `--no-sync` runs the same with
`SET synchronous_commit = off` (what the flush costs; not what countersign may do: a click's vote
must be durable before its resume job is enqueued). Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, percentile, print_table

THREADS = 16
ROWS = 1000


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE t (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
        connection.execute(f"INSERT INTO t (id) SELECT generate_series(0, {ROWS - 1})")
        connection.execute("CREATE TABLE a (id bigserial PRIMARY KEY, t_id int, detail jsonb)")
        connection.execute("CREATE TABLE o (id bigserial PRIMARY KEY, t_id int, body jsonb)")


AUDIT = (
    '{"event": "approved", "actor": "U0LEAD", "where": "card", '
    '"shown": {"text": "%s", "blocks_sha256": "%s"}}'
)


def _transaction(connection: psycopg.Connection, shape: str, row: int) -> tuple[float, float]:
    """Run one transaction of `shape` on `row`; (COMMIT seconds, whole seconds)."""
    start = time.perf_counter()
    if shape == "update":
        connection.execute("UPDATE t SET n = n + 1 WHERE id = %s", (row,))
    else:
        connection.execute("SELECT n FROM t WHERE id = %s FOR UPDATE", (row,))
        connection.execute("UPDATE t SET n = n + 1 WHERE id = %s", (row,))
        connection.execute(
            "INSERT INTO a (t_id, detail) VALUES (%s, %s)", (row, AUDIT % ("x" * 80, "f" * 64))
        )
        connection.execute("INSERT INTO o (t_id, body) VALUES (%s, %s)", (row, AUDIT % ("y" * 300, "e" * 64)))
    committing = time.perf_counter()
    connection.commit()
    end = time.perf_counter()
    return end - committing, end - start


def run(dsn: str, shape: str, rate: float, seconds: float, sync: bool) -> dict[str, object]:
    """One open-loop run of `shape`; its figures."""
    local = threading.local()
    connections: list[psycopg.Connection] = []

    def connection() -> psycopg.Connection:
        if not hasattr(local, "connection"):
            local.connection = psycopg.connect(dsn)  # psycopg sends BEGIN before the first statement
            if not sync:
                local.connection.execute("SET synchronous_commit = off")
                local.connection.commit()
            connections.append(local.connection)
        return local.connection

    def one(i: int) -> tuple[float, float]:
        return _transaction(connection(), shape, i % ROWS)

    count = round(rate * seconds)
    with psycopg.connect(dsn, autocommit=True) as probe:
        wal_before = probe.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]  # type: ignore[index]
    with ThreadPoolExecutor(THREADS) as pool:
        for _ in range(THREADS):  # connect every thread before the clock starts
            pool.submit(connection).result()
        start = time.perf_counter()
        futures = []
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(one, i))
        results = [f.result() for f in futures]
    with psycopg.connect(dsn, autocommit=True) as probe:
        wal_after = probe.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]  # type: ignore[index]
    for each in connections:
        each.close()
    commits, wholes = [r[0] for r in results], [r[1] for r in results]

    def spread(values: list[float]) -> str:
        return " / ".join(f"{percentile(values, p) * 1000:.1f}" for p in (50, 95, 99, 100))

    return {
        "shape": shape + ("" if sync else " (synchronous_commit off)"),
        "COMMIT ms p50 / p95 / p99 / max": spread(commits),
        "transaction ms p50 / p95 / p99 / max": spread(wholes),
        "WAL kB": f"{(wal_after - wal_before) / 1024:.0f}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50, help="transactions per second (default 50)")
    parser.add_argument("--seconds", type=float, default=20, help="seconds per shape (default 20)")
    parser.add_argument(
        "--database-url", required=True, help="a PostgreSQL server to create a scratch database on"
    )
    parser.add_argument("--no-sync", action="store_true", help="also run with synchronous_commit off")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, bench_database(args.database_url, Path(tmp)) as url:
        dsn = _dsn(url)
        _setup(dsn)
        print(f"rate {args.rate:.0f}/s, {args.seconds:.0f} s per shape, {THREADS} threads")
        for sync in (True, False) if args.no_sync else (True,):
            for shape in ("update", "vote"):
                figures = run(dsn, shape, args.rate, args.seconds, sync)
                print_table(list(figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
