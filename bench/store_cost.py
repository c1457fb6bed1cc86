"""What the store alone costs: the transactions of one approval cycle, and a backlog of expiries.

    python bench/store_cost.py --database-url postgresql://postgres@127.0.0.1:5432/test

In this process, on a scratch PostgreSQL database (no Redis, no Slack, no RQ), it times:

1. `--cycles` approval cycles, as the store sees one (after `--warmup` unmeasured ones): the
   intake limit's `pending_count`, `create` with the card's posting lease, `attach_card`, `vote` (one
   approval settles it), `claim_execution`, `record_outcome` and the refresh job's `card_facts`;
2. `--expire` pending requests past their deadline (copies of one request, one `INSERT ... SELECT`),
   expired as the sweep does it: `Store.expire_due(500)` while it expires a whole batch, then the
   sweep's `due_for_timeout(500)` of those that escalate (their resume events are written, not
   enqueued).

For each: this process's CPU (`time.process_time`), wall time and the SQL statements sent
(SQLAlchemy `before_cursor_execute`; a transaction's BEGIN and COMMIT and the pool's ping are not
statements; `--round-trips N` counts those too, over N more cycles). `--profile` prints a cProfile
of the measured part to stderr. Prints one table; asserts nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg._connection_base import BaseConnection
from sqlalchemy import Engine, event, text
from ulid import ULID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, print_table
from countersign.decision import decision_of
from countersign.router.jobs import resume_job_id
from countersign.store import (
    ApprovalRequest,
    Decider,
    Level,
    Outcome,
    ResumeEvent,
    Rules,
    Store,
    create_db_engine,
)

BATCH = 500  # timeouts.EXPIRY_BATCH
LEAD: Decider = {"slack_user_id": "U0LEAD", "name": "lee.lead"}
RULES = Rules(levels=[Level(channel="C0REFUNDS", users=["U0LEAD"], timeout=3600, on_timeout="deny")])
STATEMENTS = [0]


def count_statement(*_: Any) -> None:
    STATEMENTS[0] += 1


def resume(row: ApprovalRequest) -> ResumeEvent:
    """The resume event as the router writes it (`Runtime.resume_event`), signed with a bench secret."""
    return ResumeEvent(resume_job_id(row.id), decision_of(row, "bench-secret").to_json())


def anyone(_row: ApprovalRequest) -> None:
    """The vote's `refuse`: the bench's approver may always vote."""
    return None


def create(store: Store, card_lease: bool = False) -> ApprovalRequest:
    request_id = str(ULID())
    row, _ = store.create(
        {
            "id": request_id,
            "idempotency_key": request_id,
            "action": "issue_refund",
            "payload": {"amount": "120.00", "currency": "USD", "customer": "cus_8c1f42"},
            "payload_sha256": "a" * 64,
            "summary": "Refund ACME Corp 120.00 USD (duplicate charge)",
            "reason": "The customer was charged twice for invoice INV-2041.",
            "context": {"invoice": "INV-2041"},
            "requester": "refund-agent",
            "on_behalf_of": None,
            "run_id": "run",
            "step": "refund",
            "confidence": None,
            "resume_queue": "refund-agent",
            "resume_func": "agent.execute_refund",
            "channel": "C0REFUNDS",
            "approvers": ["U0LEAD"],
            "policy_version": 1,
            "policy_sha256": "b" * 64,
            "rules": RULES,
        },
        card_lease=card_lease,
    )
    return row


def cycle(store: Store) -> None:
    """The store's share of one approval cycle."""
    store.pending_count("issue_refund", "refund-agent", 1000)
    row = create(store, card_lease=True)  # as the intake creates it: the card's lease taken
    store.attach_card(row, "C0REFUNDS", "1700000000.000100")
    store.vote(row.id, LEAD, Outcome.APPROVED, resume, refuse=anyone)
    store.claim_execution(row.id, "agent")
    store.record_outcome(row.id, True, None, "agent")
    store.card_facts(row.id)


def clone_due(engine: Engine, template: str, count: int) -> None:
    """`count` copies of request `template`, pending and past their deadline."""
    with engine.connect() as connection:
        columns = [c.name for c in ApprovalRequest.__table__.columns]
        changed = {
            "id": "'B' || lpad(g::text, 25, '0')",
            "idempotency_key": "t.idempotency_key || ':' || g",
            "expires_at": "now() - interval '1 second'",
        }
        values = ", ".join(changed.get(column, f"t.{column}") for column in columns)
        connection.execute(
            text(
                f"INSERT INTO approval_requests ({', '.join(columns)}) SELECT {values}"
                " FROM approval_requests t, generate_series(1, :n) g WHERE t.id = :id"
            ),
            {"n": count, "id": template},
        )
        connection.execute(text("ANALYZE"))
        connection.commit()


