"""Chaos test: many approval requests while web, worker and agent processes are SIGKILLed and Redis
restarts empty; then a check in the spirit of Jepsen's total-queue test.

    python bench/chaos.py --requests 300 --kills 12

Runs real processes (`countersign web` under gunicorn, `countersign worker`, an RQ agent worker
running `bench.chaos_agent.execute` through `approved_action`), a private `redis-server` and the
Slack sandbox, against a SQLite file (or a scratch database on the PostgreSQL server of
`--database-url`). Reviewers click Approve (duplicates, concurrent
quorum votes and non-approvers included) and click again when a card stays pending, as people do;
the agent sends a request again (same idempotency key) when the router has not stored it after a
while, as `RouterUnavailable` tells it to. Afterwards every request must be in exactly one terminal
state with exactly one card and a complete audit trail, and every approved action must have run
exactly once, or be flagged as started with no outcome (the agent was killed inside the action:
countersign runs an action at most once, and shows that case on the card for a human).
Prints one table and exits 1 on any loss or duplicate.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from redis import Redis
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    PYTHON_M,
    Child,
    bench_database,
    countersign_env,
    exit_on_sigterm,
    print_table,
    start_redis,
    wait_for_redis,
)
from countersign import ApprovalClient, RouterUnavailable
from countersign.ports import free_port
from countersign.router.cards import APPROVE_ACTION
from countersign.sandbox import Sandbox, serve
from countersign.store import ApprovalRequest, Store

POLICY = """\
version: 1
defaults: {channel: C0CHAOS, approvers: {users: [U0LEAD, U0ALICE]}}
actions:
  refund: {channel: C0REFUND}
  email: {channel: C0EMAIL, approvers: {users: [U0LEAD]}}
  deploy: {channel: C0DEPLOY, require: [{when: "true", approvals: 2}]}
