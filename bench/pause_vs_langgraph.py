"""The cost of an approval pause, side by side: countersign against LangGraph's `interrupt()` with
its PostgreSQL checkpointer, on the same PostgreSQL server, in one run.

    python bench/pause_vs_langgraph.py --database-url postgresql://postgres@127.0.0.1:5432/test

Both sides run the same approval of the same refund (payload, summary, reason, context) `--runs`
times after `--warmup` unmeasured runs. Both are set up and warmed up first and stay up together;
the measured runs then alternate in chunks of `--chunk` runs (countersign's, LangGraph's,
countersign's, ...), each chunk in two phases: pause its every run, then resume them. This machine's
speed drifts over tens of seconds (LangGraph's own cycle 12.5-23.1 ms in consecutive runs of the same
code), so one side's runs all first and the other's after measured mostly that drift in the ratio;
alternating chunks puts both sides in every stretch of it. Each chunk pair's ratio is printed as it
ends, and at the end their median and range beside the overall ratio (all chunks of a side added up),
which shows how much noise is left. A side's byte measures come from its states: before its first
run and after its last for what the completed runs leave, and per chunk (after its pauses less
before them, summed) for what a paused run holds, at most `--chunk` runs paused at once. Each
countersign chunk starts and stops two burst workers (about 40 Redis commands and 5-6 ms of CPU
each here), which the chunk's runs share: at the default `--chunk` 20 that is 3.6 Redis commands and
about 0.5 ms of CPU per cycle more than in one chunk of 200 (`--chunk` at least `--runs`: in effect
the former method, one side's runs all before the other's). The Redis bytes move with the chunk
too: each dead burst worker's hash stays 60 s (RQ's `register_death`), some 50-100 bytes per
completed run more at 20; and a chunk's paused state still holds the intake lanes and pace keys its
20 pauses registered (its resume cleans them), 2-2.5 times the bytes per paused run of one chunk of
200 (BENCHMARKS.md, "The CPU ratio measured in interleaved chunks").

- countersign, in this process: `ApprovalClient.request` → the intake job (the router's worker class
  `RouterWorker`, burst, JSON serializer) posts the card → [paused] → the Approve click's domain call
  (`review.approve`: authorise, vote, decide, audit, outbox, publish the resume job,
  rewrite the card) → the resume job (the agent's worker class `AgentWorker`, burst:
  `approved_action` verifies the grant, claims the execution, runs the refund, records the outcome)
  → the card refreshes it asks for (the router's sweep step `refreshes.refresh_requested`). Slack is
  the sandbox in a separate process, so its CPU is not counted (shown for information); Redis is a
  private redis-server. Not included: Bolt's HTTP handling and signature check of the click.
- LangGraph: a graph `ask_approval` (calls `interrupt(request)`) → `execute_refund`, compiled with
  `PostgresSaver` (default durability), on a scratch database: `invoke` with a new thread id until
  it pauses, then `invoke(Command(resume=decision))` to the end.

Per run it reports CPU (this Python process, `time.process_time`, all threads; the PostgreSQL backends
serving the side's scratch database and the redis-server, from /proc), the SQL statements sent and Redis
commands processed, wall time, and what stays stored: growth of the side's tables
(`pg_total_relation_size`: heap, TOAST and indexes; and the live rows' own bytes), rows, and Redis memory
(`used_memory` less the client connections' buffers). countersign's requests use one action class (one
channel) each by default, so its pace of one card a second per channel never delays a card; every
cycle then also registers, fills and cleans a new intake lane (RQ's rate limit of that class), which
real use pays once per class in use and maintenance interval. `--classes N` rotates the runs over a
fixed pool of N classes instead (run n: class n mod N, each its own channel), as a policy's fixed
action classes are; the runs' cards that waited for their channel's pace are counted, and any makes
the benchmark fail (N too small for this machine's speed: a channel's next card comes N intake jobs
later, which must take more than 1.1 s). `--profile countersign|langgraph` prints a pyinstrument
profile of that side's measured chunks; `--redis-profile` prints countersign's Redis commands per
run grouped by command and key shape (Redis MONITOR of the measured runs, during which LangGraph's
chunks send none), `--sql-profile` its SQL statements per run by shape, `--redis-keys` the Redis keys
the measured runs left (added or grown) per completed run, by key shape, with their bytes (`MEMORY
USAGE`) and TTLs. Prints a line per chunk pair, one table and the ratios' line; asserts nothing.
"""

from __future__ import annotations