def expire_all(store: Store) -> int:
    """Expire everything due, `BATCH` at a time, as the sweep does (`Store.expire_due` while a whole
    batch came back, then its read of what escalates, none here); how many were expired."""
    expired = 0
    while (batch := len(store.expire_due(BATCH, resume))) == BATCH:
        expired += batch
    assert not store.due_for_timeout(BATCH)
    return expired + batch


@contextmanager
def measured(into: dict[str, float], profile: bool) -> Iterator[None]:
    profiler = cProfile.Profile() if profile else None
    statements, cpu, wall = STATEMENTS[0], time.process_time(), time.monotonic()
    if profiler is not None:
        profiler.enable()
    yield
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    into.update(
        cpu=time.process_time() - cpu, wall=time.monotonic() - wall, statements=STATEMENTS[0] - statements
    )


def round_trips(store: Store, cycles: int) -> tuple[float, float]:
    """Round trips to PostgreSQL per cycle over `cycles` cycles: `(cursor executes, connection
    commands)`. The executes are the statements and the pool's pings (`SELECT 1`), the commands
    psycopg's `BEGIN` and `COMMIT`, which it sends apart (its private `_exec_command`, wrapped here)."""
    counts = [0, 0]
    execute, command = psycopg.Cursor.execute, BaseConnection._exec_command

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[0] += 1
        return execute(self, *args, **kwargs)

    def counted_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[1] += 1
        return command(self, *args, **kwargs)

    psycopg.Cursor.execute, BaseConnection._exec_command = counted_execute, counted_command  # type: ignore[method-assign]
    try:
        for _ in range(cycles):
            cycle(store)
    finally:
        psycopg.Cursor.execute, BaseConnection._exec_command = execute, command  # type: ignore[method-assign]
    return counts[0] / cycles, counts[1] / cycles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=500, help="measured approval cycles (default 500)")
    parser.add_argument("--warmup", type=int, default=50, help="cycles not measured, first (default 50)")
    parser.add_argument("--expire", type=int, default=10_000, help="requests expired (default 10000)")
    parser.add_argument("--profile", action="store_true", help="cProfile of the measured parts, to stderr")
    parser.add_argument(
        "--round-trips",
        type=int,
        default=0,
        metavar="CYCLES",
        help="after the measured cycles, count PostgreSQL round trips over this many more",
    )
    parser.add_argument(
        "--database-url", required=True, help="the PostgreSQL server to create a scratch database on"
    )
    args = parser.parse_args()
    with bench_database(args.database_url, Path(tempfile.mkdtemp(prefix="countersign-bench-"))) as url:
        engine = create_db_engine(url)
        store = Store(engine)
        event.listen(Engine, "before_cursor_execute", count_statement)
        for _ in range(args.warmup):
            cycle(store)
        cycles: dict[str, float] = {}
        with measured(cycles, args.profile):
            for _ in range(args.cycles):
                cycle(store)
        trips = round_trips(store, args.round_trips) if args.round_trips else None
        template = create(store)
        store.attach_card(template, "C0REFUNDS", "1700000000.000200")
        clone_due(engine, template.id, args.expire)
        expiry: dict[str, float] = {}
        with measured(expiry, args.profile):
            expired = expire_all(store)
        engine.dispose()
    print_table(
        [
            ("approval cycles measured", args.cycles),
            ("  CPU per cycle, ms", f"{cycles['cpu'] * 1000 / args.cycles:.2f}"),
            ("  wall per cycle, ms", f"{cycles['wall'] * 1000 / args.cycles:.2f}"),
            ("  SQL statements per cycle", f"{cycles['statements'] / args.cycles:.2f}"),
            *(
                []
                if trips is None
                else [
                    ("  round trips per cycle: executes (statements, pings)", f"{trips[0]:.2f}"),
                    ("  round trips per cycle: BEGIN, COMMIT", f"{trips[1]:.2f}"),
                ]
            ),
            (f"requests expired, {BATCH} a batch", expired),
            ("  CPU, s", f"{expiry['cpu']:.2f}"),
            ("  wall, s", f"{expiry['wall']:.2f}"),
            ("  SQL statements", int(expiry["statements"])),
        ]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
