"""The cost of a pause: what 100,000 pending approvals cost in PostgreSQL and in the processes.

    python bench/pause_cost.py --database-url postgresql://postgres@127.0.0.1:5432/test

On a scratch PostgreSQL database, with a private redis-server and the Slack sandbox, it starts real
`countersign web` (gunicorn, 2 workers) and `countersign worker` (+ its sweep process) and:

1. sends one request through the real path (client -> intake job -> card posted), and approves a
   second one by a signed click, so that both processes have done their work once (warm-up); then
   reads their resident memory (VmRSS, summed over each process tree);
2. bulk-inserts `--pending` copies of the first request as intake stored it (one `INSERT ... SELECT`
   over `generate_series`, not one intake job each): new id, idempotency key, run id, summary, card
   ts and times (one every 0.5 s, or closer for more than 144,000, so that none is older than 20 h
   and none is due before step 6), 2 approvers out of 1,000 reviewers (+ `U0HEAVY` on every 10th),
   and copies of its audit rows (`requested`, `card_posted`); then `ANALYZE`;
3. measures bytes per pending request: `pg_total_relation_size` (heap + TOAST + indexes) of
   `approval_requests`, `audit_events`, `votes` and `outbox`, minus `sum(pg_column_size(payload))`,
   over the number of requests (all pending but the warm-up one);
4. times one idle sweep tick (`timeouts.sweep`, nothing due) over the pending rows;
5. has reviewers approve `--clicks` of them with signed clicks to `countersign web`;
6. `--rounds` times: makes `--due` others of them due (`expires_at` in the past; their cards are
   put in the sandbox first) and times the worker's own sweep process until all are expired, and
   until every resume event is on its RQ queue; the cards are rewritten after that at Slack's pace
   for chat.update (Tier 3), so it reports how many were rewritten by then and the rewrites' pace
   per minute over the round (at least 30 s); then reads the processes' resident memory (`--profile
   FILE` records the first round's sweep with py-spy, wall clock: `--idle` samples included);
7. times `Store.queue_for(reviewer, 50)` (p50 over `--repeats`) for a typical reviewer and for
   `U0HEAVY`, with the partial GIN index of migration 0005 and after dropping it;
8. reads the processes' resident memory once more (flat = no per-request state in a process).

`--warm-up-rounds N` runs N unmeasured expiry rounds first (after step 5) and reads the memory
again after them: what the measured rounds add to a sweep that has already expired a backlog of
that size. `--tracemalloc` runs the worker's processes with `PYTHONTRACEMALLOC=1` and a
`sitecustomize` (written to the run's temporary directory) that dumps a tracemalloc snapshot on
SIGUSR1; the bench takes one from the sweep process at each memory reading, and prints what Python
holds there and which lines' allocations grew most over the first round and over the rounds after
it (the timings of such a run are not comparable: tracing slows the sweep).

Prints one table; asserts nothing. PostgreSQL only (the sizes are PostgreSQL's).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Worker
from sqlalchemy import Engine, bindparam, func, select, text, update
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    NO_INTAKE_LIMITS,
    PYTHON_M,
    Child,
    bench_database,
    countersign_env,
    exit_on_sigterm,
    percentile,
    print_table,
    process_tree,
    py_spy,
    rss_kib,
    start_redis,
    wait_until,
)
from countersign import ApprovalClient
from countersign.config import load_settings
from countersign.ports import free_port
from countersign.router import cards, timeouts
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox, serve
from countersign.store import ApprovalRequest, OutboxEvent, Store, create_db_engine

REVIEWERS = 1000
PACE_WINDOW_SECONDS = 30  # an expiry round lasts at least this long, to read the card rewrites' pace
TYPICAL, HEAVY = "U0R0042", "U0HEAVY"
POLICY = (
    "version: 1\ndefaults: {channel: C0BENCH, approvers: {users: [U0LEAD]}, timeout: 24h, on_timeout: deny, "
    f"{NO_INTAKE_LIMITS}}}\n"
    """\