import argparse
import operator
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, TypedDict

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from psycopg.rows import dict_row
from redis import Redis
from rq import SimpleWorker
from rq.serializers import JSONSerializer
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    NO_INTAKE_LIMITS,
    PYTHON_M,
    Child,
    bench_database,
    countersign_env,
    exit_on_sigterm,
    print_table,
    process_cpu,
    start_redis,
    wait_until,
)
from countersign import ApprovalClient, approved_action, connections
from countersign.agent.worker import AgentWorker
from countersign.bot import payload
from countersign.ports import free_port
from countersign.router import refreshes, review
from countersign.router import runtime as runtime_module
from countersign.router.cards import APPROVE_ACTION
from countersign.router.jobs import INTAKE_QUEUE, json_queue
from countersign.router.runtime import Runtime
from countersign.router.worker import RouterWorker

AGENT_QUEUE = "refund-agent"
RESUME_FUNC = "bench.pause_vs_langgraph.execute_refund"  # imported by path, as an agent worker would
APPROVER = {"id": "U0LEAD", "username": "lee.lead", "name": "lee.lead"}
COUNTERSIGN_TABLES = ("approval_requests", "audit_events", "votes", "outbox")
LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
PAYLOAD = {"amount": "120.00", "currency": "USD", "customer": "cus_8c1f42", "charge": "ch_3Pq9Zx2eZvKYlo2C"}
REQUEST = {
    "payload": PAYLOAD,
    "summary": "Refund ACME Corp 120.00 USD (duplicate charge)",
    "reason": "The customer was charged twice for invoice INV-2041.",
    "context": {"invoice": "INV-2041", "charges": ["ch_3Pq9Zx2eZvKYlo2C", "ch_3Pq9Zx2eZvKYlo2D"]},
    "requester": "refund-agent",
}


@approved_action
def execute_refund(payload: dict[str, Any]) -> str:
    """The agent's resume job on the countersign side (what LangGraph's `execute_refund` node does)."""
    return f"refunded {payload['amount']} {payload['currency']}"


# ---- measuring -------------------------------------------------------------------------------


class Database:
    """An observer connection to one scratch database: backend CPU, table sizes, rows."""

    def __init__(self, url: str) -> None:
        self.conninfo = libpq_url(url)
        self.name = make_url(url).database
        self.connection = psycopg.connect(self.conninfo, autocommit=True)

    def backend_cpu(self) -> dict[int, float]:
        """`{pid: CPU seconds}` of the client backends serving this database, this connection excluded."""
        rows = self.connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'"
            " AND pid <> pg_backend_pid()",
            (self.name,),
        ).fetchall()
        return {pid: process_cpu(pid) for (pid,) in rows}

    def footprint(self, tables: tuple[str, ...]) -> tuple[int, int, int]:
        """(bytes on disk incl. TOAST and indexes, bytes of the live rows, live rows) over `tables`."""
        disk = live = rows = 0
        for table in tables:
            size, row_bytes, count = self.connection.execute(
                f"SELECT pg_total_relation_size('{table}'), coalesce(sum(pg_column_size(t.*)), 0),"
                f" count(*) FROM {table} t"
            ).fetchone()  # type: ignore[misc]
            disk, live, rows = disk + size, live + row_bytes, rows + count
        return disk, live, rows

    def close(self) -> None:
        self.connection.close()


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL as a plain libpq connection string."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass
class Cost:
    """What one phase cost: seconds of CPU (this process, PostgreSQL backends, redis-server, the
    Slack sandbox) and of wall time."""

    python: float = 0.0
    postgres: float = 0.0
    redis: float = 0.0
    sandbox: float = 0.0
    wall: float = 0.0
    statements: float = 0  # SQL statements sent (`SQL_STATEMENTS`)
    commands: float = 0  # Redis commands processed by the redis-server

    def __add__(self, other: Cost) -> Cost:
        return Cost(*(a + b for a, b in zip(vars(self).values(), vars(other).values(), strict=True)))


SQL_STATEMENTS = [0]  # SQL statements this process sent, counted by each side's driver hook
SQL_SHAPES: Counter[str] | None = None  # with --sql-profile: countersign's statements by shape
METERED = [False]  # inside a `metered` block: the statements the table counts


def count_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
    """SQLAlchemy `before_cursor_execute` listener on every `Engine` of this process: countersign's
    router runtime and the agent worker's own connections (`execute_approved` runs here too)."""
    SQL_STATEMENTS[0] += 1
    if SQL_SHAPES is not None and METERED[0]:
        SQL_SHAPES[statement_shape(statement)] += 1


def statement_shape(statement: str) -> str:
    """What a statement does, for `--sql-profile`: its first words and tables, parameters dropped."""
    words = " ".join(statement.split())
    tables = re.findall(r"(?:INSERT INTO|UPDATE|FROM|DELETE FROM) (\w+)", words)
    head = re.sub(r"\s*\(.*", "", words)[:40]
    return f"{head} [{', '.join(dict.fromkeys(tables))}]"


