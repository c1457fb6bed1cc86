"""Decision latency: signed Approve clicks sent open-loop at a steady rate to `countersign web`.

    python bench/decision_latency.py --rate 50 --seconds 20 --database-url postgresql://postgres@127.0.0.1:5432/test

Real processes: `countersign web` (gunicorn, its default 2 workers x 8 threads) and `countersign
worker`, a private redis-server, the Slack sandbox (in this process) and a scratch database (with
`--database-url`, PostgreSQL; default a new SQLite file). First `rate x (warmup + seconds)` requests
go through the real intake path (`ApprovalClient.request` -> worker -> card on the sandbox), spread
over 200 channels so that the per-channel posting pace does not slow the set-up. Then a separate
sender process sends one signed Approve click (approver U0LEAD) per request, open loop: click `i`
leaves at `start + i / rate` whatever the answers so far, on a thread of its own, with bodies built
and signed ahead so the sender does little work per click (its CPU use is printed).

Per click: ack = from just before the POST is written to the end of the HTTP response (Slack's
limit is 3 s: https://docs.slack.dev/tools/bolt-python/concepts/acknowledge); click -> resume
enqueued = from the same moment (UTC wall clock) to the RQ `enqueued_at` (UTC, microseconds) of the
resume job on the agent's queue (no agent worker runs, so each job stays there). Both clocks are this
machine's. The first `--warmup` seconds of clicks are sent but not counted. Prints one table;
asserts nothing.

The click's tail is its vote's COMMIT, which waits for PostgreSQL's write-ahead log to be flushed up
to its record, whatever other databases of the same server wrote before it (BENCHMARKS.md, "Issue 14,
fifth pass"). The table says how much WAL the server wrote while the clicks ran; `--private-postgres`
runs the scratch database on a server of the run's own (`common.PostgresServer`), so that other work
on a shared server (its tests' `CREATE` / `DROP DATABASE` and their checkpoints) is not in the
click's flush; the disk is still the machine's, shared with whatever else writes to it.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from rq.utils import utcparse
from slack_sdk.signature import SignatureVerifier
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    NO_INTAKE_LIMITS,
    Child,
    cards_stored,
    exit_on_sigterm,
    percentile,
    postgres_server,
    print_table,
    session_cpu_seconds,
    top_frames,
    wait_until,
    web_stack,
)
from countersign import ApprovalClient
from countersign.router.cards import APPROVE_ACTION
from countersign.router.jobs import json_queue, resume_job_id
from countersign.sandbox import Sandbox
from countersign.sandbox.interactivity import encode_payload
from countersign.store import ApprovalRequest, Store, create_db_engine

CHANNELS = 200
APPROVER = "U0LEAD"
AGENT_QUEUE = "bench-agent"
ACK_TARGET_MILLISECONDS, RESUME_TARGET_MILLISECONDS = 10, 25
"""Issue 14's targets at 50 clicks/s: ack p99 <= 10 ms, click -> resume enqueued p99 <= 25 ms."""


def policy() -> str:
    actions = "\n".join(f"  a{n}: {{channel: C0L{n:03d}}}" for n in range(CHANNELS))
    return (
        f"version: 1\ndefaults: {{channel: C0LAT, approvers: {{users: [{APPROVER}]}}, {NO_INTAKE_LIMITS}}}\n"
        f"actions:\n{actions}\n"
    )


@dataclass(frozen=True)
class Cpu:
    """CPU seconds used while the clicks were sent and answered, by the sender process, `countersign
    web` (gunicorn master and workers), `countersign worker` (with its sweep process), this process
    (the Slack sandbox answering chat.update) and the PostgreSQL backends of the scratch database
    that are still connected at the end (a lower bound: the backends of pool overflow connections,
    closed when returned, are not counted)."""

    sender: float
    web: float
    worker: float
    sandbox: float
    postgres: float


@dataclass(frozen=True)
class Click:
    """One sent click: `sent_at` (unix seconds, UTC) and its lag behind schedule, the HTTP status
    (0 for a connection error or timeout) and the ack time in seconds."""

    index: int
    sent_at: float
    lag: float
    status: int
    ack: float


