"""Resume jobs per second on the agent worker the README recommends: `countersign agent-worker`.

    python bench/resume_throughput.py --database-url postgresql://postgres@127.0.0.1:5432/test

`--requests` approvals (default 1000) go through the real intake path (`ApprovalClient.request`,
then the intake jobs run in this process by RQ's `SimpleWorker`) with a policy that approves them
(`auto_approve: "true"`), so each one leaves its resume job on the agent's queue. RQ's workers are
then suspended (`rq.suspension`), `--workers` `countersign agent-worker` processes (default 2) are
started and registered, and the clock starts when the suspension is lifted: it stops when every
request's execution is recorded `executed` in the database. The resume function is
`@approved_action` (grant check, single-use claim, the action, its outcome), as an agent writes it.
Also prints the Redis commands processed per resume job meanwhile (the agent workers', the card
refreshes they ask for included). Uses a private redis-server and a scratch database (a SQLite
file without `--database-url`). `--profile PROFILE` records each agent worker with py-spy over the
measured time (PROFILE-0, PROFILE-1, ...). Prints one table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from redis import Redis
from rq import SimpleWorker, Worker
from rq.serializers import JSONSerializer
from rq.suspension import resume, suspend
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    NO_INTAKE_LIMITS,
    PYTHON_M,
    Child,
    bench_database,
    countersign_env,
    exit_on_sigterm,
    print_table,
    py_spy,
    start_redis,
    wait_until,
)
from countersign import ApprovalClient, approved_action, connections
from countersign.router import runtime as runtime_module
from countersign.router.jobs import INTAKE_QUEUE, json_queue

AGENT_QUEUE = "refund-agent"
RESUME_FUNC = "bench.resume_throughput.execute_refund"
POLICY = (
    "version: 1\n"
    f"defaults: {{channel: C0BENCH, approvers: {{users: [U0LEAD]}}, {NO_INTAKE_LIMITS}}}\n"
    'actions:\n  issue_refund: {auto_approve: "true"}\n'
)


@approved_action
def execute_refund(payload: dict[str, Any]) -> str:
    """The agent's action: nothing to do but say what it would have refunded."""
    return f"refunded {payload['amount']}"


def executed(engine: Any) -> int:
    """How many requests have their execution recorded `executed`."""
    with engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT count(*) FROM approval_requests WHERE execution = 'executed'")
            ).scalar_one()
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="approvals (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="agent workers (default 2)")
    parser.add_argument("--database-url", help="a PostgreSQL server to create a scratch database on")
    parser.add_argument(
        "--profile",
        type=Path,
        help="write py-spy profiles (raw, collapsed) of each agent worker to PROFILE-<n>",
    )
    args = parser.parse_args()
    exit_on_sigterm()
    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    redis_server, redis_url = start_redis(tmp)
    try:
        with bench_database(args.database_url, tmp) as database_url:
            env = countersign_env(tmp, POLICY, redis_url, database_url, "http://127.0.0.1:9/api/")
            os.environ.update(env)
            runtime_module.current.cache_clear()
            connections.current.cache_clear()
            runtime = runtime_module.current()
            seconds, commands = _measure(args, runtime.redis, runtime.store.engine, env, tmp)
            runtime.store.engine.dispose()
    finally:
        redis_server.kill()
    print_table(
        [
            ("approvals (resume jobs)", args.requests),
            ("agent workers (countersign agent-worker)", args.workers),
            ("database", database_url.split(":", 1)[0]),
            ("all executed, s", f"{seconds:.2f}"),
            ("resume jobs per second", f"{args.requests / seconds:.1f}"),
            ("Redis commands per resume job", f"{commands / args.requests:.1f}"),
        ]
    )
    return 0


def _measure(
    args: argparse.Namespace, redis: Redis, engine: Any, env: dict[str, str], tmp: Path
) -> tuple[float, int]:
    """(seconds until all executed, Redis commands meanwhile) for the agent workers, the approvals
    made first."""
    client = ApprovalClient(redis, runtime_module.current().store)
    for n in range(args.requests):
        client.request(
            action="issue_refund",
            payload={"amount": f"{n}.00", "currency": "USD"},
            summary=f"refund {n}",
            requester="bench",
            run_id=f"run-{n}",
            step="refund",
            resume={"queue": AGENT_QUEUE, "func": RESUME_FUNC},
        )
    SimpleWorker([json_queue(INTAKE_QUEUE, redis)], connection=redis, serializer=JSONSerializer).work(
        burst=True, logging_level="WARNING"
    )
    suspend(redis)
    argv = [*PYTHON_M, "countersign.cli", "agent-worker", AGENT_QUEUE]
    workers = [Child(f"agent-{n}", argv, env, tmp / "agent.log") for n in range(args.workers)]
    spies: list[subprocess.Popen[bytes]] = []
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: len(Worker.all(connection=redis)) >= args.workers, 60)
        spies = [_spy(worker, args.profile, n) for n, worker in enumerate(workers)] if args.profile else []
        commands = _commands(redis)
        start = time.monotonic()
        resume(redis)
        wait_until(lambda: executed(engine) >= args.requests, 900, "not every approval was executed")
        seconds = time.monotonic() - start
        commands = _commands(redis) - commands
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        for worker in workers:
            worker.kill()
    return seconds, commands


def _spy(worker: Child, profile: Path, n: int) -> subprocess.Popen[bytes]:
    assert worker.process is not None
    return py_spy(worker.process.pid, profile.with_name(f"{profile.name}-{n}"))


def _commands(redis: Redis) -> int:
    return int(redis.info("stats")["total_commands_processed"])


if __name__ == "__main__":
    sys.exit(main())