@contextmanager
def sql_profiled(args: argparse.Namespace) -> Iterator[None]:
    """With `--sql-profile`, print countersign's SQL statements of the enclosed block's measured
    phases per run to stderr, by shape (`statement_shape`), most frequent first."""
    global SQL_SHAPES
    if not args.sql_profile:
        yield
        return
    SQL_SHAPES = Counter()
    try:
        yield
    finally:
        shapes, SQL_SHAPES = SQL_SHAPES, None
        print(f"SQL statements per run ({sum(shapes.values()) / args.runs:.2f}):", file=sys.stderr)
        for shape, count in shapes.most_common():
            print(f"{count / args.runs:8.2f}  {shape}", file=sys.stderr)


class CountingCursor(psycopg.Cursor):  # type: ignore[type-arg]
    """A psycopg cursor counting the statements it sends (LangGraph's checkpointer connection)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        SQL_STATEMENTS[0] += 1
        return super().execute(query, params, **kwargs)

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        params_seq = list(params_seq)
        SQL_STATEMENTS[0] += len(params_seq)
        super().executemany(query, params_seq, **kwargs)


def redis_commands(redis: Redis | None) -> int:
    return int(redis.info("stats")["total_commands_processed"]) if redis is not None else 0


@contextmanager
def metered(database: Database, others: dict[str, int], redis: Redis | None = None) -> Iterator[Cost]:
    """Measure the enclosed block; `others` maps a `Cost` field (`redis`, `sandbox`) to a pid."""
    cost = Cost()
    backends, before = database.backend_cpu(), {name: process_cpu(pid) for name, pid in others.items()}
    statements, commands = SQL_STATEMENTS[0], redis_commands(redis)
    cpu, wall = time.process_time(), time.monotonic()
    METERED[0] = True
    try:
        yield cost
    finally:
        METERED[0] = False
    cost.python, cost.wall = time.process_time() - cpu, time.monotonic() - wall
    cost.statements = SQL_STATEMENTS[0] - statements
    cost.commands = max(0, redis_commands(redis) - commands - 1)  # not counting the INFO itself
    after = database.backend_cpu()
    gone = set(backends) - set(after)
    if gone:
        print(
            f"warning: {len(gone)} PostgreSQL backend(s) exited mid-phase; their CPU is missed",
            file=sys.stderr,
        )
    cost.postgres = sum(after.values()) - sum(backends.get(pid, 0.0) for pid in after)
    for name, pid in others.items():
        setattr(cost, name, process_cpu(pid) - before[name])


ChunkProfile = Callable[[], AbstractContextManager[None]]  # `with chunk():` profiles the block


@contextmanager
def profiled(enabled: bool) -> Iterator[ChunkProfile]:
    """When `enabled`, one pyinstrument profile of every block the enclosed code runs in
    `with chunk():` (the yielded `chunk`), printed to stderr at the end; else `chunk` does nothing."""
    if not enabled:
        yield nullcontext
        return
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005)  # its sessions add up over `start`/`stop` pairs

    @contextmanager
    def chunk() -> Iterator[None]:
        profiler.start()
        try:
            yield
        finally:
            profiler.stop()

    try:
        yield chunk
    finally:
        if profiler.last_session is not None:
            print(profiler.output_text(unicode=False, color=False, show_all=False), file=sys.stderr)


@contextmanager
def monitored(args: argparse.Namespace, redis_url: str) -> Iterator[None]:
    """With `--redis-profile`, print the Redis commands of the enclosed block per run to stderr, by
    command and key shape (ids as `*`), most frequent first (Redis MONITOR, on a thread)."""
    if not args.redis_profile:
        yield
        return
    commands: Counter[str] = Counter()
    ready, end = threading.Event(), f"countersign-bench-end-{os.getpid()}"

    def listen() -> None:
        with Redis.from_url(redis_url).monitor() as monitor:  # type: ignore[no-untyped-call]
            ready.set()
            for seen in monitor.listen():
                words = str(seen["command"]).split()
                if words[:2] == ["EXISTS", end]:
                    return
                key = re.sub(r"[0-9a-f]{32}|[0-9A-Z]{26}|[0-9]{6,}", "*", words[1]) if len(words) > 1 else ""
                commands[f"{words[0]} {key}" if words[0] not in ("MULTI", "EXEC") else words[0]] += 1

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield
    finally:
        Redis.from_url(redis_url).exists(end)
        thread.join(30)
        print(f"Redis commands per run ({sum(commands.values()) / args.runs:.1f}):", file=sys.stderr)
        for command, count in commands.most_common():
            print(f"{count / args.runs:8.2f}  {command}", file=sys.stderr)


Footprint = tuple[int, int, int]  # PostgreSQL: bytes on disk, bytes of the live rows, live rows
Run = Callable[[int], "Side"]  # a side's next `count` measured runs -> their `Side`


@dataclass
class Side:
    """One side's measured results over `runs` runs (one chunk of them, or chunks added with `+`):
    per-phase costs; the PostgreSQL footprint before the first run (`start`) and after the last
    (`end`), and what the pauses added (`paused`: per chunk, after its pauses less before them,
    summed over chunks); Redis's bytes (`redis_bytes`) likewise."""

    runs: int
    pause: Cost
    resume: Cost
    start: Footprint
    paused: Footprint
    end: Footprint
    redis_start: int = 0
    redis_paused: int = 0
    redis_end: int = 0
    completed: int = 0
    decide: Cost | None = None  # countersign only: the click's share of `resume`

    def __add__(self, later: Side) -> Side:
        """`self`'s runs, then `later`'s (measured after them): counts, costs and the pauses' growth
        summed; the states before from `self`, after from `later`."""
        return Side(
            runs=self.runs + later.runs,
            pause=self.pause + later.pause,
            resume=self.resume + later.resume,
            start=self.start,
            paused=(
                self.paused[0] + later.paused[0],
                self.paused[1] + later.paused[1],
                self.paused[2] + later.paused[2],
            ),
            end=later.end,
            redis_start=self.redis_start,
            redis_paused=self.redis_paused + later.redis_paused,
            redis_end=later.redis_end,
            completed=self.completed + later.completed,
            decide=None if self.decide is None or later.decide is None else self.decide + later.decide,
        )

    def cpu(self) -> float:
        """All CPU of the runs' cycles, in seconds: this process, PostgreSQL and Redis (not the sandbox)."""
        cycle = self.pause + self.resume
        return cycle.python + cycle.postgres + cycle.redis