def send_clicks(url: str, secret: str, bodies: list[bytes], rate: float) -> tuple[list[Click], float]:
    """Send `bodies` (form-encoded payloads) signed to `url`, body `i` at `start + i / rate`, each on
    its own connection and thread (so a slow answer never delays the next click). Returns the
    clicks and the CPU seconds this process used."""
    parsed = urllib.parse.urlsplit(url)
    verifier = SignatureVerifier(secret)
    clicks: list[Click] = []
    lock = threading.Lock()

    def post(index: int, body: bytes, due: float) -> None:
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": verifier.generate_signature(timestamp=timestamp, body=body),
        }
        connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
        sent_at, started = time.time(), time.perf_counter()
        try:
            connection.request("POST", parsed.path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            status = response.status
        except OSError:
            status = 0
        finally:
            connection.close()
        click = Click(index, sent_at, sent_at - due, status, time.perf_counter() - started)
        with lock:
            clicks.append(click)

    cpu, threads = time.process_time(), []
    start = time.time() + 0.5
    for index, body in enumerate(bodies):
        due = start + index / rate
        time.sleep(max(0.0, due - time.time()))
        threads.append(threading.Thread(target=post, args=(index, body, due)))
        threads[-1].start()
    for thread in threads:
        thread.join()
    return sorted(clicks, key=lambda c: c.index), time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50, help="clicks per second (default 50)")
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds (default 20)")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of clicks not counted (default 2)")
    parser.add_argument("--database-url", help="a PostgreSQL server to create a scratch database on")
    parser.add_argument(
        "--private-postgres",
        action="store_true",
        help="start a PostgreSQL server of this run's own (initdb in a temporary directory) instead",
    )
    parser.add_argument(
        "--stages",
        type=Path,
        help="write each click's stage timings in the web processes into this directory and print them",
    )
    parser.add_argument(
        "--profile", type=Path, help="record the web processes with py-spy (raw format) into this file"
    )
    args = parser.parse_args()
    exit_on_sigterm()

    with contextlib.ExitStack() as resources:
        server_url = args.database_url
        if args.private_postgres:
            log = Path(tempfile.mkdtemp(prefix="countersign-bench-pg-")) / "postgres.log"
            server_url = resources.enter_context(postgres_server(log)).url
        if args.stages:
            args.stages.mkdir(parents=True, exist_ok=True)
        stack = resources.enter_context(web_stack(policy(), server_url, args.stages))
        web, worker, database_url = stack.web, stack.worker, stack.database_url
        engine, redis = create_db_engine(database_url), Redis.from_url(stack.redis_url)
        client = ApprovalClient(redis, Store(engine))
        cards = _pending_cards(client, engine, round(args.rate * (args.warmup + args.seconds)))
        engine.dispose()
        bodies = [
            encode_payload(stack.sandbox.click_payload(c, ts, APPROVE_ACTION, APPROVER)) for _, c, ts in cards
        ]
        stack.children += [_profiler(args.profile, web, stack.tmp)] if args.profile else []
        database = make_url(database_url).database if server_url else None
        wal_before = _wal_position(database_url)
        before = [*(session_cpu_seconds(_pid(child)) for child in (web, worker)), time.process_time()]
        before.append(_backends_cpu_seconds(database))
        clicks, sender_cpu = _send(stack.sandbox, bodies, args.rate)
        queue = json_queue(AGENT_QUEUE, redis)
        answered = sum(c.status == 200 for c in clicks)
        wait_until(lambda: queue.count >= answered, 120, "resume jobs did not all arrive")
        after = [*(session_cpu_seconds(_pid(child)) for child in (web, worker)), time.process_time()]
        after.append(_backends_cpu_seconds(database))
        cpu = Cpu(sender_cpu, *(b - a for a, b in zip(before, after, strict=True)))
        wal = _wal_position(database_url) - wal_before
        enqueued = _enqueued_at(redis, [request_id for request_id, _, _ in cards])
        if args.profile:
            _stop(stack.children.pop())
    _report(args, clicks, enqueued, cpu, database_url, wal)
    if args.stages:
        print()
        cards_by_index = [request_id for request_id, _, _ in cards]
        print_table(
            _stages(args, clicks, enqueued, cards_by_index), header=("stage, ms", "p50 / p95 / p99 / max")
        )
    if args.profile:
        print()
        print_table(
            top_frames(args.profile), header=("py-spy, web processes: function (inclusive)", "% of samples")
        )
    return 0


def _pid(child: Child) -> int:
    assert child.process is not None
    return child.process.pid