actions:
  pay_vendor: {channel: C0AP, approvers: {users: [U0ALICE, U0BOB]}, timeout: 24h, on_timeout: deny}
"""
)
# Columns of the copies that differ from the template row `t`; `g` runs 1..n. Approvers: 2 of
# REVIEWERS (reviewer a is paired with 7a+1 mod REVIEWERS, so each one is on ~2n/REVIEWERS requests).
# One request every 0.5 s, or closer, so that the oldest is 20 h old at most: all stay inside the
# policy's 24 h timeout however many there are.
AGO = "now() - make_interval(secs => (CAST(:n AS int) - g) * LEAST(0.5, 72000.0 / CAST(:n AS int)))"
CLONED = {
    "id": "'B' || lpad(g::text, 25, '0')",
    "idempotency_key": "t.idempotency_key || ':' || g",
    "run_id": "'run-' || g",
    "summary": "t.summary || ' #' || g",
    "approvers": (
        "jsonb_build_array('U0R' || lpad((g % CAST(:reviewers AS int))::text, 4, '0'),"
        " 'U0R' || lpad(((7 * g + 1) % CAST(:reviewers AS int))::text, 4, '0'))"
        " || CASE WHEN g % 10 = 0 THEN jsonb_build_array(CAST(:heavy AS text)) ELSE '[]'::jsonb END"
    ),
    "card_ts": "(1700000000 + g)::text || '.000100'",
    "created_at": AGO,
    "level_started_at": AGO,
    "expires_at": f"{AGO} + (t.expires_at - t.level_started_at)",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100_000, help="pending requests (default 100000)")
    parser.add_argument(
        "--due", type=int, default=10_000, help="requests made due per expiry round (default 10000)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="expiry rounds of --due each (default 3)")
    parser.add_argument(
        "--clicks", type=int, default=20, help="requests approved by signed clicks (default 20)"
    )
    parser.add_argument("--repeats", type=int, default=200, help="listings timed per reviewer (default 200)")
    parser.add_argument(
        "--database-url", required=True, help="a PostgreSQL server to create a scratch database on"
    )
    parser.add_argument(
        "--profile", type=Path, help="write a py-spy profile (raw, collapsed) of the expiry sweep"
    )
    parser.add_argument(
        "--warm-up-rounds", type=int, default=0, help="unmeasured expiry rounds of --due first (default 0)"
    )
    parser.add_argument(
        "--tracemalloc", action="store_true", help="tracemalloc snapshots of the sweep process (slows it)"
    )
    args = parser.parse_args()
    exit_on_sigterm()

    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    redis_server, redis_url = start_redis(tmp)
    sandbox = Sandbox(signing_secret=secrets.token_hex(16))
    server = serve(sandbox)
    try:
        with bench_database(args.database_url, tmp) as database_url:
            port = free_port()
            env = {
                **countersign_env(tmp, POLICY, redis_url, database_url, server.url + "/api/"),
                "SLACK_SIGNING_SECRET": sandbox.signing_secret,
                "PORT": str(port),
            }
            sandbox.interactivity_url = f"http://127.0.0.1:{port}/slack/events"
            rows = _run(args, env, sandbox, port, tmp)
    finally:
        redis_server.kill()
        server.shutdown()
    print_table(rows)
    return 0


def _run(
    args: argparse.Namespace, env: dict[str, str], sandbox: Sandbox, port: int, tmp: Path
) -> list[tuple[str, object]]:
    web = Child("web", [*PYTHON_M, "countersign.cli", "web", "--host", "127.0.0.1"], env, tmp / "web.log")
    traced = _snapshot_hook(tmp) if args.tracemalloc else None
    worker_env = (
        env
        if traced is None
        else {**env, "PYTHONTRACEMALLOC": "1", "PYTHONPATH": f"{traced}:{env['PYTHONPATH']}"}
    )
    worker = Child("worker", [*PYTHON_M, "countersign.cli", "worker"], worker_env, tmp / "worker.log")
    engine = create_db_engine(env["DATABASE_URL"])
    store = Store(engine)
    redis = Redis.from_url(env["REDIS_URL"])
    try:
        web.start()
        worker.start()
        wait_until(lambda: _healthy(port), 60, "countersign web did not start")
        wait_until(lambda: len(Worker.all(connection=redis)) >= 1, 60, "countersign worker did not start")
        client = ApprovalClient(redis, store)
        template = _through_intake(client, store, "template")
        _click_all(sandbox, store, [_through_intake(client, store, "warm-up")])
        time.sleep(3)  # a few sweep ticks
        before = {**_rss("web", web), **_rss("worker", worker)}
        memory = [_traced(_sweep_pid(worker), traced)] if traced else []

        started = time.monotonic()
        _clone(engine, template, args.pending)
        insert_seconds = time.monotonic() - started
        sizes = _sizes(engine)
        idle_tick = _idle_tick(env)

        clicked = _pick(engine, 7, args.clicks)
        _seed_cards(engine, sandbox, clicked)
        _click_all(sandbox, store, clicked)

        rounds, snapshots = [], [before]
        for n in range(args.warm_up_rounds + args.rounds):  # does memory keep growing, round after round?
            due = _pick(engine, (5, 3, 1, 9, 7)[n % 5], args.due)
            _seed_cards(engine, sandbox, due)
            first = n == args.warm_up_rounds
            expiry = _expire(engine, sandbox, due, _sweep_pid(worker), args.profile if first else None)
            if n >= args.warm_up_rounds:
                rounds.append(expiry)
            if n + 1 >= args.warm_up_rounds:
                snapshots.append({**_rss("web", web), **_rss("worker", worker)})
                memory += [_traced(_sweep_pid(worker), traced)] if traced else []

        listing = _listing(engine, store, args.repeats)
        snapshots.append({**_rss("web", web), **_rss("worker", worker)})
    finally:
        web.kill()
        worker.kill()
        engine.dispose()
    pending = sizes.pop("pending requests")
    return [
        ("pending requests", pending),
        ("bulk insert (requests + audit rows), s", f"{insert_seconds:.1f}"),
        *sizes.items(),
        ("idle sweep tick over the pending rows, ms (p50 of 10)", f"{idle_tick * 1000:.1f}"),
        ("approved by signed clicks to countersign web", args.clicks),
        *_expiry_rows(rounds),
        *listing,
        *_rss_rows(*snapshots),
        *_traced_rows(memory),
    ]


def _expiry_rows(rounds: list[dict[str, float]]) -> list[tuple[str, object]]:
    """The expiry rounds' figures, one row per measure, the rounds' values side by side."""

    def each(key: str, form: str = "{:.1f}") -> str:
        return " / ".join(form.format(one[key]) for one in rounds)

    due = int(rounds[0]["due"])
    return [
        (f"expiry sweep, {len(rounds)} rounds: {due} due -> all expired, s", each("expired")),
        ("  ... and all their resume events published, s", each("published")),
        ("  expiries per second (to published)", each("rate", "{:.0f}")),
        ("  cards rewritten by then (chat.update)", each("rewritten", "{:.0f}")),
        ("  card rewrites per minute, over the round", each("pace", "{:.0f}")),
    ]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _through_intake(client: ApprovalClient, store: Store, step: str) -> str:
    """A request sent the real way (client -> intake job -> card posted); returns its id."""
    request_id = client.request(
        action="pay_vendor",
        payload={"vendor": "ACME Corp", "amount": "1250.00", "currency": "USD", "invoice": "INV-2026-0042"},
        summary="Pay ACME Corp invoice INV-2026-0042",
        reason="due in 3 days; matches PO-77",
        context={"po": "PO-77", "paid_before": 12, "bank_account": "****4411"},
        requester="ap-agent",
        run_id="bench",
        step=step,
        resume={"queue": "ap-agent", "func": "bench.noop.noop"},
    )
    wait_until(lambda: (row := store.get(request_id)) is not None and row.card_ts is not None, 60)
    return request_id


def _clone(engine: Engine, template: str, n: int) -> None:
    """`n` copies of the template request and of its audit rows, then ANALYZE."""
    columns = [c.name for c in ApprovalRequest.__table__.columns]
    values = ", ".join(CLONED.get(c, f"t.{c}") for c in columns)
    with engine.begin() as connection:
        connection.execute(
            text(
                f"INSERT INTO approval_requests ({', '.join(columns)}) SELECT {values}"
                " FROM approval_requests t, generate_series(1, CAST(:n AS int)) g WHERE t.id = :template"
            ),
            {"n": n, "template": template, "reviewers": REVIEWERS, "heavy": HEAVY},
        )
        connection.execute(
            text(
                "INSERT INTO audit_events (request_id, event, actor, detail, at)"
                " SELECT r.id, e.event, e.actor, CASE WHEN e.event = 'card_posted'"
                " THEN jsonb_build_object('ts', r.card_ts) ELSE e.detail END, r.created_at"
                " FROM approval_requests r, audit_events e"
                " WHERE r.id LIKE 'B%' AND e.request_id = :template ORDER BY r.id, e.id"
            ),
            {"template": template},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("ANALYZE"))


def _sizes(engine: Engine) -> dict[str, object]:
    """Bytes per pending request, from PostgreSQL's own relation sizes (see the module docstring)."""
    query = """
        SELECT (SELECT count(*) FROM approval_requests WHERE status = 'pending') AS pending,
               (SELECT count(*) FROM approval_requests) AS requests,
               pg_table_size('approval_requests') AS heap,
               pg_indexes_size('approval_requests') AS indexes,
               (SELECT count(*) FROM pg_indexes WHERE tablename = 'approval_requests') AS index_count,
               pg_relation_size('ix_approval_requests_pending_approvers') AS gin,
               pg_total_relation_size('audit_events') AS audit,
               (SELECT count(*) FROM audit_events) AS audit_rows,
               pg_total_relation_size('votes') + pg_total_relation_size('outbox') AS votes_outbox,
               (SELECT sum(pg_column_size(payload)) FROM approval_requests) AS payload
    """
    with engine.connect() as connection:
        s = connection.execute(text(query)).one()
    total = s.heap + s.indexes + s.audit + s.votes_outbox - s.payload
    return {
        "pending requests": s.pending,
        "bytes per pending request (all below, minus payload)": round(total / s.requests),
        "  approval_requests heap + TOAST, per request": round(s.heap / s.requests),
        f"  approval_requests {s.index_count} indexes, per request": round(s.indexes / s.requests),
        "    of which the pending-approvers GIN index": round(s.gin / s.requests),
        f"  audit_events ({s.audit_rows / s.requests:.1f} rows/request) + indexes": round(
            s.audit / s.requests
        ),
        "  votes + outbox (a pending request has none)": round(s.votes_outbox / s.requests),
        "  payload (subtracted), per request": round(s.payload / s.requests),
    }