"""
ACTIONS = ("refund", "email", "deploy")
TERMINAL = ("approved", "rejected", "expired")


class Chaos:
    """One run: the components, the load, the faults, and the check."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="countersign-chaos-"))
        self.rng = random.Random(args.seed)
        self.stop = threading.Event()
        self.kills = 0
        self.redis_restarts = 0
        self.submitted: dict[str, float] = {}
        self.lock = threading.Lock()
        self.children: dict[str, Child] = {}
        self.servers: list[Child] = []  # what `run` stops besides the children

    # -- set-up ---------------------------------------------------------------------------------
    def start(self, database_url: str) -> None:
        self.redis_server, self.redis_url = start_redis(self.tmp)
        self.servers.append(self.redis_server)
        self.store = Store.from_url(database_url)
        self.sandbox = Sandbox(signing_secret=secrets.token_hex(16))
        self.sandbox_server = serve(self.sandbox)
        port = free_port()
        self.sandbox.interactivity_url = f"http://127.0.0.1:{port}/slack/events"
        self.effects = self.tmp / "effects.log"
        self.effects.touch()
        env = countersign_env(
            self.tmp, POLICY, self.redis_url, database_url, self.sandbox_server.url + "/api/"
        ) | {
            "SLACK_SIGNING_SECRET": self.sandbox.signing_secret,
            "PORT": str(port),
            "CHAOS_EFFECTS": str(self.effects),
        }
        python = PYTHON_M
        self.children = {
            "web": Child(
                "web",
                [*python, "countersign.cli", "web", "--workers", "1", "--host", "127.0.0.1"],
                env,
                self.tmp / "web.log",
            ),
            "worker": Child("worker", [*python, "countersign.cli", "worker"], env, self.tmp / "worker.log"),
            "agent": Child(
                "agent",
                [
                    *python,
                    "rq.cli",
                    "worker",
                    "--url",
                    self.redis_url,
                    "-S",
                    "rq.serializers.JSONSerializer",
                    "--maintenance-interval",
                    "15",
                    "chaos-agent",
                ],
                env,
                self.tmp / "agent.log",
            ),
        }
        for child in self.children.values():
            child.start()
        self.client = ApprovalClient(Redis.from_url(self.redis_url), self.store)

    # -- load -------------------------------------------------------------------------------------
    def request(self, number: int) -> None:
        key = f"chaos-{number}"
        action = ACTIONS[number % len(ACTIONS)]
        while not self.stop.is_set():
            try:
                self.client.request(
                    action=action,
                    payload={"key": key, "n": number},
                    summary=f"chaos {number}",
                    requester="chaos",
                    idempotency_key=key,
                    resume={"queue": "chaos-agent", "func": "bench.chaos_agent.execute"},
                )
                break
            except RouterUnavailable:
                time.sleep(0.2)
        with self.lock:
            self.submitted.setdefault(key, time.monotonic())

    def submit_all(self) -> None:
        gap = self.args.submit_seconds / self.args.requests
        for number in range(self.args.requests):
            self.request(number)
            time.sleep(gap)

    def resend(self) -> None:
        """An agent whose request the router has not stored after 20 s sends it again."""
        while not self.stop.wait(10):
            stored = self.stored_keys()
            with self.lock:
                late = [
                    k for k, at in self.submitted.items() if k not in stored and time.monotonic() - at > 20
                ]
            for key in late:
                self.request(int(key.rsplit("-", 1)[1]))

    def stored_keys(self) -> set[str]:
        with self.store.engine.connect() as connection:
            return set(connection.execute(select(ApprovalRequest.idempotency_key)).scalars())

    def pending_cards(self) -> list[tuple[ApprovalRequest, str]]:
        with self.store.engine.connect() as connection:
            rows = connection.execute(
                select(
                    ApprovalRequest.id,
                    ApprovalRequest.channel,
                    ApprovalRequest.card_ts,
                    ApprovalRequest.required_approvals,
                ).where(ApprovalRequest.status == "pending", ApprovalRequest.card_ts.is_not(None))
            ).all()
        return rows  # type: ignore[return-value]

    def click(self, channel: str, ts: str, user: str) -> None:
        with contextlib.suppress(
            OSError, LookupError, RuntimeError
        ):  # web is down, or the card has no buttons
            self.sandbox.click(channel, ts, APPROVE_ACTION, user)

    def review(self) -> None:
        """Reviewers: approve every pending card; again after 3 s if it is still pending."""
        last: dict[str, float] = {}
        while not self.stop.wait(0.3):
            for row in self.pending_cards():
                if time.monotonic() - last.get(row.id, 0) < 3:
                    continue
                last[row.id] = time.monotonic()
                users = ["U0LEAD", "U0ALICE"] if row.required_approvals > 1 else ["U0LEAD"]
                if self.rng.random() < 0.2:
                    users.append("U0LEAD")  # a double click
                if self.rng.random() < 0.1:
                    users.append("U0MALLORY")  # not an approver
                threads = [
                    threading.Thread(target=self.click, args=(row.channel, row.card_ts, u)) for u in users
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()

    # -- faults -----------------------------------------------------------------------------------
    def faults(self) -> None:
        for number in range(self.args.kills):
            if self.stop.wait(self.rng.uniform(2, 6)):
                return
            if number == self.args.kills // 2:
                self.redis_server.kill()
                wait_for_redis(self.redis_server, self.redis_url)
                self.redis_restarts += 1
            self.children[self.rng.choice(list(self.children))].crash_and_restart(self.rng.uniform(0.2, 1.0))
            self.kills += 1

    def supervise(self) -> None:
        while not self.stop.wait(1):
            for child in self.children.values():
                child.restart_if_dead()

    # -- run and check ----------------------------------------------------------------------------
    def run(self, database_url: str) -> int:
        threads: list[threading.Thread] = []
        try:
            self.start(database_url)
            threads += [threading.Thread(target=f) for f in (self.review, self.resend, self.supervise)]
            for thread in threads:
                thread.start()
            faults = threading.Thread(target=self.faults, daemon=True)
            faults.start()
            self.submit_all()
            faults.join()
            deadline = time.monotonic() + self.args.settle_seconds
            while time.monotonic() < deadline and not self.settled():
                time.sleep(2)
        finally:
            self.stop.set()
            for thread in threads:
                thread.join()
            for child in [*self.children.values(), *self.servers]:
                child.kill()
        return self.report()

    def rows(self) -> list[ApprovalRequest]:
        with self.store._read() as session:
            return list(session.scalars(select(ApprovalRequest)))

    def settled(self) -> bool:
        rows = self.rows()
        effects = Counter(self.effects.read_text().split())
        done = all(
            r.status in TERMINAL and (r.status != "approved" or r.execution or effects[r.idempotency_key])
            for r in rows
        )
        return done and len(rows) == self.args.requests

    def report(self) -> int:
        rows = {r.idempotency_key: r for r in self.rows()}
        effects = Counter(self.effects.read_text().split())
        cards = Counter(
            m["metadata"]["event_payload"]["request_id"]
            for m in self.sandbox.messages()
            if m.get("metadata") and not m.get("thread_ts")
        )
        keys = [f"chaos-{n}" for n in range(self.args.requests)]
        lost = [k for k in keys if k not in rows or rows[k].status not in TERMINAL]
        approved = [rows[k] for k in keys if k in rows and rows[k].status == "approved"]
        audits = {r.id: {e.event for e in self.store.audit_trail(r.id)} for r in rows.values()}
        counts = {
            "requests": self.args.requests,
            "kills": self.kills,
            "redis restarts": self.redis_restarts,
            "approved": len(approved),
            "lost (no terminal state)": len(lost),
            "duplicated cards": sum(1 for r in rows.values() if cards[r.id] > 1),
            "missing cards": sum(1 for r in rows.values() if r.decided_via == "slack" and cards[r.id] == 0),
            "executed once": sum(1 for r in approved if effects[r.idempotency_key] == 1),
            "duplicated executions": sum(1 for k, n in effects.items() if n > 1),
            "started, no outcome (flagged)": sum(
                1 for r in approved if not effects[r.idempotency_key] and r.execution == "started"
            ),
            "never executed": sum(
                1 for r in approved if not effects[r.idempotency_key] and r.execution != "started"
            ),
            "incomplete audit trails": sum(
                1 for r in rows.values() if not {"requested", r.status, "resume_published"} <= audits[r.id]
            ),
        }
        print_table(list(counts.items()), header=("check", "count"))
        print(f"(logs in {self.tmp})")
        failures = (
            "lost (no terminal state)",
            "duplicated cards",
            "missing cards",
            "duplicated executions",
            "never executed",
            "incomplete audit trails",
        )
        return 1 if any(counts[name] for name in failures) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="approval requests (default 300)")
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument(
        "--submit-seconds", type=float, default=60.0, help="spread the requests over this long"
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=600.0,
        help="then wait at most this long for everything to settle",
    )
    parser.add_argument("--database-url", help="a PostgreSQL server to create a scratch database on")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    exit_on_sigterm()
    chaos = Chaos(args)
    with bench_database(args.database_url, chaos.tmp) as database_url:
        return chaos.run(database_url)


if __name__ == "__main__":
    sys.exit(main())