def _send(sandbox: Sandbox, bodies: list[bytes], rate: float) -> tuple[list[Click], float]:
    """`send_clicks` in a separate process, away from this one's GIL (the sandbox serves here)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert sandbox.interactivity_url is not None
        return pool.apply(send_clicks, (sandbox.interactivity_url, sandbox.signing_secret, bodies, rate))


def _profiler(out: Path, web: Child, tmp: Path) -> Child:
    """py-spy sampling `web` and its gunicorn workers 100 times a second, without pausing them,
    only threads holding the GIL (Python CPU time: what competes with the clicks)."""
    argv = [
        str(Path(sys.executable).parent / "py-spy"),
        "record",
        "--pid",
        str(_pid(web)),
        "--subprocesses",
        "--gil",
    ]
    profiler = Child(
        "py-spy",
        [*argv, "--nonblocking", "-r", "100", "-f", "raw", "-o", str(out)],
        dict(os.environ),
        tmp / "py-spy.log",
    )
    profiler.start()
    time.sleep(1)  # py-spy attaches
    return profiler


def _stop(profiler: Child) -> None:
    """Ask py-spy to write its file (SIGINT) and wait for it."""
    assert profiler.process is not None
    profiler.process.send_signal(signal.SIGINT)
    profiler.process.wait(timeout=60)


def _pending_cards(client: ApprovalClient, engine: object, count: int) -> list[tuple[str, str, str]]:
    """Request `count` approvals through the intake path and wait for their cards: `[(request id,
    channel, card ts)]` in request order."""
    for n in range(count):
        client.request(
            action=f"a{n % CHANNELS}",
            payload={"n": n},
            summary=f"bench {n}",
            requester="bench",
            idempotency_key=f"latency-{n}",
            resume={"queue": AGENT_QUEUE, "func": "bench.noop.noop"},
        )
    wait_until(lambda: cards_stored(engine) >= count, 600, "cards were not all posted")
    with engine.connect() as connection:  # type: ignore[attr-defined]
        rows = connection.execute(
            select(
                ApprovalRequest.idempotency_key,
                ApprovalRequest.id,
                ApprovalRequest.channel,
                ApprovalRequest.card_ts,
            )
        ).all()
    by_key = {key: (request_id, channel, ts) for key, request_id, channel, ts in rows}
    return [by_key[f"latency-{n}"] for n in range(count)]


def _enqueued_at(redis: Redis, request_ids: list[str]) -> list[float | None]:
    """The RQ `enqueued_at` (unix seconds) of each request's resume job, None where there is none."""
    with redis.pipeline(transaction=False) as pipeline:
        for request_id in request_ids:
            pipeline.hget(f"rq:job:{resume_job_id(request_id)}", "enqueued_at")
        stamps = pipeline.execute()
    return [utcparse(stamp.decode()).timestamp() if stamp else None for stamp in stamps]


