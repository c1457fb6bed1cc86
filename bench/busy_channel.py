"""One busy channel: 300 requests to one channel while 30 go to 10 others, under Slack's pace.

    python bench/busy_channel.py --busy 300 --others 30 --workers 2

Slack allows about one message per second per channel and answers HTTP 429 over it
(https://docs.slack.dev/apis/web-api/rate-limits); the Slack sandbox here enforces that pace
(`post_rate_per_channel=1`, bursts of 3). `--busy` requests for one action (channel C0BUSY) are
enqueued at once; then `--others` requests, spread over 10 other channels, arrive at `--other-rate`
per second while the busy channel drains, as agents would send them. Real `countersign worker`
processes (`--workers`), a private redis-server and a scratch database (`--database-url`: on that
PostgreSQL server; default a SQLite file). Before that, the same `--others` requests run alone, for
the latency they have with no busy channel. Prints one table; asserts nothing.

Measured: cards stored and cards posted per request (from the sandbox's messages' metadata), the
429s Slack answered, the busy channel's posts in its busiest clock second and in its busiest
sliding 1 s window, its mean rate and drain time (first enqueue to last card), the other channels'
enqueue -> card posted latency, how often the intake job ran (RQ worker job counts; a job returning
`Retry` counts as a run) and how often the sweep's card step was turned away (worker log lines);
and the App Home refreshes the changes cost (`views.publish` calls in the sandbox's log, from the first
enqueue to the last card), beside what one refresh per card and approver would cost.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Worker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    NO_INTAKE_LIMITS,
    PYTHON_M,
    Child,
    bench_database,
    cards_stored,
    countersign_env,
    exit_on_sigterm,
    percentile,
    print_table,
    start_redis,
    wait_until,
)
from countersign import ApprovalClient
from countersign.sandbox import Sandbox, serve
from countersign.store import Store, create_db_engine

BUSY = "C0BUSY"
OTHER_CHANNELS = 10
POLICY = (
    f"version: 1\ndefaults: {{channel: C0BENCH, approvers: {{users: [U0LEAD]}}, {NO_INTAKE_LIMITS}}}\n"
    "actions:\n"
    f"  busy: {{channel: {BUSY}}}\n"
    + "".join(f"  other{n}: {{channel: C0OTHER{n}}}\n" for n in range(OTHER_CHANNELS))
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=300, help="requests to the busy channel")
    parser.add_argument("--others", type=int, default=30, help="requests spread over 10 other channels")
    parser.add_argument("--other-rate", type=float, default=2.0, help="other requests per second")
    parser.add_argument("--workers", type=int, default=2, help="router workers (default 2)")
    parser.add_argument("--database-url", help="a PostgreSQL server to create a scratch database on")
    args = parser.parse_args()
    exit_on_sigterm()

    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    redis_server, redis_url = start_redis(tmp)
    sandbox = Sandbox(signing_secret="bench", post_rate_per_channel=1)
    server = serve(sandbox)
    workers: list[Child] = []
    try:
        with bench_database(args.database_url, tmp) as database_url:
            env = countersign_env(tmp, POLICY, redis_url, database_url, server.url + "/api/")
            engine = create_db_engine(database_url)
            redis = Redis.from_url(redis_url)
            client = ApprovalClient(redis, Store(engine))
            argv = [*PYTHON_M, "countersign.cli", "worker"]
            workers = [Child(f"worker-{n}", argv, env, tmp / "worker.log") for n in range(args.workers)]
            for worker in workers:
                worker.start()
            wait_until(lambda: len(Worker.all(connection=redis)) >= args.workers, 60)
            alone = _trickle(client, args, "alone")
            wait_until(lambda: cards_stored(engine, list(alone)) >= len(alone), 120)
            runs_before = _job_runs(redis)
            start = time.time()
            busy = {_request(client, "busy", f"busy-{n}"): start for n in range(args.busy)}
            mixed = _trickle(client, args, "mixed")
            wait_until(
                lambda: cards_stored(engine, [*busy, *mixed]) >= len(busy) + len(mixed), 60 + 3 * args.busy
            )
            runs = _job_runs(redis) - runs_before
            publishes = [c for c in sandbox.calls("views.publish") if c["time"] >= start]
            stored = cards_stored(engine, [*busy, *mixed])
            engine.dispose()
    finally:
        for worker in workers:
            worker.kill()
        redis_server.kill()
        server.shutdown()
    posted = _posted(sandbox)
    busy_times = sorted(posted[r] for r in busy if r in posted)
    copies = Counter(_request_ids(sandbox))
    refused = [c for c in sandbox.calls("chat.postMessage") if c["status"] == 429]
    turned_away = (tmp / "worker.log").read_text().count("retrying in")
    total = len(busy) + len(mixed)
    print_table(
        [
            ("requests (busy channel + others)", f"{len(busy)} + {len(mixed)}"),
            ("RQ workers", args.workers),
            ("database", database_url.split(":", 1)[0]),
            ("cards stored / requests", f"{stored} / {total}"),
            ("requests with more than one card", sum(1 for n in copies.values() if n > 1)),
            ("429s answered by Slack", len(refused)),
            (
                "busy channel: most posts in one clock second",
                max(Counter(int(t) for t in busy_times).values()),
            ),
            ("busy channel: most posts in any 1 s window", _busiest_second(busy_times)),
            ("busy channel: mean posts per second", f"{_mean_rate(busy_times):.2f}"),
            ("busy channel: drain time (s)", f"{busy_times[-1] - start:.1f}"),
            ("others alone: enqueue -> card p50/p95/max (ms)", _latencies(alone, posted)),
            ("others beside busy: enqueue -> card p50/p95/max (ms)", _latencies(mixed, posted)),
            ("intake job runs per request", f"{runs / total:.2f}"),
            ("sweep card attempts turned away", turned_away),
            (
                "Home refreshes: views.publish calls (reviewers)",
                f"{len(publishes)} ({_reviewers(publishes)})",
            ),
            ("Home refreshes at one per card and approver", total),
        ]
    )
    return 0


def _reviewers(calls: list[Any]) -> int:
    return len({call["params"].get("user_id") for call in calls})


def _request(client: ApprovalClient, action: str, key: str) -> str:
    return client.request(
        action=action,
        payload={"key": key},
        summary=f"bench {key}",
        requester="bench",
        idempotency_key=key,
        resume={"queue": "agent", "func": "bench.x.y"},
    )


def _trickle(client: ApprovalClient, args: argparse.Namespace, tag: str) -> dict[str, float]:
    """Enqueue `args.others` requests round-robin over the other channels at `args.other_rate`
    per second: {request id: enqueue time (unix seconds)}."""
    sent: dict[str, float] = {}
    first = time.monotonic()
    for n in range(args.others):
        time.sleep(max(0.0, first + n / args.other_rate - time.monotonic()))
        now = time.time()
        sent[_request(client, f"other{n % OTHER_CHANNELS}", f"{tag}-{n}")] = now
    return sent


def _job_runs(redis: Redis) -> int:
    """Jobs the router workers ran so far; a job returning RQ's `Retry` counts as failed."""
    return sum(w.successful_job_count + w.failed_job_count for w in Worker.all(connection=redis))