def _idle_tick(env: dict[str, str]) -> float:
    """p50 seconds of `timeouts.sweep` when nothing is due (what every pending row costs each second)."""
    runtime = Runtime(
        load_settings(**{k: v for k, v in env.items() if k.isupper() and not k.startswith("PY")})
    )
    return percentile([_seconds(lambda: timeouts.sweep(runtime)) for _ in range(10)], 50)


def _seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _pick(engine: Engine, remainder: int, count: int) -> list[str]:
    """Ids of `count` bulk-inserted pending requests whose number is `remainder` mod 10."""
    with engine.connect() as connection:
        return list(
            connection.scalars(
                text(
                    "SELECT id FROM approval_requests WHERE id LIKE 'B%' AND substr(id, 2)::int % 10 = :r"
                    " AND status = 'pending' ORDER BY id LIMIT :count"
                ),
                {"r": remainder, "count": count},
            )
        )


def _seed_cards(engine: Engine, sandbox: Sandbox, ids: list[str]) -> None:
    """Put each request's card into the sandbox (rendered as intake would) and store its ts."""
    stamps = []
    for chunk in range(0, len(ids), 1000):
        with Session(engine) as session:
            rows = session.scalars(
                select(ApprovalRequest).where(ApprovalRequest.id.in_(ids[chunk : chunk + 1000]))
            )
            for row in rows:
                card = cards.request_card(row)
                with sandbox.state.lock:
                    record = sandbox.state.add_message(row.channel, card.text, card.blocks)
                stamps.append({"rid": row.id, "ts": record["ts"]})
    with engine.begin() as connection:
        connection.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == bindparam("rid"))
            .values(card_ts=bindparam("ts")),
            stamps,
        )