def _backends_cpu_seconds(database: str | None) -> float:
    """CPU seconds used so far by the live PostgreSQL backends connected to `database` (0 for SQLite):
    the processes whose title is `postgres: ... <user> <database> ...` (Linux /proc)."""
    ticks = 0
    for process in Path("/proc").glob("[0-9]*") if database else ():
        try:
            title = (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if title.startswith("postgres:") and f" {database} " in title:
                fields = (process / "stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            continue  # the process exited meanwhile
    return ticks / os.sysconf("SC_CLK_TCK")


def _wal_position(database_url: str) -> int:
    """How many bytes of write-ahead log the PostgreSQL server of `database_url` has written so far,
    all its databases together (`pg_current_wal_lsn()`, https://www.postgresql.org/docs/15/functions-admin.html);
    0 for SQLite. A commit returns once the log up to its own record is flushed, so whatever another
    database on the same server wrote just before is flushed in the same wait."""
    if make_url(database_url).get_backend_name() != "postgresql":
        return 0
    engine = create_db_engine(database_url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar_one())
    finally:
        engine.dispose()


def _stages(
    args: argparse.Namespace, clicks: list[Click], enqueued: list[float | None], request_ids: list[str]
) -> list[tuple[str, object]]:
    """Each counted click's stages, from the web processes' trace lines (`bench/clicktrace`), as
    p50 / p95 / p99 / max in ms: from the click's send to its work starting on the decision pool
    (HTTP, guard, ack, the pool's queue), each step of `journal.act` (a step's several calls summed:
    the vote's statements, its COMMIT), the vote's transaction less its statements and COMMIT
    (BEGIN, SQLAlchemy and Python), and from the start of the work to the resume job's
    `enqueued_at`."""
    traced: dict[str, dict[str, Any]] = {}
    for path in args.stages.glob("trace-*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            traced[entry["request_id"]] = entry
    columns: dict[str, list[float]] = {}
    for click in clicks[round(args.rate * args.warmup) :]:
        entry, end = traced.get(request_ids[click.index]), enqueued[click.index]
        if entry is None or end is None:
            continue
        sums: dict[str, float] = {}
        for name, start, stop in entry["steps"]:
            sums[name] = sums.get(name, 0.0) + stop - start
        sums["vote: BEGIN, SQLAlchemy, Python"] = (
            sums.get("vote transaction", 0.0) - sums.get("statement", 0.0) - sums.get("COMMIT", 0.0)
        )
        sums["send -> work starts (HTTP, ack, pool queue)"] = entry["start"] - click.sent_at
        sums["work starts -> resume enqueued"] = end - entry["start"]
        for name, value in sums.items():
            columns.setdefault(name, []).append(value)
    order = [
        "send -> work starts (HTTP, ack, pool queue)",
        "journal entry",
        "vote transaction",
        "statement",
        "COMMIT",
        "vote: BEGIN, SQLAlchemy, Python",
        "enqueue + bell",
        "work starts -> resume enqueued",
        "card rewrite",
        "journal dropped",
    ]
    rows: list[tuple[str, object]] = [("clicks traced", len(columns.get("COMMIT", [])))]
    for name in order:
        values = columns.get(name, [])
        label = {"statement": "vote: its statements (summed)", "COMMIT": "vote: its COMMIT"}.get(name, name)
        rows.append((label, " / ".join(_ms(values, p) for p in (50, 95, 99, 100)) if values else "-"))
    return rows


def _ms(values: list[float], p: float) -> str:
    return f"{percentile(values, p) * 1000:.1f}"


def _report(
    args: argparse.Namespace,
    clicks: list[Click],
    enqueued: list[float | None],
    cpu: Cpu,
    database_url: str,
    wal: int,
) -> None:
    warm = round(args.rate * args.warmup)
    measured = clicks[warm:]
    acks = [c.ack for c in measured if c.status == 200]
    resumes = [enqueued[c.index] - c.sent_at for c in measured if enqueued[c.index] is not None]
    span = measured[-1].sent_at - measured[0].sent_at if len(measured) > 1 else float("nan")
    sending = len(clicks) / args.rate
    rows: list[tuple[str, object]] = [
        (
            "database",
            database_url.split(":", 1)[0].split("+")[0]
            + (" (private server)" if args.private_postgres else ""),
        ),
        ("WAL written on its server while clicking, kB (every database)", f"{wal / 1024:.0f}"),
        ("web", "gunicorn, 2 uvicorn workers, Slack on 8 a2wsgi threads each (defaults)"),
        ("clicks counted (after warm-up)", f"{len(measured)} (+{warm} warm-up)"),
        ("click rate asked / achieved per s", f"{args.rate:.0f} / {(len(measured) - 1) / span:.1f}"),
        ("sender lag behind schedule max ms", f"{max(c.lag for c in measured) * 1000:.1f}"),
        ("sender CPU, % of one core", f"{100 * cpu.sender / sending:.0f}"),
        (
            "CPU ms per click: web / worker / sandbox / db (>=)",
            " / ".join(
                f"{1000 * used / len(clicks):.1f}"
                for used in (cpu.web, cpu.worker, cpu.sandbox, cpu.postgres)
            ),
        ),
        (
            "non-200 answers / connection errors",
            f"{sum(c.status not in (0, 200) for c in measured)} / {sum(c.status == 0 for c in measured)}",
        ),
        ("resume jobs missing", sum(enqueued[c.index] is None for c in measured)),
    ]
    for name, values, target in (
        ("ack", acks, ACK_TARGET_MILLISECONDS),
        ("click -> resume enqueued", resumes, RESUME_TARGET_MILLISECONDS),
    ):
        spread = [_ms(values, 50), _ms(values, 95), _ms(values, 99), _ms(values, 100)]
        rows.append((f"{name} ms p50 / p95 / p99 / max", " / ".join(spread)))
        met = bool(values) and percentile(values, 99) * 1000 <= target
        rows.append((f"{name} p99 target <= {target} ms", "met" if met else "NOT met"))
    print_table(rows)


if __name__ == "__main__":
    sys.exit(main())
