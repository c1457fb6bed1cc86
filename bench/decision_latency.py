"""Decision latency: signed Approve clicks sent open-loop at a steady rate to `countersign web`.

    python bench/decision_latency.py --rate 50 --seconds 20 --database-url postgresql://postgres@127.0.0.1:5432/test

Real processes: `countersign web` (gunicorn, its default 2 workers x 8 threads) and `countersign
worker`, a private redis-server, the Slack sandbox (in this process) and a scratch database (with
`--database-url`, PostgreSQL; default a new SQLite file). First `rate x (warmup + seconds)` requests
go through the real intake path (`ApprovalClient.request` -> worker -> card on the sandbox), spread
over 200 channels so that the per-channel posting pace does not slow the set-up. Then a separate
sender process sends one signed Approve click (approver U0LEAD) per request, open loop: click `i`
leaves at `start + i / rate` whatever the answers so far, from a pool of threads, with bodies built
and signed ahead so the sender does little work per click (its CPU use is printed).

Per click: ack = from just before the POST is written to the end of the HTTP response (Slack's
limit is 3 s: https://docs.slack.dev/tools/bolt-python/concepts/acknowledge); click -> resume
enqueued = from the same moment (UTC wall clock) to the RQ `enqueued_at` (UTC, microseconds) of the
resume job on the agent's queue (no agent worker runs, so each job stays there). Both clocks are this
machine's. The first `--warmup` seconds of clicks are sent but not counted. Prints one table;
asserts nothing.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import secrets
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from redis import Redis
from rq.utils import utcparse
from slack_sdk.signature import SignatureVerifier
from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    PYTHON_M,
    Child,
    bench_database,
    countersign_env,
    percentile,
    print_table,
    start_redis,
    wait_until,
)
from countersign import ApprovalClient
from countersign.router.cards import APPROVE_ACTION
from countersign.router.runtime import json_queue
from countersign.sandbox import Sandbox, serve
from countersign.sandbox.interactivity import encode_payload
from countersign.stack import free_port
from countersign.store import ApprovalRequest, Store, create_db_engine, resume_job_id

CHANNELS = 200
APPROVER = "U0LEAD"
AGENT_QUEUE = "bench-agent"
SENDER_THREADS = 64
ACK_TARGET_MS, RESUME_TARGET_MS = 100, 50


def policy() -> str:
    actions = "\n".join(f"  a{n}: {{channel: C0L{n:03d}}}" for n in range(CHANNELS))
    return (
        f"version: 1\ndefaults: {{channel: C0LAT, approvers: {{users: [{APPROVER}]}}}}\nactions:\n{actions}\n"
    )


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
    its own connection from a thread pool. Returns the clicks and the CPU seconds this process used."""
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

    cpu = time.process_time()
    with ThreadPoolExecutor(SENDER_THREADS) as pool:
        start = time.time() + 0.5
        for index, body in enumerate(bodies):
            due = start + index / rate
            time.sleep(max(0.0, due - time.time()))
            pool.submit(post, index, body, due)
    return sorted(clicks, key=lambda c: c.index), time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50, help="clicks per second (default 50)")
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds (default 20)")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of clicks not counted (default 2)")
    parser.add_argument("--database-url", help="a PostgreSQL server to create a scratch database on")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    redis_server, redis_url = start_redis(tmp)
    sandbox = Sandbox(signing_secret=secrets.token_hex(16))
    server = serve(sandbox)
    children: list[Child] = []
    try:
        with bench_database(args.database_url, tmp) as database_url:
            port = free_port()
            sandbox.interactivity_url = f"http://127.0.0.1:{port}/slack/events"
            env = countersign_env(tmp, policy(), redis_url, database_url, server.url + "/api/") | {
                "SLACK_SIGNING_SECRET": sandbox.signing_secret,
                "PORT": str(port),
            }
            children = [
                Child("worker", [*PYTHON_M, "countersign.cli", "worker"], env, tmp / "worker.log"),
                Child(
                    "web", [*PYTHON_M, "countersign.cli", "web", "--host", "127.0.0.1"], env, tmp / "web.log"
                ),
            ]
            for child in children:
                child.start()
            count = round(args.rate * (args.warmup + args.seconds))
            engine = create_db_engine(database_url)
            setup = _pending_cards(ApprovalClient(Redis.from_url(redis_url), Store(engine)), engine, count)
            bodies = [
                encode_payload(sandbox.click_payload(c, ts, APPROVE_ACTION, APPROVER)) for _, c, ts in setup
            ]
            wait_until(lambda: _healthy(port), 60, "countersign web did not start")
            context = multiprocessing.get_context("spawn")
            with context.Pool(1) as pool:
                clicks, sender_cpu = pool.apply(
                    send_clicks, (sandbox.interactivity_url, sandbox.signing_secret, bodies, args.rate)
                )
            redis = Redis.from_url(redis_url)
            answered = sum(c.status == 200 for c in clicks)
            queue = json_queue(AGENT_QUEUE, redis)
            wait_until(lambda: queue.count >= answered, 120, "resume jobs did not all arrive")
            enqueued = _enqueued_at(redis, [request_id for request_id, _, _ in setup])
            engine.dispose()
    finally:
        for child in children:
            child.kill()
        redis_server.kill()
        server.shutdown()
    _report(args, clicks, enqueued, sender_cpu, database_url)
    return 0


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
    wait_until(lambda: _cards(engine) >= count, 600, "cards were not all posted")
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