def numbered(runs: Callable[[int, int], Side], first: int, chunk: ChunkProfile) -> Run:
    """A `Run` calling `runs(first, count)` inside `chunk()`, each call's runs numbered on from the
    previous call's (thread ids, action classes), the first call's from `first`."""
    following = [first]

    def run(count: int) -> Side:
        start, following[0] = following[0], following[0] + count
        with chunk():
            return runs(start, count)

    return run


# ---- countersign -----------------------------------------------------------------------------


def policy(channels: int) -> str:
    """One action class per channel (same approver and rules), so Slack's one-post-a-second pace per
    channel, which countersign honours, never delays a card in this benchmark."""
    actions = "\n".join(f"  issue_refund_{n}: {{channel: C0REFUND{n:04d}}}" for n in range(channels))
    defaults = f"{{channel: C0APPROVALS, approvers: {{users: [{APPROVER['id']}]}}, {NO_INTAKE_LIMITS}}}"
    return f"version: 1\ndefaults: {defaults}\nactions:\n{actions}\n"


def drain(redis: Redis, queue: str, worker_class: type[SimpleWorker]) -> None:
    """Run every job on `queue` in this process (`worker_class`, the one countersign runs that queue
    with; burst, JSON serializer). RQ installs
    its own SIGINT/SIGTERM handlers (a warm shutdown that only ends the burst); ours come back after,
    so Ctrl-C stops the benchmark instead of skipping jobs and printing wrong figures."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    worker = worker_class([json_queue(queue, redis)], connection=redis, serializer=JSONSerializer)
    try:
        worker.work(burst=True, logging_level="WARNING")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if worker._stop_requested:  # a signal arrived while RQ's handlers were in place
        raise KeyboardInterrupt


def click(request_id: str, channel: str) -> dict[str, Any]:
    """The part of a `block_actions` body the Approve listener reads."""
    return {
        "type": "block_actions",
        "user": APPROVER,
        "channel": {"id": channel},
        "actions": [{"action_id": APPROVE_ACTION, "value": request_id, "type": "button"}],
    }


def countersign_runs(
    runtime: Runtime, first: int, count: int, database: Database, pids: dict[str, int], classes: int = 0
) -> Side:
    """`count` approvals through countersign, numbered from `first`: run n of action class n mod
    `classes`, or (0) each its own. Raises `SystemExit` when a card waited for its channel's pace."""
    client = ApprovalClient(runtime.redis, runtime.store)
    start, redis_start = database.footprint(COUNTERSIGN_TABLES), redis_bytes(runtime.redis)
    with metered(database, pids, runtime.redis) as pause:
        ids = [
            client.request(
                {
                    **REQUEST,
                    "action": f"issue_refund_{n % classes if classes else n}",
                    "run_id": f"run-{n}",
                    "step": "refund",
                },
                resume={"queue": AGENT_QUEUE, "func": RESUME_FUNC},
            )
            for n in range(first, first + count)
        ]
        drain(runtime.redis, INTAKE_QUEUE, RouterWorker)
    paused, redis_paused = database.footprint(COUNTERSIGN_TABLES), redis_bytes(runtime.redis)
    rows = [row for request_id in ids if (row := runtime.store.get(request_id)) is not None]
    waited = sum(1 for row in rows if row.card_ts is None)
    if waited:
        raise SystemExit(
            f"{waited} of {count} cards waited for their channel's pace: run with more --classes (or 0)"
        )
    clicks = [click(row.id, row.channel) for row in rows]
    with metered(database, pids, runtime.redis) as decide:
        for body in clicks:
            approval = payload.click(body)
            review.approve(runtime, runtime.slack, approval.request_id, approval.user, approval.channel)
    with metered(database, pids, runtime.redis) as execute:
        drain(runtime.redis, AGENT_QUEUE, AgentWorker)
        refreshes.refresh_requested(runtime, limit=count)  # the card refreshes the resume jobs asked for
    completed = sum(
        1 for request_id in ids if (row := runtime.store.get(request_id)) and row.execution == "executed"
    )
    return Side(
        runs=count,
        pause=pause,
        resume=decide + execute,
        decide=decide,
        start=start,
        paused=grown(start, paused),
        end=database.footprint(COUNTERSIGN_TABLES),
        redis_start=redis_start,
        redis_paused=redis_paused - redis_start,
        redis_end=redis_bytes(runtime.redis),
        completed=completed,
    )


