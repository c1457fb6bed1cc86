"""What the audit chain's sealer costs the writers (issue 18): decisions' commit latency on
PostgreSQL with and without the sealer running, and what the `shown` field adds per event.

    flock /tmp/countersign-bench.lock .venv/bin/python bench/audit_writers.py \
        --database-url postgresql://postgres@127.0.0.1:5432/test --writers 4 --decisions 400

Writers are `--writers` processes, each deciding `--decisions` pending requests of its own one after
the other with `Store.vote` (the decision transaction a click writes: the row locked, the
conditional UPDATE, and the `vote`, `approved` and `resume_published` audit events with the outbox
row), timing each call from start to commit. Phases, on one scratch database:

- **no sealer**: nothing seals while the writers run (their events are sealed afterwards, timed:
  the sealer's time per event);
- **sealer every 1 s**: a process seals as the router's sweep does, once a second;
- **sealer back to back**: a process seals again as soon as it has sealed (the worst case: the table
  lock `LOCK TABLE audit_events IN SHARE ROW EXCLUSIVE MODE` requested as often as it can be);
- **no sealer, with `shown`**: as the first, each vote carrying the `shown` a click carries
  (`{"text", "blocks_sha256"}` of a refund card, about 170 bytes more in two of the three events);
  then sealed, timed.

Prints one table (p50 / p99 / max in ms, the decisions a second of all writers together, and the
sealer's µs per event); asserts nothing. Timings on a shared machine are noisy: run it more than
once.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ulid import ULID

from bench.common import bench_database, percentile, print_table
from countersign.router.cards import request_card, shown
from countersign.store import ApprovalRequest, Outcome, ResumeEvent, Rules, Store, create_db_engine
from countersign.store.chain import AuditChain

LEAD = {"slack_user_id": "U0LEAD", "name": "lee"}


def _resume(row: ApprovalRequest) -> ResumeEvent:
    return ResumeEvent(f"resume-{row.id}", {"request_id": row.id, "status": str(row.status)})


def _anyone(row: ApprovalRequest) -> None:
    return None


def _requests(store: Store, count: int) -> list[str]:
    """`count` new pending requests, as intake stores a refund."""
    ids = []
    for _ in range(count):
        request_id = str(ULID())
        store.create(
            {
                "id": request_id,
                "idempotency_key": request_id,
                "action": "issue_refund",
                "payload": {"amount": "120.00", "currency": "USD"},
                "payload_sha256": "a" * 64,
                "summary": "Refund ACME",
                "reason": "duplicate charge",
                "context": None,
                "requester": "refund-agent",
                "on_behalf_of": None,
                "run_id": "r",
                "step": "s",
                "confidence": None,
                "resume_queue": "q",
                "resume_func": "m.f",
                "channel": "C0FINANCE",
                "approvers": ["U0LEAD"],
                "policy_version": 1,
                "policy_sha256": "b" * 64,
                "rules": Rules(grant_ttl_seconds=600),
            }
        )
        ids.append(request_id)
    return ids


def _writer(url: str, ids: list[str], shown: dict[str, Any] | None, ready: Any, start: Any, out: Any) -> None:
    """Say `ready`, then vote on each of `ids` once `start` is set; put the latencies (seconds) on `out`."""
    store = Store(create_db_engine(url))
    store.get(ids[0])  # connect before the clock starts
    ready.put(True)
    start.wait()
    latencies = []
    for request_id in ids:
        began = time.perf_counter()
        store.vote(request_id, LEAD, Outcome.APPROVED, _resume, refuse=_anyone, where="card", shown=shown)  # type: ignore[arg-type]
        latencies.append(time.perf_counter() - began)
    out.put(latencies)


def _sealer(url: str, pause: float, ready: Any, stop: Any) -> None:
    """Say `ready`, then seal until `stop` is set, pausing `pause` seconds between turns."""
    chain = AuditChain(create_db_engine(url))
    chain.seal()  # connected, and what the writers' requests added sealed
    ready.put(True)
    while not stop.is_set():
        chain.seal()
        stop.wait(pause)


def _seal_all(url: str) -> tuple[int, float]:
    """Seal everything not sealed yet: `(events, seconds)`."""
    chain = AuditChain(create_db_engine(url))
    sealed, began = 0, time.perf_counter()
    while n := chain.seal():
        sealed += n
    return sealed, time.perf_counter() - began


def phase(
    url: str, store: Store, writers: int, decisions: int, sealer: float | None, shown: dict[str, Any] | None
) -> tuple[list[float], float]:
    """Run the writers (and a sealer pausing `sealer` seconds between turns, when given): all the
    latencies, and the decisions a second of all writers together."""
    context = multiprocessing.get_context("spawn")
    start, stop, out, ready = context.Event(), context.Event(), context.Queue(), context.Queue()
    batches = [_requests(store, decisions) for _ in range(writers)]
    procs = [context.Process(target=_writer, args=(url, ids, shown, ready, start, out)) for ids in batches]
    if sealer is not None:
        procs.append(context.Process(target=_sealer, args=(url, sealer, ready, stop)))
    for proc in procs:
        proc.start()
    for _ in procs:  # every process connected and waiting
        ready.get(timeout=120)
    began = time.perf_counter()
    start.set()
    latencies = [x for _ in range(writers) for x in out.get()]
    elapsed = time.perf_counter() - began
    stop.set()
    for proc in procs:
        proc.join()
    return latencies, writers * decisions / elapsed


def _ms(values: list[float]) -> str:
    p50, p99 = percentile(values, 50) * 1000, percentile(values, 99) * 1000
    return f"p50 {p50:.1f} ms · p99 {p99:.1f} ms · max {max(values) * 1000:.1f} ms"


def measure(url: str, writers: int, decisions: int) -> list[tuple[str, object]]:
    store = Store(create_db_engine(url))
    _seal_all(url)
    card = request_card(store.get(_requests(store, 1)[0]))  # type: ignore[arg-type]
    carried = shown(card.text, card.blocks)
    rows: list[tuple[str, object]] = []
    runs: list[tuple[str, float | None, dict[str, Any] | None, bool]] = [
        ("no sealer", None, None, True),
        ("sealer every 1 s", 1.0, None, False),
        ("sealer back to back", 0.0, None, False),
        ("no sealer, with shown", None, carried, True),
    ]
    for name, sealer, detail, timed_seal in runs:
        latencies, rate = phase(url, store, writers, decisions, sealer, detail)
        rows.append((f"{name}: commit latency", _ms(latencies)))
        rows.append((f"{name}: decisions a second", f"{rate:.0f}"))
        sealed, seconds = _seal_all(url)
        if timed_seal:
            rows.append(
                (f"{name}: seal afterwards", f"{seconds / sealed * 1e6:.1f} µs/event ({sealed:,} events)")
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True, help="a PostgreSQL server URL")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--decisions", type=int, default=400, help="per writer and phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, bench_database(args.database_url, Path(tmp)) as url:
        print_table(measure(url, args.writers, args.decisions))


if __name__ == "__main__":
    main()