def _click_all(sandbox: Sandbox, store: Store, ids: list[str]) -> None:
    """Approve each request by a signed click of its first approver; wait until all are decided."""
    for request_id in ids:
        row = store.get(request_id)
        assert row is not None and row.card_ts is not None
        sandbox.click(row.channel, row.card_ts, cards.APPROVE_ACTION, row.approvers[0])
    wait_until(lambda: all(store.outbox_event(i) is not None for i in ids), 60, "clicks were not decided")


def _sweep_pid(worker: Child) -> int:
    assert worker.process is not None
    for pid in process_tree(worker.process.pid)[1:]:
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    raise LookupError("the worker's sweep process is not running")


def _expire(
    engine: Engine, sandbox: Sandbox, ids: list[str], sweep_pid: int, profile: Path | None
) -> dict[str, float]:
    """Make `ids` due and time the worker's sweep process until they are expired and until their
    resume events are on their RQ queues (the target); the cards are rewritten at Slack's pace
    (Tier 3) after that, so only how many were rewritten by then, and at what pace, are reported."""

    def count(*where: Any) -> int:
        with engine.connect() as connection:
            return connection.execute(select(func.count()).where(*where)).scalar_one()

    expired_status = (ApprovalRequest.status == "expired",)
    published = (OutboxEvent.published_at.is_not(None),)
    expired_before, published_before = count(*expired_status), count(*published)
    updates = len(sandbox.calls("chat.update"))
    spy = py_spy(sweep_pid, profile) if profile else None
    with engine.begin() as connection:
        connection.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id.in_(ids))
            .values(expires_at=func.now() - text("interval '1 second'"))
        )
    started = time.monotonic()
    wait_until(lambda: count(*expired_status) - expired_before >= len(ids), 3600, "expiry did not finish")
    expired = time.monotonic() - started
    wait_until(
        lambda: count(*published) - published_before >= len(ids), 600, "resume events were not published"
    )
    done = time.monotonic() - started
    rewritten = len(sandbox.calls("chat.update")) - updates
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    time.sleep(max(0.0, PACE_WINDOW_SECONDS - done))  # the rewrites' pace, over a window long enough
    window = time.monotonic() - started
    paced = len(sandbox.calls("chat.update")) - updates
    return {
        "due": len(ids),
        "expired": expired,
        "published": done,
        "rate": len(ids) / done,
        "rewritten": rewritten,
        "pace": paced / window * 60,
    }


