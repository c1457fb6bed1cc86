"""Intake throughput: approval requests routed end to end per second, against a no-op RQ baseline.

    python bench/intake_throughput.py --requests 1000 --workers 2

One request = its intake job taken from the queue → stored → card posted to the Slack sandbox (no
added latency) → its `ts` stored. Each side's workers start, register, and are stopped (SIGSTOP,
with their sweep processes); every job is sent (`ApprovalClient.request`: the intake outbox's INSERT
and the enqueue; the baseline: a bare enqueue; each sender's rate is printed); then the workers are
let go at once (SIGCONT), and the figure is their drain of the full queue, from then until every job
has run (every card's `ts` stored). Timed from the first send instead (before the seventh pass), the
one sender capped the intake figure at its own rate. The baseline runs the same number of no-op jobs
through the same RQ worker class (`countersign.router.worker.RouterWorker`, the class `countersign
worker` runs: no fork per job, and countersign's own bookkeeping, `countersign/workers.py`; as
`bench.noop.NoopRouterWorker`, which lets the no-op through the router's refusal of other jobs), JSON
serializer and worker count, in the same run (issue 14: the baseline ran RQ's forking `Worker`, then
RQ's `SimpleWorker`, while the router's class changed under it). Each request has an action class
and a channel of its own, so Slack's pace of about one message a second per channel (which
countersign honours; `bench/busy_channel.py` measures it) does not cap the figure. Uses a private
redis-server and, with `--database-url`, PostgreSQL (default: a new SQLite file). Prints one table,
with each side's CPU a job by process over the drain; asserts nothing. `--profile FILE` records the
first router worker with py-spy (wall clock, idle included; attached as the workers are let go, so
the drain's first second or so is not recorded) during the drain and prints its top functions and
where its main thread was, a share and about how many ms a request (`WHERE`). `--pg-options`
sets `PGOPTIONS` for the router workers only, for experiments (e.g. `-c synchronous_commit=off`:
what waiting for the WAL flush at each COMMIT costs an intake; never a setting to run countersign
with).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis
from rq import Worker
from sqlalchemy import Engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    NO_INTAKE_LIMITS,
    PYTHON_M,
    Child,
    bench_database,
    cards_stored,
    countersign_env,
    exit_on_sigterm,
    print_table,
    process_cpu,
    py_spy,
    session_cpu_seconds,
    start_redis,
    top_frames,
    wait_until,
)
from countersign import ApprovalClient
from countersign.router.jobs import json_queue
from countersign.sandbox import Sandbox, serve
from countersign.store import Store, create_db_engine


def policy(classes: int) -> str:
    """A policy with `classes` action classes `a<n>`, each posting to a channel of its own."""
    actions = "\n".join(f"  a{n}: {{channel: C0B{n:05d}}}" for n in range(classes))
    return (
        f"version: 1\ndefaults: {{channel: C0BENCH, approvers: {{users: [U0LEAD]}}, {NO_INTAKE_LIMITS}}}\n"
        f"actions:\n{actions}\n"
    )


def _pid(worker: Child) -> int:
    assert worker.process is not None
    return worker.process.pid


@dataclass
class Phase:
    """One side's run: seconds until every job ran (every card stored), seconds until the last was
    sent, and CPU seconds over it by process (`_cpu`)."""

    seconds: float
    sent: float
    cpu: dict[str, float] = field(default_factory=dict)


def _cpu(workers: list[Child], redis_pid: int, engine: Engine | None) -> dict[str, float]:
    """CPU seconds so far of the RQ workers (their sessions: a router worker's sweep process too),
    the redis-server, this process (the sender, the Slack sandbox's threads, the polling) and, with
    `engine` on PostgreSQL, the backends serving its database (this observer's excluded)."""
    cpu = {
        "RQ workers (with their sweep processes)": sum(session_cpu_seconds(_pid(w)) for w in workers),
        "redis-server": session_cpu_seconds(redis_pid),
        "bench process (sender, Slack sandbox, polling)": time.process_time(),
    }
    if engine is not None and engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            pids = connection.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                )
            ).scalars()
            cpu |= {f"postgres {pid}": process_cpu(pid) for pid in pids}
    return cpu


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds from `before` to `after` (`_cpu`), PostgreSQL's backends summed (one that
    started meanwhile counts from 0)."""
    spent: dict[str, float] = {}
    for name, seconds in after.items():
        key = "PostgreSQL backends of the run's database" if name.startswith("postgres ") else name
        spent[key] = spent.get(key, 0.0) + seconds - before.get(name, 0.0)
    return spent


def cpu_rows(phase: Phase, jobs: int, what: str) -> list[tuple[str, object]]:
    """CPU ms a job of `phase` by process, their sum, and the rate two cores would cap it at."""
    rows: list[tuple[str, object]] = [
        (f"{what}: CPU ms a job, {name}", f"{1000 * s / jobs:.2f}") for name, s in phase.cpu.items()
    ]
    total = sum(phase.cpu.values())
    rows.append((f"{what}: CPU ms a job, all measured", f"{1000 * total / jobs:.2f}"))
    rows.append((f"{what}: jobs a second two cores could run at that CPU", f"{2 * jobs / total:.0f}"))
    return rows


def _signal(workers: list[Child], signum: int) -> None:
    """Send `signum` to each worker's process group (the worker and its sweep process)."""
    for worker in workers:
        os.killpg(_pid(worker), signum)


