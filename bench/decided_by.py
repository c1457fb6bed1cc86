"""One reviewer's "Decided by you recently" (the App Home tab) over a large audit trail.

    python bench/decided_by.py --database-url postgresql://postgres@127.0.0.1:5432/test [--events 1000000]

On a scratch PostgreSQL database: `--events` audit events over `--events / 5` requests (one event in
ten a `vote` by one of 1,000 reviewers, one request in ten decided), written in two `INSERT ...
SELECT`s; then the median of 20 calls of `Store.decided_by_user` for one reviewer with the partial
index `ix_audit_events_decided_by` (migration 0014) and with it dropped. Prints one table; asserts
nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, print_table
from countersign.store import Store, create_db_engine

ROWS = """
INSERT INTO approval_requests (id, idempotency_key, action, payload, payload_sha256, summary, requester,
    status, channel, approvers, policy_version, policy_sha256, decided_at)
SELECT 'r' || i, 'k' || i, 'issue_refund', '{}'::jsonb, '', 'refund', 'agent',
    CASE WHEN mod(i, 10) = 0 THEN 'approved' ELSE 'pending' END, 'C1', '[]'::jsonb, 1, '',
    now() - make_interval(secs => i)
FROM generate_series(0, :requests - 1) i;
INSERT INTO audit_events (request_id, event, actor, detail)
SELECT 'r' || mod(i, :requests), CASE WHEN mod(i, 10) = 0 THEN 'vote' ELSE 'card_posted' END,
    'U' || mod(i, 1000), '{}'::jsonb
FROM generate_series(1, :events) i;
ANALYZE approval_requests;
ANALYZE audit_events
"""


def _median_ms(store: Store, user: str, runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        store.decided_by_user(user)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True, help="a PostgreSQL server (for a scratch database)")
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, bench_database(args.database_url, Path(tmp)) as url:
        engine = create_db_engine(url)
        with engine.begin() as conn:
            for statement in ROWS.split(";"):
                conn.exec_driver_sql(
                    statement.replace(":requests", str(args.events // 5)).replace(":events", str(args.events))
                )
        store = Store(engine)
        indexed = _median_ms(store, "U420")
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP INDEX ix_audit_events_decided_by")
        scanned = _median_ms(store, "U420")
        engine.dispose()
    print_table(
        [
            ("audit events", f"{args.events:,}"),
            ("decided_by_user, ms p50 of 20, without the index", f"{scanned:.2f}"),
            ("decided_by_user, ms p50 of 20, with ix_audit_events_decided_by", f"{indexed:.2f}"),
        ]
    )


if __name__ == "__main__":
    main()