def _request_ids(sandbox: Sandbox) -> list[str]:
    """The request id in each card's message metadata, one per card posted."""
    return [
        m["metadata"]["event_payload"]["request_id"]
        for m in sandbox.messages()
        if (m["metadata"] or {}).get("event_type") == "countersign_request"
    ]


def _posted(sandbox: Sandbox) -> dict[str, float]:
    """{request id: when its first card was posted (unix seconds, the message ts)}."""
    posted: dict[str, float] = {}
    for message in sandbox.messages():
        if (message["metadata"] or {}).get("event_type") == "countersign_request":
            posted.setdefault(message["metadata"]["event_payload"]["request_id"], float(message["ts"]))
    return posted


def _busiest_second(times: list[float]) -> int:
    """The most posts in any window of 1 s (sliding), from sorted post times."""
    most, left = 0, 0
    for right, at in enumerate(times):
        while at - times[left] >= 1.0:
            left += 1
        most = max(most, right - left + 1)
    return most


def _mean_rate(times: list[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")


def _latencies(sent: dict[str, float], posted: dict[str, float]) -> str:
    waits = [(posted[r] - at) * 1000 for r, at in sent.items() if r in posted]
    return "/".join(f"{percentile(waits, p):.0f}" for p in (50, 95, 100))


if __name__ == "__main__":
    sys.exit(main())
