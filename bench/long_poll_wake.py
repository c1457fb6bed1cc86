"""Long-poll wake latency of the HTTP API: agents waiting on `GET /v1/requests/{id}/decision?wait=60`
while reviewers approve, one click at a time.

    python bench/long_poll_wake.py --requests 100 --database-url postgresql://postgres@127.0.0.1:5432/test

Real processes: `countersign web` (its defaults: gunicorn, 2 uvicorn workers) and `countersign
worker`, a private redis-server, the Slack sandbox (in this process) and a scratch database. The
requests are created through `POST /v1/requests` (one token), their cards posted by the worker;
then every agent opens its long poll at once (all `--requests` wait together, on the two workers),
and once all are blocked on their bells, one signed Approve click is sent every `1 / --rate` s.
Per request: wake = from the decision's commit (`decided_at`, the database clock, this machine's)
to the end of the long poll's response; click -> decision = from just before the click is POSTed to
the same moment. Prints one table; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx
from redis import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    NO_INTAKE_LIMITS,
    cards_stored,
    exit_on_sigterm,
    percentile,
    print_table,
    wait_until,
    web_stack,
)
from countersign.router.cards import APPROVE_ACTION
from countersign.sandbox import Sandbox
from countersign.store import create_db_engine
from countersign.store.tokens import Tokens

CHANNELS = 50
APPROVER = "U0LEAD"


def policy() -> str:
    actions = "\n".join(f"  a{n}: {{channel: C0W{n:03d}}}" for n in range(CHANNELS))
    return (
        f"version: 1\ndefaults: {{channel: C0WAKE, approvers: {{users: [{APPROVER}]}}, {NO_INTAKE_LIMITS}}}\n"
        f"actions:\n{actions}\n"
    )


AGENT_QUEUE = "bench-agent"
"""The resume queue the requests name, which the benchmark's token may name."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100, help="agents waiting at once (default 100)")
    parser.add_argument("--rate", type=float, default=10, help="clicks per second (default 10)")
    parser.add_argument("--database-url", help="a PostgreSQL server to create a scratch database on")
    args = parser.parse_args()
    exit_on_sigterm()
    with web_stack(policy(), args.database_url) as stack:
        engine = create_db_engine(stack.database_url)
        token = Tokens(engine).create_token("bench", [f"a{n}" for n in range(CHANNELS)], [AGENT_QUEUE]).secret
        with httpx.Client(
            base_url=stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=90
        ) as api:
            ids = [_create(api, n) for n in range(args.requests)]
            wait_until(lambda: cards_stored(engine, ids) >= len(ids), 600, "cards were not all posted")
            rows = _measure(api, stack.sandbox, Redis.from_url(stack.redis_url), ids, args.rate)
        engine.dispose()
        database_url = stack.database_url
    _report(args, rows, database_url.split(":", 1)[0])
    return 0


def _create(api: httpx.Client, n: int) -> str:
    body = {
        "action": f"a{n % CHANNELS}",
        "payload": {"n": n},
        "summary": f"wake {n}",
        "requester": "bench",
        "idempotency_key": f"wake-{n}",
        "resume": {"queue": AGENT_QUEUE, "func": "bench.noop.noop"},
    }
    answer = api.post("/v1/requests", json=body)
    answer.raise_for_status()
    return str(answer.json()["request_id"])


def _measure(
    api: httpx.Client, sandbox: Sandbox, redis: Redis, ids: list[str], rate: float
) -> list[tuple[float, float]]:
    """`[(wake, click -> decision)]` in seconds, one per request."""
    clicked: dict[str, float] = {}
    lock = threading.Lock()

    def poll(request_id: str) -> tuple[float, float]:
        answer = api.get(f"/v1/requests/{request_id}/decision", params={"wait": 60})
        done = time.time()
        assert answer.status_code == 200, answer.text
        decided = datetime.fromisoformat(answer.json()["decided_at"]).timestamp()
        with lock:
            return done - decided, done - clicked[request_id]

    with ThreadPoolExecutor(len(ids)) as pool:
        polls = [pool.submit(poll, request_id) for request_id in ids]
        wait_until(lambda: _blocked(redis) >= len(ids), 60, "the long polls did not all block")
        cards = {r: m for m in sandbox.messages() for r in ids if r in str(m["blocks"])}
        for request_id in ids:
            card = cards[request_id]
            with lock:
                clicked[request_id] = time.time()
            status, _ = sandbox.send_signed(
                sandbox.click_payload(card["channel"], card["ts"], APPROVE_ACTION, APPROVER)
            )
            assert status == 200
            time.sleep(1 / rate)
        return [poll.result(timeout=90) for poll in polls]


def _blocked(redis: Redis) -> int:
    return sum(client.get("cmd") == "blmove" for client in redis.client_list())


def _report(args: argparse.Namespace, rows: list[tuple[float, float]], database: str) -> None:
    def spread(values: list[float]) -> str:
        return " / ".join(f"{1000 * percentile(values, p):.1f}" for p in (50, 95, 99, 100))

    print_table(
        [
            ("database", database),
            ("web", "gunicorn, 2 uvicorn workers (defaults)"),
            ("agents long-polling at once", str(args.requests)),
            ("click rate per s", f"{args.rate:g}"),
            ("wake after the decision's commit ms p50 / p95 / p99 / max", spread([w for w, _ in rows])),
            ("click -> long poll answered ms p50 / p95 / p99 / max", spread([c for _, c in rows])),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