def _cards(engine: object) -> int:
    with engine.connect() as connection:  # type: ignore[attr-defined]
        return connection.execute(
            select(func.count()).select_from(ApprovalRequest).where(ApprovalRequest.card_ts.is_not(None))
        ).scalar_one()


def _enqueued_at(redis: Redis, request_ids: list[str]) -> list[float | None]:
    """The RQ `enqueued_at` (unix seconds) of each request's resume job, None where there is none."""
    with redis.pipeline(transaction=False) as pipeline:
        for request_id in request_ids:
            pipeline.hget(f"rq:job:{resume_job_id(request_id)}", "enqueued_at")
        stamps = pipeline.execute()
    return [utcparse(stamp.decode()).timestamp() if stamp else None for stamp in stamps]


def _healthy(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False


def _ms(values: list[float], p: float) -> str:
    return f"{percentile(values, p) * 1000:.1f}"


def _report(
    args: argparse.Namespace,
    clicks: list[Click],
    enqueued: list[float | None],
    sender_cpu: float,
    database_url: str,
) -> None:
    warm = round(args.rate * args.warmup)
    measured = clicks[warm:]
    acks = [c.ack for c in measured if c.status == 200]
    resumes = [enqueued[c.index] - c.sent_at for c in measured if enqueued[c.index] is not None]
    span = measured[-1].sent_at - measured[0].sent_at if len(measured) > 1 else float("nan")
    rows: list[tuple[str, object]] = [
        ("database", database_url.split(":", 1)[0].split("+")[0]),
        ("web", "gunicorn, 2 workers x 8 threads (defaults)"),
        ("clicks counted (after warm-up)", f"{len(measured)} (+{warm} warm-up)"),
        ("click rate asked / achieved per s", f"{args.rate:.0f} / {(len(measured) - 1) / span:.1f}"),
        ("sender lag behind schedule max ms", f"{max(c.lag for c in measured) * 1000:.1f}"),
        ("sender CPU (% of one core)", f"{sender_cpu / (len(clicks) / args.rate) * 100:.0f}"),
        (
            "non-200 answers / connection errors",
            f"{sum(c.status not in (0, 200) for c in measured)} / {sum(c.status == 0 for c in measured)}",
        ),
        ("resume jobs missing", sum(enqueued[c.index] is None for c in measured)),
    ]
    for name, values, target in (
        ("ack", acks, ACK_TARGET_MS),
        ("click -> resume enqueued", resumes, RESUME_TARGET_MS),
    ):
        rows.append(
            (
                f"{name} ms p50 / p95 / p99 / max",
                " / ".join(
                    [
                        _ms(values, 50),
                        _ms(values, 95),
                        _ms(values, 99),
                        f"{max(values, default=float('nan')) * 1000:.1f}",
                    ]
                ),
            )
        )
        met = percentile(values, 99) * 1000 <= target
        rows.append((f"{name} p99 target <= {target} ms", "met" if met else "NOT met"))
    print_table(rows)


if __name__ == "__main__":
    sys.exit(main())