def grown(before: Footprint, after: Footprint) -> Footprint:
    """What a footprint grew by from `before` to `after`, part by part."""
    return (after[0] - before[0], after[1] - before[1], after[2] - before[2])


def redis_bytes(redis: Redis) -> int:
    """Redis's `used_memory` less its client connections' buffers (`MEMORY STATS` `clients.normal`):
    what the keys hold, not what the connections open at that instant happen to buffer (tens of KB
    that come and go with the last commands, not with the runs)."""
    return int(redis.info("memory")["used_memory"]) - int(redis.memory_stats().get("clients.normal", 0))


Keyspace = dict[str, tuple[int, int]]  # key -> (MEMORY USAGE bytes, TTL seconds; -1: none)
MEMORY_PARTS = ("used_memory", "used_memory_dataset", "used_memory_overhead", "used_memory_scripts")
"""The parts of `INFO memory` `--redis-keys` prints the growth of, beside the keys."""


def keyspace(redis: Redis) -> Keyspace:
    """Every key of `redis` with its `MEMORY USAGE` (bytes, samples 0: every element) and `TTL`."""
    keys = [key.decode() for key in redis.scan_iter(count=1000)]
    with redis.pipeline(transaction=False) as pipeline:
        for key in keys:
            pipeline.memory_usage(key, samples=0)
            pipeline.ttl(key)
        answers = pipeline.execute()
    return {key: (int(answers[2 * n] or 0), int(answers[2 * n + 1])) for n, key in enumerate(keys)}


def memory_parts(redis: Redis) -> dict[str, int]:
    """`MEMORY_PARTS` of `INFO memory`, and of `MEMORY STATS` the keyspace's hash tables and the client
    connections' buffers, in bytes; and the number of connected clients."""
    info, stats = redis.info("memory"), redis.memory_stats()
    db = stats.get("db.0", {})
    parts = {
        "of which the main hash table": int(db.get("overhead.hashtable.main", 0)),
        "of which the expires hash table": int(db.get("overhead.hashtable.expires", 0)),
        "of which client connections": int(stats.get("clients.normal", 0)),
        "connected clients (count)": int(redis.info("clients")["connected_clients"]),
    }
    return {**{part: int(info.get(part, 0)) for part in MEMORY_PARTS}, **parts}


def print_memory_growth(before: dict[str, int], after: dict[str, int], runs: int) -> None:
    """Print to stderr the growth of each part of Redis's memory per run (bytes), and of the clients
    connected over the measured runs (not per run)."""
    for part, value in after.items():
        grown = value - before.get(part, 0)
        print(f"{grown if 'count' in part else grown / runs:8.1f}  {part}", file=sys.stderr)


def key_shape(key: str) -> str:
    """A key with its ids and numbers as `*` (request and job ids, worker names, action classes)."""
    return re.sub(r"[0-9a-f]{32}|[0-9A-Z]{26}|[0-9]+", "*", key)


