"""Chaos test: many approval requests while web, worker and agent processes are SIGKILLed, Redis
restarts empty and PostgreSQL restarts; then a check in the spirit of Jepsen's total-queue test.

    python bench/chaos.py --requests 300 --kills 12
    python bench/chaos.py --postgres --pg-restarts 1 --redis-restarts 2 --webs 2 --workers 3 \\
        --requests 1000 --kills 30

Runs real processes (`--webs` `countersign web` under gunicorn, each on its own port; `--workers`
`countersign worker`, each with its own sweep process; `--agents` `countersign agent-worker`s running
`bench.chaos_agent.execute` through `approved_action`), a private `redis-server` and the Slack
sandbox, against a SQLite file, a scratch database on the PostgreSQL server of `--database-url`, or
(`--postgres`) a PostgreSQL server of the run's own, which `--pg-restarts` restarts during the run
(a fast shutdown, a SIGKILL of the postmaster, or a SIGKILL of all its processes: `--pg-restart-mode`).
The faults (process kills, spread over every process; Redis and PostgreSQL restarts) are spread
over `--fault-seconds`.

Reviewers click Approve on the cards they see in the sandbox, 0.5 to 5 s after a card appears
(duplicates, concurrent quorum votes and non-approvers included), each click going to one of the web
processes in turn, and click again when a card still shows its buttons 3 s later, as people do;
the agent sends a request again (same idempotency key) when the router has not stored it after a
while, as `RouterUnavailable` tells it to. Afterwards every request must be in exactly one
terminal state with exactly one card, no buttons left on a decided card, and a complete audit trail;
every approved action must have run exactly once, or be flagged as started with no outcome (the
agent was killed inside the action: countersign runs an action at most once, and shows that case on
the card for a human); and every click Slack got its ack (HTTP 200) for must have been recorded, or
the reviewer told it was not (bot.app), or, when the web process died with it, replayed from the
journal (router.journal). Prints one table, writes the evidence of every failed check to
`evidence.json` in the run's directory, and exits 1 on any loss or duplicate.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import secrets
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    NO_INTAKE_LIMITS,
    PYTHON_M,
    Child,
    PostgresServer,
    bench_database,
    countersign_env,
    exit_on_sigterm,
    postgres_server,
    print_table,
    start_redis,
    wait_for_redis,
)
from countersign import ApprovalClient, RouterUnavailable
from countersign.ports import free_port
from countersign.router.cards import APPROVE_ACTION, EDIT_ACTION, REJECT_ACTION
from countersign.router.journal import JOURNAL_KEY
from countersign.sandbox import Sandbox, serve
from countersign.sandbox.interactivity import encode_payload, signed_post
from countersign.store import ApprovalRequest, Store

# The buttons a decided card must no longer show (it keeps Details, which decides nothing).
DECISION_ACTIONS = {APPROVE_ACTION, REJECT_ACTION, EDIT_ACTION}

POLICY = (
    "version: 1\n"
    f"defaults: {{channel: C0CHAOS, approvers: {{users: [U0LEAD, U0ALICE]}}, {NO_INTAKE_LIMITS}}}\n"
    """\
actions:
  refund: {channel: C0REFUND}
  email: {channel: C0EMAIL, approvers: {users: [U0LEAD]}}
  deploy: {channel: C0DEPLOY, require: [{when: "true", approvals: 2}]}