def _listing(engine: Engine, store: Store, repeats: int) -> list[tuple[str, object]]:
    """p50 ms of `queue_for(user, 50)`, typical and heavy reviewer, with the GIN index and without."""
    rows: list[tuple[str, object]] = []
    for label in ("with the GIN index", "without it (dropped)"):
        if label.startswith("without"):
            with engine.begin() as connection:
                connection.execute(text("DROP INDEX ix_approval_requests_pending_approvers"))
        for user in (TYPICAL, HEAVY):
            found = store.queue_for(user, 50)
            times = [_seconds(lambda user=user: store.queue_for(user, 50)) for _ in range(repeats)]
            rows.append(
                (
                    f"list {user}'s pending ({len(found)} rows), {label}, ms p50",
                    f"{percentile(times, 50) * 1000:.2f}",
                )
            )
    with engine.connect() as connection:
        mine = {
            user: connection.execute(
                text("SELECT count(*) FROM approval_requests WHERE status = 'pending' AND approvers @> :u"),
                {"u": f'["{user}"]'},
            ).scalar_one()
            for user in (TYPICAL, HEAVY)
        }
    rows.append(("  pending requests of each (typical, heavy)", f"{mine[TYPICAL]}, {mine[HEAVY]}"))
    return rows


def _rss(role: str, child: Child) -> dict[str, int]:
    """KiB resident per process of `child`'s tree, keyed `<role> <kind>` (summed per kind)."""
    assert child.process is not None
    found: dict[str, int] = {}
    for pid in process_tree(child.process.pid):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if pid == child.process.pid:
            kind = "master" if role == "web" else "main"
        elif b"resource_tracker" in cmdline:
            kind = "resource tracker"
        elif b"spawn_main" in cmdline:
            kind = "sweep"
        else:
            kind = "workers"
        found[f"{role} {kind}"] = found.get(f"{role} {kind}", 0) + rss_kib(pid)
    return found