def run_workers(count: int, argv: list[str], env: dict[str, str], log: Path) -> list[Child]:
    workers = [Child(f"worker-{n}", argv, env, log) for n in range(count)]
    for worker in workers:
        worker.start()
    return workers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="approval requests (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="RQ workers on each side (default 2)")
    parser.add_argument("--database-url", help="a PostgreSQL server to create a scratch database on")
    parser.add_argument(
        "--profile",
        type=Path,
        help="record the first router worker with py-spy during the intake (raw format) into this "
        "file, and print its top functions",
    )
    parser.add_argument(
        "--pg-options",
        help="PGOPTIONS for the router workers (an experiment, e.g. '-c synchronous_commit=off')",
    )
    args = parser.parse_args()
    exit_on_sigterm()

    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    redis_server, redis_url = start_redis(tmp)
    server = serve(Sandbox(signing_secret="bench"))
    try:
        with bench_database(args.database_url, tmp) as database_url:
            env = countersign_env(tmp, policy(args.requests), redis_url, database_url, server.url + "/api/")
            redis_pid = _pid(redis_server)
            baseline = _noop_seconds(args, Redis.from_url(redis_url), env, tmp, redis_pid)
            if args.pg_options:
                env["PGOPTIONS"] = args.pg_options
            routed = _intake_seconds(args, Redis.from_url(redis_url), env, tmp, redis_pid)
    finally:
        redis_server.kill()
        server.shutdown()
    rate, base_rate = args.requests / routed.seconds, args.requests / baseline.seconds
    print_table(
        [
            ("requests", args.requests),
            ("RQ workers", args.workers),
            ("database", database_url.split(":", 1)[0]),
            ("no-op RQ jobs per second", f"{base_rate:.0f}"),
            ("requests routed per second", f"{rate:.0f}"),
            ("no-op jobs sent per second (the bench's one enqueuer)", f"{args.requests / baseline.sent:.0f}"),
            (
                "requests sent per second (the bench's one ApprovalClient)",
                f"{args.requests / routed.sent:.0f}",
            ),
            ("ratio (target >= 0.5)", f"{rate / base_rate:.2f}"),
            *cpu_rows(baseline, args.requests, "no-op"),
            *cpu_rows(routed, args.requests, "intake"),
        ]
    )
    if args.profile is not None:
        header = ("py-spy, router worker 0: function (inclusive)", "% of samples")
        print_table(top_frames(args.profile, 40), header=header)
        ms = 1000 * args.workers * routed.seconds / args.requests  # a request's wall ms of one worker
        print_table(where(args.profile, ms), header=WHERE_HEADER)
    return 0


WHERE_HEADER = ("router worker 0's main thread (py-spy)", "% / ms a request")
# Where the router worker's main thread is, first match wins: (name, a frame the stack holds). Inside
# the intake job, a category's PostgreSQL share is the samples in psycopg's `wait` under it.
WHERE = [
    ("intake: Slack chat.postMessage (card)", "_post (countersign/router/delivery.py"),
    ("intake: Store.create (INSERT, its audit event, one COMMIT)", "Store.create ("),
    ("intake: Store.attach_card (UPDATE, one COMMIT)", ".attach_card (countersign/store/"),
    ("intake: pending limit's count (SELECT)", "check_pending (countersign/router/limits.py"),
    ("intake: Redis script (rate window, channel's time, Home due)", "_admit (countersign/router/intake.py"),
    ("intake: approvers (user groups)", "_approvers (countersign/router/intake.py"),
    ("intake: policy (route, CEL gate)", "(countersign/router/policy.py"),
    ("intake: parse and validate the message", "parse (countersign/schema"),
    ("intake: logging", "(logging/__init__.py"),
    ("intake: the rest", "intake (countersign/router/intake.py"),
    ("RQ: job start (prepare_execution)", "prepare_execution (countersign/workers.py"),
    ("RQ: job success (delete, counters, lane release)", "handle_job_success (countersign/workers.py"),
    ("RQ: the rest around the job", "execute_job (countersign/router/worker.py"),
    ("RQ: waiting for and fetching a job (dequeue)", "dequeue_job_and_maintain_ttl (rq/worker/base.py"),
    ("RQ: the rest of the worker loop", "BaseWorker.work (rq/worker/base.py"),
]


