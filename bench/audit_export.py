"""What the audit chain and the audit export cost (issue 18).

    python bench/audit_export.py --database-url postgresql://postgres@127.0.0.1:5432/test --events 1000000

- **Export memory.** `countersign audit export --format jsonl` (a server-side cursor, rows fetched
  2,000 at a time) runs as a child process over the whole table, its output thrown away; its peak
  RSS (`wait4`'s `ru_maxrss`) is measured after 10 % of the events and after all of them. The
  baseline, side by side in the same run on the same rows, is the same query read with
  `fetchall()` first (what an export without a cursor does), in a child of its own.
- **Chain cost.** `AuditChain.seal` over the events, `SEAL_BATCH` (1,000) a transaction as the sweep
  does: the time per event, and per transaction (how long inserts wait on the table lock at worst).

The events are written straight into `audit_events` (synthetic decisions, one request each) in a
new scratch database (default: a SQLite file). Prints one table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, print_table
from countersign.store import AuditEvent, create_db_engine
from countersign.store.chain import SEAL_BATCH, AuditChain

BATCH = 20_000
FETCH_ALL = """
import sys
from sqlalchemy import select
from sqlalchemy.orm import Session
from countersign.store import AuditEvent, create_db_engine
with Session(create_db_engine(sys.argv[1])) as session:
    rows = session.execute(select(AuditEvent.id, AuditEvent.at, AuditEvent.request_id, AuditEvent.event,
                                  AuditEvent.actor, AuditEvent.detail)).all()
    for row in rows:
        sys.stdout.write(repr(tuple(row)) + "\\n")
"""


def fill(url: str, start: int, count: int) -> None:
    """Write `count` synthetic decision events (ids after `start`), `BATCH` per transaction."""
    engine = create_db_engine(url)
    at = datetime.now(UTC) - timedelta(days=30)
    for first in range(start, start + count, BATCH):
        rows = [
            {
                "request_id": f"01BENCH{n:019d}",
                "event": "approved" if n % 7 else "rejected",
                "actor": "U0LEAD",
                "detail": {"via": "slack", "reason": None if n % 7 else "wrong customer", "edits": []},
                "at": at + timedelta(seconds=n),
            }
            for n in range(first, min(first + BATCH, start + count))
        ]
        with engine.begin() as connection:
            connection.execute(insert(AuditEvent), rows)
    engine.dispose()


def peak_rss_mib(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run `argv` with its stdout thrown away: `(peak RSS in MiB, seconds)`."""
    started = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        child = subprocess.Popen(argv, stdout=sink, env=env)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{argv[:4]} exited {child.returncode}")
    return usage.ru_maxrss / 1024, time.perf_counter() - started


def measure(url: str, events: int) -> list[tuple[str, object]]:
    env = {**os.environ, "DATABASE_URL": url}
    export = [sys.executable, "-m", "countersign.cli", "audit", "export", "--since", "3650d"]
    baseline = [sys.executable, "-c", FETCH_ALL, url]
    rows: list[tuple[str, object]] = []
    done = 0
    for size in (events // 10, events):
        fill(url, done, size - done)
        done = size
        rss, seconds = peak_rss_mib(export, env)
        rows.append((f"export, {size:,} events: peak RSS", f"{rss:.0f} MiB ({seconds:.1f} s)"))
        rss, seconds = peak_rss_mib(baseline, env)
        rows.append((f"baseline fetchall(), {size:,} events: peak RSS", f"{rss:.0f} MiB ({seconds:.1f} s)"))
    chain = AuditChain(create_db_engine(url))
    longest, started = 0.0, time.perf_counter()
    while True:
        one = time.perf_counter()
        if not chain.seal():
            break
        longest = max(longest, time.perf_counter() - one)
    total = time.perf_counter() - started
    rows.append(("seal: time per event", f"{total / events * 1e6:.1f} µs"))
    rows.append((f"seal: longest {SEAL_BATCH:,}-event transaction", f"{longest * 1000:.0f} ms"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a PostgreSQL server URL (default: a SQLite file)")
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, bench_database(args.database_url, Path(tmp)) as url:
        print_table(measure(url, args.events))


if __name__ == "__main__":
    main()