def print_keys_left(before: Keyspace, after: Keyspace, runs: int) -> None:
    """Print to stderr the keys added or grown from `before` to `after` per run, by key shape: keys
    added, bytes added (`MEMORY USAGE`; a grown key counts its growth), the TTLs seen (-1: none)."""
    shapes: dict[str, list[Any]] = {}
    for key, (size, ttl) in after.items():
        grown = size - before.get(key, (0, 0))[0]
        if key in before and grown <= 0:
            continue
        entry = shapes.setdefault(key_shape(key), [0, 0, set()])
        entry[0] += key not in before
        entry[1] += grown
        entry[2].add(ttl if ttl < 0 else round(ttl, -2) or ttl)
    total = sum(entry[1] for entry in shapes.values())
    print(f"Redis keys left per completed run ({total / runs:.0f} bytes, MEMORY USAGE):", file=sys.stderr)
    print(f"{'keys':>8}  {'bytes':>8}  {'TTL (s)':<18}  key shape", file=sys.stderr)
    for shape, (added, grown, ttls) in sorted(shapes.items(), key=lambda item: -item[1][1]):
        seen = ",".join(str(t) for t in sorted(ttls))
        print(f"{added / runs:8.2f}  {grown / runs:8.1f}  {seen:<18}  {shape}", file=sys.stderr)


@contextmanager
def countersign_side(args: argparse.Namespace, tmp: Path) -> Iterator[Run]:
    """countersign up on a scratch database, a private redis-server and the sandbox in a child process,
    warmed up (`args.warmup` runs): yields the `Run` of its measured runs, and stops it all after.
    `--profile countersign` profiles the `Run`'s calls; `--redis-profile`, `--sql-profile` and
    `--redis-keys` cover the whole block, in which only these calls send SQLAlchemy statements and
    Redis commands (the other side uses neither), and divide by `args.runs`."""
    redis_server, redis_url = start_redis(tmp)
    port = free_port()
    sandbox = Child(
        "sandbox",
        [*PYTHON_M, "countersign.sandbox", "--port", str(port), "--signing-secret", "bench"],
        dict(os.environ),
        tmp / "sandbox.log",
    )
    sandbox.start()
    try:
        wait_until(
            lambda: _answers(f"http://127.0.0.1:{port}/api/auth.test"), 20, "the sandbox did not start"
        )
        with bench_database(args.database_url, tmp) as database_url:
            env = countersign_env(
                tmp,
                policy(args.classes or args.warmup + args.runs),
                redis_url,
                database_url,
                f"http://127.0.0.1:{port}/api/",
            )
            os.environ.update(env)
            runtime_module.current.cache_clear()
            connections.current.cache_clear()
            runtime = runtime_module.current()  # the one the jobs run in this process use too
            event.listen(Engine, "before_cursor_execute", count_statement)
            database = Database(database_url)
            assert redis_server.process is not None and sandbox.process is not None
            pids = {"redis": redis_server.process.pid, "sandbox": sandbox.process.pid}
            try:
                countersign_runs(runtime, 0, args.warmup, database, pids, args.classes)
                before = keyspace(runtime.redis) if args.redis_keys else {}
                memory = memory_parts(runtime.redis)
                with (
                    profiled(args.profile == "countersign") as chunk,
                    monitored(args, redis_url),
                    sql_profiled(args),
                ):
                    yield numbered(
                        lambda first, count: countersign_runs(
                            runtime, first, count, database, pids, args.classes
                        ),
                        args.warmup,
                        chunk,
                    )
                if args.redis_keys:
                    print_keys_left(before, keyspace(runtime.redis), args.runs)
                    print_memory_growth(memory, memory_parts(runtime.redis), args.runs)
            finally:
                database.close()
                runtime.store.engine.dispose()
    finally:
        sandbox.kill()
        redis_server.kill()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, data=b"", timeout=1):
            return True
    except OSError:
        return False


# ---- LangGraph -------------------------------------------------------------------------------


class RefundState(TypedDict, total=False):
    request: dict[str, Any]
    decision: dict[str, Any]
    result: str


def ask_approval(state: RefundState) -> RefundState:
    """Pause for a human; on resume, `interrupt` returns the decision given to `Command(resume=...)`."""
    return {"decision": interrupt(state["request"])}


def execute_refund_node(state: RefundState) -> RefundState:
    """Run the refund if, and only if, it was approved."""
    if state["decision"]["outcome"] != "approved":
        return {"result": "not run"}
    payload = state["decision"]["payload"]
    return {"result": f"refunded {payload['amount']} {payload['currency']}"}