def where(raw: Path, ms: float) -> list[tuple[str, object]]:
    """Where the router worker's main thread was in a py-spy raw file (`WHERE`): each category's
    share of its samples, and that share of `ms` (a request's wall-clock ms of one worker); then the
    intake's PostgreSQL waits (psycopg's `wait`). (py-spy without `--idle` is no CPU profile here:
    it counts threads reading a socket or waiting on a condition as active.)"""
    counts = dict.fromkeys([name for name, _ in WHERE], 0)
    total = waiting = every = 0
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        every += int(samples)
        if "run_worker (countersign/router/worker.py" not in stack:
            continue  # another thread: the job heartbeat, RQ's pubsub
        total += int(samples)
        name = next((name for name, frame in WHERE if frame in stack), None)
        if name is not None:
            counts[name] += int(samples)
        if name is not None and name.startswith("intake") and re.search(r"Connection\.wait \(psycopg", stack):
            waiting += int(samples)
    rows = [*counts.items(), ("intake: of which waiting on PostgreSQL (psycopg wait)", waiting)]
    return [("samples (main thread / all threads)", f"{total} / {every}")] + [
        (name, f"{100 * n / max(total, 1):.1f} % / {ms * n / max(total, 1):.2f}") for name, n in rows
    ]


def _noop_seconds(
    args: argparse.Namespace, redis: Redis, env: dict[str, str], tmp: Path, redis_pid: int
) -> Phase:
    """`args.workers` RQ workers running `args.requests` no-op jobs: `rq worker` with the router
    worker's class (`RouterWorker`, as `bench.noop.NoopRouterWorker`) and serializer (JSON)."""
    queue = json_queue("baseline", redis)
    argv = [
        *PYTHON_M, "rq.cli", "worker", "--url", env["REDIS_URL"],
        "-w", "bench.noop.NoopRouterWorker", "-S", "rq.serializers.JSONSerializer",
    ]  # fmt: skip
    workers = run_workers(args.workers, [*argv, "baseline"], env, tmp / "baseline.log")
    try:
        wait_until(lambda: len(Worker.all(connection=redis)) >= args.workers, 60)
        _signal(workers, signal.SIGSTOP)
        start = time.monotonic()
        for _ in range(args.requests):
            queue.enqueue("bench.noop.noop")
        sent = time.monotonic() - start
        cpu, start = _cpu(workers, redis_pid, None), time.monotonic()
        _signal(workers, signal.SIGCONT)
        wait_until(lambda: queue.finished_job_registry.count >= args.requests, 600)
        return Phase(time.monotonic() - start, sent, _spent(cpu, _cpu(workers, redis_pid, None)))
    finally:
        for worker in workers:
            worker.kill()
        redis.flushall()


def _intake_seconds(
    args: argparse.Namespace, redis: Redis, env: dict[str, str], tmp: Path, redis_pid: int
) -> Phase:
    """From the first `ApprovalClient.request` until every request's card `ts` is stored (and until
    the last request was sent: the one sender caps the rate)."""
    engine = create_db_engine(env["DATABASE_URL"])
    client = ApprovalClient(redis, Store(engine))
    workers = run_workers(args.workers, [*PYTHON_M, "countersign.cli", "worker"], env, tmp / "worker.log")
    spy = None
    try:
        wait_until(lambda: len(Worker.all(connection=redis)) >= args.workers, 60)
        _signal(workers, signal.SIGSTOP)
        start = time.monotonic()
        for n in range(args.requests):
            client.request(
                action=f"a{n}",
                payload={"n": n},
                summary=f"bench {n}",
                requester="bench",
                idempotency_key=f"bench-{n}",
                resume={"queue": "agent", "func": "bench.x.y"},
            )
        sent = time.monotonic() - start
        cpu, start = _cpu(workers, redis_pid, engine), time.monotonic()
        _signal(workers, signal.SIGCONT)
        spy = None if args.profile is None else py_spy(_pid(workers[0]), args.profile)  # not while stopped
        wait_until(lambda: cards_stored(engine) >= args.requests, 900)
        return Phase(time.monotonic() - start, sent, _spent(cpu, _cpu(workers, redis_pid, engine)))
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait()
        for worker in workers:
            worker.kill()
        engine.dispose()


if __name__ == "__main__":
    sys.exit(main())