"""
)
ACTIONS = ("refund", "email", "deploy")
DEPLOY_CHANNEL = "C0DEPLOY"  # the policy's channel of the one action class that needs 2 approvals
TERMINAL = ("approved", "rejected", "expired")
APPROVERS = ("U0LEAD", "U0ALICE")
# The audit events one processed click of its user leaves (a decision's own event comes with a vote).
CLICK_EVENTS = ("vote", "vote_repeated", "refused")
NOT_RECORDED = "countersign could not record your action"  # texts.not_recorded
CARD_CHANNELS = 3  # the policy's channels: cards are paced at 0.9 a second in each
EVIDENCE_IDS = 40  # at most this many requests' audit trails per failed check in evidence.json


@dataclass
class Click:
    """One press of Approve, as the sandbox sent it: to web process `web`, at `sent` (unix seconds),
    answered with HTTP `status` (None: no answer, e.g. the process was down or died)."""

    request_id: str
    channel: str
    user: str
    web: int
    sent: float
    status: int | None


class Chaos:
    """One run: the components, the load, the faults, and the check."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="countersign-chaos-"))
        self.rng = random.Random(args.seed)
        self.fault_rng = random.Random(args.seed)
        self.stop = threading.Event()
        self.stop_review = threading.Event()
        self.kills: Counter[str] = Counter()
        self.redis_restarts = 0
        self.submitted: dict[str, float] = {}
        self.lock = threading.Lock()
        self.children: dict[str, Child] = {}
        self.servers: list[Child] = []  # what `run` stops besides the children
        self.postgres: PostgresServer | None = None  # set by `main` with --postgres
        self.clicks: list[Click] = []
        self.turn = itertools.count()
        self.fault_log = (self.tmp / "faults.log").open("a", buffering=1)
        self.journal_left = -1
        self.stalls = 0
        self.jobs: dict[str, dict[str, Any]] = {}  # resume jobs of approvals that have not run
        self.started = time.monotonic()

    def note(self, what: str) -> None:
        """One line in faults.log (wall clock, as in the processes' logs)."""
        stamp = time.strftime("%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}"
        self.fault_log.write(f"{stamp} {what}\n")

    # -- set-up ---------------------------------------------------------------------------------
    def start(self, database_url: str) -> None:
        self.redis_server, self.redis_url = start_redis(self.tmp)
        self.servers.append(self.redis_server)
        self.redis = Redis.from_url(self.redis_url)
        self.store = Store.from_url(database_url)
        self.sandbox = Sandbox(signing_secret=secrets.token_hex(16))
        self.sandbox_server = serve(self.sandbox)
        self.effects = self.tmp / "effects.log"
        self.effects.touch()
        env = countersign_env(
            self.tmp, POLICY, self.redis_url, database_url, self.sandbox_server.url + "/api/"
        ) | {"SLACK_SIGNING_SECRET": self.sandbox.signing_secret, "CHAOS_EFFECTS": str(self.effects)}
        python = PYTHON_M
        ports: set[int] = set()
        while len(ports) < self.args.webs:
            ports.add(free_port())
        self.web_urls = [f"http://127.0.0.1:{port}/slack/events" for port in sorted(ports)]
        self.sandbox.interactivity_url = self.web_urls[0]  # the page's; `click` picks one per click
        for number, port in enumerate(sorted(ports)):
            name = f"web-{number}"
            self.children[name] = Child(
                name,
                [*python, "countersign.cli", "web", "--workers", "1", "--host", "127.0.0.1"],
                env | {"PORT": str(port)},
                self.tmp / f"{name}.log",
            )
        for number in range(self.args.workers):
            name = f"worker-{number}"
            self.children[name] = Child(
                name, [*python, "countersign.cli", "worker"], env, self.tmp / f"{name}.log"
            )
        for number in range(self.args.agents):
            name = f"agent-{number}"
            self.children[name] = Child(
                name,
                [*python, "countersign.cli", "agent-worker", "chaos-agent"],
                env,
                self.tmp / f"{name}.log",
            )
        for child in self.children.values():
            child.start()
        self.client = ApprovalClient(self.redis, self.store)

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
            try:
                stored = self.stored_keys()
            except Exception as exc:  # the database is restarting: as an agent would, try later
                self.note(f"resend: {type(exc).__name__}")
                continue
            with self.lock:
                late = [
                    k for k, at in self.submitted.items() if k not in stored and time.monotonic() - at > 20
                ]
            for key in late:
                self.request(int(key.rsplit("-", 1)[1]))

    def stored_keys(self) -> set[str]:
        with self.store.engine.connect() as connection:
            return set(connection.execute(select(ApprovalRequest.idempotency_key)).scalars())

    def pending_cards(self) -> list[tuple[str, str, str, int]]:
        """The cards on the reviewers' screens that still show Approve, as `(request id, channel, ts,
        approvals needed)`: read from the sandbox, as people read Slack, so they click on while the
        database is down (the needed approvals come from the policy: 2 in the deploy channel)."""
        state = self.sandbox.state
        with state.lock:
            return [
                (
                    record["metadata"]["event_payload"]["request_id"],
                    record["channel"],
                    record["ts"],
                    2 if record["channel"] == DEPLOY_CHANNEL else 1,
                )
                for record in state.messages.values()
                if record.get("metadata")
                and not record.get("thread_ts")
                and any(
                    element.get("action_id") == APPROVE_ACTION
                    for block in record["blocks"]
                    if block.get("type") == "actions"
                    for element in block.get("elements", [])
                )
            ]

    def click(self, request_id: str, channel: str, ts: str, user: str) -> None:
        """Press Approve as `user`: the signed payload goes to the next web process in turn."""
        web = next(self.turn) % len(self.web_urls)
        try:
            payload = self.sandbox.click_payload(channel, ts, APPROVE_ACTION, user)
        except LookupError:
            return  # the card has no Approve button (any more): nothing to press
        sent = time.time()
        status: int | None
        try:
            status, _ = signed_post(
                self.web_urls[web],
                encode_payload(payload),
                secret=self.sandbox.signing_secret,
                timestamp=int(sent),
            )
        except Exception:  # the web process is down or died with the request: Slack got no ack
            status = None
        with self.lock:
            self.clicks.append(Click(request_id, channel, user, web, sent, status))

    def review(self) -> None:
        """Reviewers: approve every card that shows Approve, 0.5 to 5 s after it appears (people take
        a moment); again every 3 s while it still does."""
        due: dict[str, float] = {}
        while not self.stop_review.wait(0.3):
            for request_id, channel, ts, approvals in self.pending_cards():
                now = time.monotonic()
                if request_id not in due:
                    due[request_id] = now + self.rng.uniform(0.5, 5)
                if now < due[request_id]:
                    continue
                due[request_id] = now + 3
                users = ["U0LEAD", "U0ALICE"] if approvals > 1 else ["U0LEAD"]
                if self.rng.random() < 0.2:
                    users.append("U0LEAD")  # a double click
                if self.rng.random() < 0.1:
                    users.append("U0MALLORY")  # not an approver
                threads = [
                    threading.Thread(target=self.click, args=(request_id, channel, ts, u)) for u in users
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()

    # -- faults -----------------------------------------------------------------------------------
    def fault_seconds(self) -> float:
        """How long the faults are spread over: the given `--fault-seconds`, else about as long as the
        cards take to be posted (0.9 a second in each of the policy's channels), at least the
        submission time and 4 s a fault."""
        if self.args.fault_seconds is not None:
            return float(self.args.fault_seconds)
        events = self.args.kills + self.args.redis_restarts + self.args.pg_restarts + self.args.vote_stalls
        return max(self.args.submit_seconds, 4.0 * events, self.args.requests / (0.9 * CARD_CHANNELS))

    def fault_plan(self) -> list[str]:
        """The faults in order: kills evenly, Redis and PostgreSQL restarts and vote stalls at even
        fractions of the run (a PostgreSQL restart just after a Redis restart at the same fraction)."""
        a = self.args
        plan = [((i + 0.5) / a.kills, 3, "kill") for i in range(a.kills)]
        plan += [((i + 0.7) / a.vote_stalls, 2, "stall") for i in range(a.vote_stalls)]
        plan += [((i + 1) / (a.redis_restarts + 1), 0, "redis") for i in range(a.redis_restarts)]
        plan += [((i + 1) / (a.pg_restarts + 1), 1, "postgres") for i in range(a.pg_restarts)]
        return [what for *_, what in sorted(plan)]

    def pg_mode(self, number: int) -> str:
        mode: str = self.args.pg_restart_mode
        return PG_CYCLE[number % len(PG_CYCLE)] if mode == "cycle" else mode

    def faults(self) -> None:
        plan = self.fault_plan()
        gap = self.fault_seconds() / max(1, len(plan))
        targets: list[str] = []
        pg_number = 0
        for what in plan:
            if self.stop.wait(self.fault_rng.uniform(0.5, 1.5) * gap):
                return
            try:
                if what == "redis":
                    self.note("redis: SIGKILL, restart empty")
                    self.redis_server.kill()
                    wait_for_redis(self.redis_server, self.redis_url)
                    self.redis_restarts += 1
                    self.note("redis: up")
                elif what == "stall":
                    self.stall_votes()
                elif what == "postgres":
                    assert self.postgres is not None
                    mode = self.pg_mode(pg_number)
                    pg_number += 1
                    down = self.fault_rng.uniform(2, 5)
                    self.note(f"postgres: restart ({mode}), down {down:.1f} s")
                    self.postgres.restart(mode, down)
                    self.note("postgres: up")
                else:
                    if not targets:  # every process once per round, in a random order
                        targets = list(self.children)
                        self.fault_rng.shuffle(targets)
                    name = targets.pop()
                    down = self.fault_rng.uniform(0.2, 1.0)
                    self.note(f"{name}: SIGKILL, down {down:.1f} s")
                    self.children[name].crash_and_restart(down)
                    self.kills[name] += 1
            except Exception:
                self.note(f"{what}: fault failed\n{traceback.format_exc()}")

    def stall_votes(self) -> None:
        """The database is slow to record votes (the `votes` table locked) while clicks arrive, and
        every web process is SIGKILLed with those clicks acked and still waiting: the journal must
        replay them (or find them recorded by a later click)."""
        from sqlalchemy import text

        hold = self.fault_rng.uniform(1.5, 3)
        webs = [name for name in self.children if name.startswith("web-")]
        with self.store.engine.connect() as connection:
            connection.execute(text("SET LOCAL lock_timeout = '10s'"))
            connection.execute(text("LOCK TABLE votes IN EXCLUSIVE MODE"))
            self.note(f"votes: locked for {hold:.1f} s, then SIGKILL of {', '.join(webs)}")
            time.sleep(hold)
            for name in webs:
                self.children[name].kill()
                self.kills[name] += 1
            connection.rollback()
        self.stalls += 1
        self.note("votes: unlocked")
        time.sleep(self.fault_rng.uniform(0.2, 1.0))
        for name in webs:  # unless the supervisor has already (a second start would orphan a web)
            self.children[name].restart_if_dead()

    def supervise(self) -> None:
        while not self.stop.wait(1):
            for child in self.children.values():
                child.restart_if_dead()

    # -- run and check ----------------------------------------------------------------------------
    def run(self, database_url: str) -> int:
        threads: list[threading.Thread] = []
        review = threading.Thread(target=self.review)
        try:
            self.start(database_url)
            threads += [threading.Thread(target=f) for f in (self.resend, self.supervise)]
            for thread in [review, *threads]:
                thread.start()
            faults = threading.Thread(target=self.faults, daemon=True)
            faults.start()
            self.submit_all()
            faults.join()
            self.note("faults done; settling")
            self.settle()
            self.stop_review.set()
            review.join()
            self.wait_journal()
            self.snapshot_jobs()
        finally:
            self.stop_review.set()
            self.stop.set()
            for thread in threads:
                thread.join()
            if review.ident is not None:
                review.join()
            for child in [*self.children.values(), *self.servers]:
                child.kill()
        return self.report(database_url)

    def settle(self) -> None:
        """Wait until everything has settled, at most `--settle-seconds`, or until nothing has moved
        for `--stall-seconds` (the sweeps heal every 30 s and replay acked actions after 60 s)."""
        deadline = time.monotonic() + self.args.settle_seconds
        last, moved = None, time.monotonic()
        while time.monotonic() < deadline:
            state = self.progress()
            if state is not None and state[0]:
                self.note("settled")
                return
            if state != last:
                last, moved = state, time.monotonic()
            elif time.monotonic() - moved > self.args.stall_seconds:
                self.note(f"nothing moved for {self.args.stall_seconds:.0f} s; giving up")
                return
            time.sleep(2)
        self.note("settle deadline")

    def wait_journal(self) -> None:
        """The reviewers have stopped: let the last clicks' work end (their journal entries go)."""
        time.sleep(3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                self.journal_left = int(self.redis.zcard(JOURNAL_KEY))
                if self.journal_left == 0:
                    return
            time.sleep(1)

    def snapshot_jobs(self) -> None:
        """While Redis is still up: where the resume job of each approval that has not run is (its RQ
        status, and when a retry is scheduled for), for the evidence."""
        from rq.job import Job
        from rq.registry import ScheduledJobRegistry
        from rq.serializers import JSONSerializer

        effects = Counter(self.effects.read_text().split())
        scheduled = ScheduledJobRegistry("chaos-agent", connection=self.redis, serializer=JSONSerializer)
        for r in self.rows():
            if r.status != "approved" or effects[r.idempotency_key]:
                continue
            job_id = f"resume-{r.id}"
            try:
                job = Job.fetch(job_id, connection=self.redis, serializer=JSONSerializer)
                state = {"status": str(job.get_status()), "retries_left": job.retries_left}
                when = scheduled.get_scheduled_time(job_id) if job_id in scheduled else None
                state["scheduled_for"] = when.isoformat() if when else None
            except Exception as exc:  # gone from Redis
                state = {"status": f"not in Redis ({type(exc).__name__})"}
            self.jobs[r.id] = state

    def rows(self) -> list[ApprovalRequest]:
        with self.store._read() as session:
            return list(session.scalars(select(ApprovalRequest)))

    def progress(self) -> tuple[bool, Any] | None:
        """(settled, a fingerprint of the state) or None when the database or Redis is unreachable.
        Settled: every request terminal, every approval executed (or flagged), the journal empty."""
        try:
            rows = self.rows()
            journal = int(self.redis.zcard(JOURNAL_KEY))
        except Exception:
            return None
        effects = Counter(self.effects.read_text().split())
        done = all(
            r.status in TERMINAL and (r.status != "approved" or r.execution or effects[r.idempotency_key])
            for r in rows
        )
        done = done and len(rows) == self.args.requests and journal == 0
        fingerprint = (
            Counter((r.status, r.execution) for r in rows),
            sum(effects.values()),
            journal,
            sum(1 for r in rows if r.card_ts),
        )
        return done, fingerprint

    def report(self, database_url: str) -> int:
        rows = {r.idempotency_key: r for r in self.rows()}
        by_id = {r.id: r for r in rows.values()}
        effects = Counter(self.effects.read_text().split())
        messages = [m for m in self.sandbox.messages() if m.get("metadata") and not m.get("thread_ts")]
        cards: dict[str, list[Any]] = defaultdict(list)
        for m in messages:
            cards[m["metadata"]["event_payload"]["request_id"]].append(m)
        keys = [f"chaos-{n}" for n in range(self.args.requests)]
        lost = [k for k in keys if k not in rows or rows[k].status not in TERMINAL]
        approved = [rows[k] for k in keys if k in rows and rows[k].status == "approved"]
        trails = {r.id: self.store.audit_trail(r.id) for r in rows.values()}
        audits = {rid: {e.event for e in trail} for rid, trail in trails.items()}
        buttons = [
            r
            for r in rows.values()
            if r.status in TERMINAL
            and any(
                element.get("action_id") in DECISION_ACTIONS
                for m in cards[r.id]
                for b in m.get("blocks") or []
                if b.get("type") == "actions"
                for element in b.get("elements", [])
            )
        ]
        clicks = self.check_clicks(by_id, trails)
        flagged: dict[str, list[str]] = {
            "lost (no terminal state)": [rows[k].id if k in rows else k for k in lost],
            "duplicated cards": [r.id for r in rows.values() if len(cards[r.id]) > 1],
            "missing cards": [r.id for r in rows.values() if r.decided_via == "slack" and not cards[r.id]],
            "duplicated executions": [rows[k].id if k in rows else k for k, n in effects.items() if n > 1],
            "started, no outcome (flagged)": [
                r.id for r in approved if not effects[r.idempotency_key] and r.execution == "started"
            ],
            "never executed": [
                r.id for r in approved if not effects[r.idempotency_key] and r.execution != "started"
            ],
            "incomplete audit trails": [
                r.id for r in rows.values() if not {"requested", r.status, "resume_published"} <= audits[r.id]
            ],
            "decided cards still offering a decision": [r.id for r in buttons],
            "lost clicks (acked, unrecorded, request pending)": clicks["lost"],
            "acked clicks dropped silently": clicks["silent"],
        }
        acked = [c for c in self.clicks if c.status == 200]
        kills = ", ".join(f"{name} {n}" for name, n in sorted(self.kills.items()))
        restarts = self.postgres.restarts if self.postgres is not None else []
        counts: list[tuple[str, object]] = [
            ("requests", self.args.requests),
            (
                "processes",
                f"{self.args.webs} web, {self.args.workers} worker, {self.args.agents} agent",
            ),
            ("database", "postgresql (own server)" if self.postgres else database_url.split(":")[0]),
            ("kills", f"{sum(self.kills.values())} ({kills})" if kills else 0),
            ("redis restarts", self.redis_restarts),
            ("postgres restarts", f"{len(restarts)} ({', '.join(restarts)})" if restarts else 0),
            ("vote stalls (every web killed)", self.stalls),
            ("approved", len(approved)),
            ("executed once", sum(1 for r in approved if effects[r.idempotency_key] == 1)),
            ("clicks sent / acked (200)", f"{len(self.clicks)} / {len(acked)}"),
            ("acked clicks told 'not recorded'", len(clicks["told"])),
            ("acked clicks, no own trace, vote recorded", len(clicks["masked"])),
            ("acked clicks replayed from the journal (logs)", self.log_lines("acked by a process that died")),
            ("journal entries left", max(self.journal_left, 0)),
            *((name, len(ids)) for name, ids in flagged.items()),
        ]
        print_table(counts, header=("check", "count"))
        minutes, seconds = divmod(int(time.monotonic() - self.started), 60)
        print(f"(took {minutes} min {seconds} s; logs, faults.log, clicks.jsonl in {self.tmp})")
        self.write_evidence(flagged, clicks, by_id)
        failures = [
            "lost (no terminal state)",
            "duplicated cards",
            "missing cards",
            "duplicated executions",
            "never executed",
            "incomplete audit trails",
            "decided cards still offering a decision",
            "lost clicks (acked, unrecorded, request pending)",
            "acked clicks dropped silently",
        ]
        for name in flagged:
            if flagged[name] and name != "started, no outcome (flagged)":
                shown = sorted(set(flagged[name]))
                print(f"{name}: {' '.join(shown[:12])}{' …' if len(shown) > 12 else ''}")
        return 1 if any(flagged[name] for name in failures) or self.journal_left > 0 else 0

    def log_lines(self, text: str) -> int:
        """How many lines of the processes' logs contain `text`."""
        return sum(
            line.count(text)
            for log in self.tmp.glob("*.log")
            for line in log.read_text(errors="replace").splitlines()
        )

    def check_clicks(self, by_id: dict[str, ApprovalRequest], trails: dict[str, Any]) -> dict[str, Any]:
        """Match the acked clicks to the audit events their processing left (`CLICK_EVENTS` by the
        clicker on the request; each event to the latest click of that user on that request sent
        before it). A click left without an event is:
        - `told`: the reviewer got the "could not record" answer in the card's channel within 60 s
          (matched one to one by user and channel: approximate when several cards share a channel);
        - `masked`: the clicker's vote is recorded anyway (another click of theirs counted, or the
          journal's replay found the vote and rightly did nothing): harmless;
        - `lost`: otherwise, on a request still pending at the end;
        - `silent`: otherwise (the request was decided by other clicks; the click left no trace).
        Returns the request ids of `lost` and `silent`, the clicks of `told` and `masked`."""
        events: dict[tuple[str, str], list[float]] = defaultdict(list)
        for rid, trail in trails.items():
            for e in trail:
                if e.event in CLICK_EVENTS and e.actor:
                    events[(rid, e.actor)].append(e.at.timestamp())
        voters: dict[str, set[str]] = {}
        for rid, request in by_id.items():
            voters[rid] = {d["slack_user_id"] for d in request.decided_by or []}
            voters[rid] |= {v.slack_user_id for v in self.store.votes(rid)}
        told = defaultdict(list)
        for e in self.sandbox.ephemerals():
            if e["text"].startswith(NOT_RECORDED):
                told[(e["channel"], e["user"])].append(float(e["ts"]))
        result: dict[str, Any] = {"masked": [], "told": [], "lost": [], "silent": []}
        acked: dict[tuple[str, str], list[Click]] = defaultdict(list)
        for c in sorted(self.clicks, key=lambda c: c.sent):
            if c.status == 200:
                acked[(c.request_id, c.user)].append(c)
        unmatched: list[Click] = []
        for pair, pressed in acked.items():
            left = list(pressed)  # oldest first
            for at in sorted(events.get(pair, [])):  # each event to the latest click before it (1 s slack)
                found = next((i for i in range(len(left) - 1, -1, -1) if left[i].sent <= at + 1), None)
                if found is not None:
                    left.pop(found)
            unmatched += left
        for c in sorted(unmatched, key=lambda c: c.sent):
            request = by_id.get(c.request_id)
            answers = told[(c.channel, c.user)]
            answer = next((i for i, ts in enumerate(answers) if c.sent - 1 <= ts <= c.sent + 60), None)
            if answer is not None:
                answers.pop(answer)
                result["told"].append(c)
            elif c.user in voters.get(c.request_id, set()):
                result["masked"].append(c)
            elif request is None or request.status not in TERMINAL:
                result["lost"].append(c.request_id)
            else:
                result["silent"].append(c.request_id)
        self.unmatched = unmatched
        return result

    def write_evidence(
        self, flagged: dict[str, list[str]], clicks: dict[str, Any], by_id: dict[str, ApprovalRequest]
    ) -> None:
        """evidence.json: per failed check, each request's `countersign show` and its clicks;
        clicks.jsonl: every click."""
        with (self.tmp / "clicks.jsonl").open("w") as out:
            for c in self.clicks:
                out.write(json.dumps(asdict(c)) + "\n")
        by_request: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for c in self.clicks:
            by_request[c.request_id].append(asdict(c))
        unmatched = {(c.request_id, c.user, c.sent) for c in getattr(self, "unmatched", [])}
        evidence: dict[str, Any] = {}
        for name, ids in flagged.items():
            shown = []
            for rid in sorted(set(ids))[:EVIDENCE_IDS]:
                if rid not in by_id:
                    shown.append({"request": rid, "state": "not stored"})
                    continue
                state = self.client.get(rid).as_dict()
                for c in by_request[rid]:
                    c["unrecorded"] = (c["request_id"], c["user"], c["sent"]) in unmatched
                shown.append({"request": rid, "show": state, "clicks": by_request[rid]})
                if rid in self.jobs:
                    shown[-1]["resume_job"] = self.jobs[rid]
            if ids:
                evidence[name] = {"count": len(ids), "requests": shown}
        for name in ("told", "masked"):
            ids = sorted({c.request_id for c in clicks[name]})[:EVIDENCE_IDS]
            evidence[name] = {
                "clicks": [asdict(c) for c in clicks[name]],
                "requests": [
                    {"request": rid, "show": self.client.get(rid).as_dict(), "clicks": by_request[rid]}
                    for rid in ids
                    if rid in by_id
                ],
            }
        (self.tmp / "evidence.json").write_text(json.dumps(evidence, indent=1, default=str))


PG_CYCLE = ("kill", "fast", "crash")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="approval requests (default 300)")
    parser.add_argument("--kills", type=int, default=12, help="SIGKILLs of web, worker and agent processes")
    parser.add_argument("--redis-restarts", type=int, default=1, help="Redis restarts, empty (default 1)")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="run a PostgreSQL server of the run's own (initdb in a temporary directory) instead of SQLite",
    )
    parser.add_argument(
        "--pg-restarts",
        type=int,
        default=0,
        help="restarts of that PostgreSQL server (default 0; implies --postgres)",
    )
    parser.add_argument(
        "--pg-restart-mode",
        choices=(*PostgresServer.MODES, "cycle"),
        default="cycle",
        help="fast: fast shutdown; kill: SIGKILL of the postmaster; crash: SIGKILL of all its processes; "
        f"cycle (default): {', '.join(PG_CYCLE)}, in turn",
    )
    parser.add_argument(
        "--vote-stalls",
        type=int,
        default=0,
        help="times the votes table is locked for 1.5-3 s and every web process SIGKILLed meanwhile, "
        "with acked clicks in flight (PostgreSQL only; default 0)",
    )
    parser.add_argument("--webs", type=int, default=1, help="`countersign web` processes (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="`countersign worker` processes (default 1)")
    parser.add_argument(
        "--agents", type=int, default=1, help="`countersign agent-worker` processes (default 1)"
    )
    parser.add_argument(
        "--submit-seconds", type=float, default=60.0, help="spread the requests over this long"
    )
    parser.add_argument(
        "--fault-seconds",
        type=float,
        help="spread the faults over this long (default: about as long as the cards take to be posted)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=600.0,
        help="then wait at most this long for everything to settle",
    )
    parser.add_argument(
        "--stall-seconds",
        type=float,
        default=240.0,
        help="stop settling once nothing has changed for this long (default 240)",
    )
    parser.add_argument("--database-url", help="a PostgreSQL server to create a scratch database on")
    parser.add_argument(
        "--keep-database",
        action="store_true",
        help="keep the scratch database (and with --postgres the server's data directory) afterwards",
    )
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    if args.pg_restarts and args.database_url:
        parser.error("--pg-restarts needs the run's own server (--postgres), not --database-url")
    args.postgres = args.postgres or bool(args.pg_restarts)
    if args.postgres and args.database_url:
        parser.error("--postgres and --database-url exclude each other")
    if args.vote_stalls and not (args.postgres or args.database_url):
        parser.error("--vote-stalls needs PostgreSQL (--postgres or --database-url)")
    if min(args.webs, args.workers, args.agents) < 1:
        parser.error("--webs, --workers and --agents must be at least 1")
    exit_on_sigterm()
    chaos = Chaos(args)
    print("command: " + " ".join(sys.argv), flush=True)
    with contextlib.ExitStack() as stack:
        url = args.database_url
        if args.postgres:
            chaos.postgres = stack.enter_context(
                postgres_server(chaos.tmp / "postgres.log", keep=args.keep_database)
            )
            url = chaos.postgres.url
        database_url = stack.enter_context(bench_database(url, chaos.tmp, keep=args.keep_database))
        if args.keep_database:
            where = f" (data directory {chaos.postgres.data})" if chaos.postgres else ""
            print(f"database: {database_url}{where}", flush=True)
        return chaos.run(database_url)


if __name__ == "__main__":
    sys.exit(main())