def refund_graph(checkpointer: PostgresSaver) -> Any:
    builder = StateGraph(RefundState)
    builder.add_node("ask_approval", ask_approval)
    builder.add_node("execute_refund", execute_refund_node)
    builder.add_edge(START, "ask_approval")
    builder.add_edge("ask_approval", "execute_refund")
    builder.add_edge("execute_refund", END)
    return builder.compile(checkpointer=checkpointer)


def langgraph_runs(graph: Any, first: int, count: int, database: Database) -> Side:
    """`count` approvals through the graph, thread ids numbered from `first`."""
    configs = [{"configurable": {"thread_id": f"run-{n}"}} for n in range(first, first + count)]
    decision = {
        "outcome": "approved",
        "payload": PAYLOAD,
        "decided_by": [{"slack_user_id": APPROVER["id"], "name": APPROVER["name"]}],
        "reason": None,
    }
    start = database.footprint(LANGGRAPH_TABLES)
    with metered(database, {}) as pause:
        for n, config in enumerate(configs, start=first):
            request = {**REQUEST, "action": "issue_refund", "run_id": f"run-{n}", "step": "refund"}
            graph.invoke({"request": request}, config)
    paused = database.footprint(LANGGRAPH_TABLES)
    with metered(database, {}) as resume:
        results = [graph.invoke(Command(resume=decision), config) for config in configs]
    completed = sum(1 for result in results if result.get("result", "").startswith("refunded"))
    return Side(
        runs=count,
        pause=pause,
        resume=resume,
        start=start,
        paused=grown(start, paused),
        end=database.footprint(LANGGRAPH_TABLES),
        completed=completed,
    )


def checkpointer_connection(conninfo: str) -> psycopg.Connection[Any]:
    """A connection made as `PostgresSaver.from_conn_string` makes it (autocommit, no prepared
    statements, dict rows), with a statement-counting cursor."""
    return psycopg.Connection.connect(
        conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row, cursor_factory=CountingCursor
    )


@contextmanager
def langgraph_side(args: argparse.Namespace, tmp: Path) -> Iterator[Run]:
    """The LangGraph graph on a scratch database of its own (created by `bench_database`, whose
    countersign tables stay empty and are not counted), warmed up (`args.warmup` runs): yields the
    `Run` of its measured runs (`--profile langgraph` profiles its calls), and drops it all after."""
    with bench_database(args.database_url, tmp / "langgraph") as database_url:
        database = Database(database_url)
        try:
            with checkpointer_connection(libpq_url(database_url)) as connection:
                checkpointer = PostgresSaver(connection)
                checkpointer.setup()
                graph = refund_graph(checkpointer)
                langgraph_runs(graph, 0, args.warmup, database)
                with profiled(args.profile == "langgraph") as chunk:
                    yield numbered(
                        lambda first, count: langgraph_runs(graph, first, count, database), args.warmup, chunk
                    )
        finally:
            database.close()


# ---- report ----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="measured runs each way (default 200)")
    parser.add_argument(
        "--chunk",
        type=int,
        default=20,
        help="measured runs of one side before the other side's turn (default 20)",
    )
    parser.add_argument("--warmup", type=int, default=20, help="runs not measured, first (default 20)")
    parser.add_argument(
        "--classes",
        type=int,
        default=0,
        help="rotate countersign's runs over this many action classes, each its own channel "
        "(default 0: a new class every run)",
    )
    parser.add_argument(
        "--profile",
        choices=["countersign", "langgraph"],
        help="print a pyinstrument profile of that side's measured runs to stderr (inflates its CPU figures)",
    )
    parser.add_argument(
        "--redis-profile",
        action="store_true",
        help="print countersign's Redis commands per run by command and key shape to stderr (MONITOR)",
    )
    parser.add_argument(
        "--redis-keys",
        action="store_true",
        help="print the Redis keys the measured runs left, per completed run by key shape, to stderr",
    )
    parser.add_argument(
        "--sql-profile",
        action="store_true",
        help="print countersign's SQL statements per run by statement shape to stderr",
    )
    parser.add_argument(
        "--database-url", required=True, help="the PostgreSQL server to create scratch databases on"
    )
    args = parser.parse_args()
    if args.runs < 1 or args.chunk < 1:
        parser.error("--runs and --chunk must be at least 1")
    exit_on_sigterm()
    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    (tmp / "langgraph").mkdir()
    with countersign_side(args, tmp) as countersign, langgraph_side(args, tmp) as langgraph:
        cs, lg, ratios = interleaved(countersign, langgraph, args.runs, args.chunk)
    report(cs, lg)
    print_ratios(cs.cpu() / lg.cpu(), ratios)
    return 0