SNAPSHOT_HOOK = """\
# Written by bench/pause_cost.py --tracemalloc: on SIGUSR1, dump a tracemalloc snapshot to <pid>.snap.
import os, signal, tracemalloc


def _dump(*_):
    path = os.path.join({folder!r}, str(os.getpid()))
    tracemalloc.take_snapshot().dump(path + ".tmp")
    os.replace(path + ".tmp", path + ".snap")


if tracemalloc.is_tracing():
    signal.signal(signal.SIGUSR1, _dump)
"""


def _snapshot_hook(tmp: Path) -> Path:
    """A folder holding the `sitecustomize` of `--tracemalloc` (`SNAPSHOT_HOOK`), for PYTHONPATH."""
    folder = tmp / "tracemalloc"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SNAPSHOT_HOOK.format(folder=str(folder)))
    return folder


def _traced(pid: int, folder: Path) -> tracemalloc.Snapshot:
    """A tracemalloc snapshot of process `pid` (run with `_snapshot_hook`)."""
    path = folder / f"{pid}.snap"
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    wait_until(path.exists, 300, "the sweep process dumped no tracemalloc snapshot")
    return tracemalloc.Snapshot.load(str(path))


def _traced_rows(memory: list[tracemalloc.Snapshot], top: int = 8) -> list[tuple[str, object]]:
    """What Python holds in the sweep at each memory reading (tracemalloc), and the lines whose
    allocations still held grew most over the first round, and over the rounds after it."""
    if not memory:
        return []
    rows: list[tuple[str, object]] = [
        ("sweep, held by Python (tracemalloc), MiB", " -> ".join(
            f"{sum(s.size for s in snap.statistics('filename')) / 2**20:.1f}" for snap in memory
        ))
    ]  # fmt: skip
    for label, old, new in (
        ("first round", memory[0], memory[1]),
        ("rounds after it", memory[1], memory[-1]),
    ):
        for stat in new.compare_to(old, "lineno")[:top]:
            frame = stat.traceback[0]
            where = f"{'/'.join(Path(frame.filename).parts[-2:])}:{frame.lineno}"
            rows.append(
                (
                    f"  grew over the {label}: {where}",
                    f"{stat.size_diff / 1024:+.0f} KiB, {stat.count_diff:+d} blocks",
                )
            )
    return rows


def _rss_rows(*snapshots: dict[str, int]) -> list[tuple[str, object]]:
    """One row per process kind: MiB at each snapshot (before the bulk insert, after the warm-up
    rounds if any, after each expiry round, at the end), then the total."""
    rows: list[tuple[str, object]] = [
        (f"RSS {name}, MiB", " -> ".join(f"{snap.get(name, 0) / 1024:.1f}" for snap in snapshots))
        for name in snapshots[0]
    ]
    rows.append(
        ("RSS all processes, MiB", " -> ".join(f"{sum(snap.values()) / 1024:.1f}" for snap in snapshots))
    )
    return rows


if __name__ == "__main__":
    sys.exit(main())