def interleaved(countersign: Run, langgraph: Run, runs: int, chunk: int) -> tuple[Side, Side, list[float]]:
    """`runs` measured runs a side in alternating chunks of `chunk` runs (countersign's, LangGraph's,
    countersign's, …; the last pair shorter if `chunk` does not divide `runs`): each side's chunks
    added up, and each pair's ratio of all CPU per run (countersign / LangGraph), also printed."""
    chunks: list[tuple[Side, Side]] = []
    for start in range(0, runs, chunk):
        count = min(chunk, runs - start)
        cs, lg = countersign(count), langgraph(count)
        chunks.append((cs, lg))
        print(
            f"chunk pair {len(chunks)} ({count} runs a side): all CPU per run {cs.cpu() * 1000 / count:.2f}"
            f" / {lg.cpu() * 1000 / count:.2f} ms = {cs.cpu() / lg.cpu():.2f} x",
            flush=True,
        )
    return (
        reduce(operator.add, (cs for cs, _ in chunks)),
        reduce(operator.add, (lg for _, lg in chunks)),
        [cs.cpu() / lg.cpu() for cs, lg in chunks],
    )


def print_ratios(overall: float, ratios: list[float]) -> None:
    """Print the overall ratio of all CPU per cycle beside the chunk pairs' median and range, the
    spread the machine's drift and noise leave within one run."""
    print(
        f"all CPU per cycle, countersign / LangGraph: overall {overall:.2f} x;"
        f" chunk pairs ({len(ratios)}): median {statistics.median(ratios):.2f} x,"
        f" range {min(ratios):.2f}-{max(ratios):.2f} x (spread {max(ratios) - min(ratios):.2f})"
    )


def report(cs: Side, lg: Side) -> None:
    """Print the side-by-side table; ratio = countersign / LangGraph."""
    runs = cs.runs

    def ms(cost: Callable[[Side], float]) -> tuple[float, float]:
        return cost(cs) * 1000 / runs, cost(lg) * 1000 / runs

    def per_run(pick: Callable[[Side], float]) -> tuple[float, float]:
        return pick(cs) / runs, pick(lg) / runs

    rows: list[tuple[str, tuple[float, float] | tuple[str, str]]] = [
        ("runs measured (completed)", (f"{cs.runs} ({cs.completed})", f"{lg.runs} ({lg.completed})")),
        ("Python CPU per run, pause (ms)", ms(lambda s: s.pause.python)),
        ("Python CPU per run, resume (ms)", ms(lambda s: s.resume.python)),
        ("  of which the click (ms)", (f"{cs.decide.python * 1000 / runs:.2f}" if cs.decide else "-", "-")),
        ("Python CPU per run, cycle (ms)", ms(lambda s: s.pause.python + s.resume.python)),
        ("PostgreSQL CPU per run, cycle (ms)", ms(lambda s: s.pause.postgres + s.resume.postgres)),
        ("Redis CPU per run, cycle (ms)", ms(lambda s: s.pause.redis + s.resume.redis)),
        ("all CPU per run, cycle (ms)", ms(Side.cpu)),
        ("SQL statements per run, cycle", per_run(lambda s: s.pause.statements + s.resume.statements)),
        ("Redis commands per run, cycle", per_run(lambda s: s.pause.commands + s.resume.commands)),
        ("wall per run, cycle (ms)", ms(lambda s: s.pause.wall + s.resume.wall)),
        ("PG bytes per paused run, on disk", per_run(lambda s: s.paused[0])),
        ("PG bytes per paused run, live rows", per_run(lambda s: s.paused[1])),
        ("PG rows per paused run", per_run(lambda s: s.paused[2])),
        ("PG bytes per completed run, on disk", per_run(lambda s: s.end[0] - s.start[0])),
        ("PG bytes per completed run, live rows", per_run(lambda s: s.end[1] - s.start[1])),
        ("PG rows per completed run", per_run(lambda s: s.end[2] - s.start[2])),
        ("Redis bytes per paused run", per_run(lambda s: s.redis_paused)),
        ("Redis bytes per completed run", per_run(lambda s: s.redis_end - s.redis_start)),
        ("sandbox (Slack) CPU per run, not counted (ms)", ms(lambda s: s.pause.sandbox + s.resume.sandbox)),
    ]
    print_table(
        [(name, _columns(values)) for name, values in rows],
        header=("per run (ratio = countersign / LangGraph)", _columns(("countersign", "LangGraph"), "ratio")),
    )


def _columns(values: tuple[Any, Any], ratio: str | None = None) -> str:
    a, b = values
    if ratio is None:
        ratio = f"{a / b:.2f}" if isinstance(a, float) and isinstance(b, float) and b else "-"
    return "  ".join(f"{_cell(v):>12}" for v in (a, b, ratio))


def _cell(value: Any) -> str:
    if not isinstance(value, float):
        return str(value)
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
