"""The floor of one approval cycle on countersign's architecture, beside the real cycle and LangGraph's
`interrupt()` + PostgresSaver cycle, measured in one run.

    python bench/cycle_floor.py --database-url postgresql://postgres@127.0.0.1:5432/test

Issue 14 asks for a cycle's CPU, all processes, within 2 x LangGraph's and for at most 60 Redis
commands a cycle. A cycle on this architecture cannot cost less than the parts it is built of, each
measured here with nothing of countersign's own logic in it:

- **two no-op RQ jobs** on countersign's worker classes (`RouterWorker` for the intake queue, as
  `bench.noop.NoopRouterWorker`, which lets the no-op through the router's refusal of other jobs;
  `AgentWorker` for the agent's queue; both `workers.CountersignWorker`), enqueued (`Queue.enqueue`)
  with the job ids, `result_ttl=0` and (for the resume job) `unique=True` countersign gives them, so
  they take the worker's lean success path, and run to the end: enqueue to finish, each queue drained
  by one burst worker as `pause_vs_langgraph` drains it. No intake lane (RQ's rate limit), no
  callback, no marker. CPU of this process (enqueue and the burst worker), of the redis-server, and
  the Redis commands it processed;
- **one signed Slack interactivity POST through the real web app** (`countersign web --workers 1`,
  gunicorn and uvicorn, the guard's signature and shape checks, Bolt's dispatch) with a
  `block_actions` body carrying a real card (the message of a real request, as Slack sends it in a
  click) whose action no listener handles, so Bolt answers it (404) without any store or Redis work:
  the cheapest route a click can take; CPU of the web's processes (all of its session) and of this
  process sending it (signing, HTTP);
- **the Slack Web API calls a cycle makes**: `chat.postMessage` with a real pending card and
  `chat.update` with its decided card, on the router's own pooled client (`countersign.slackhttp`)
  against a sandbox without rate limits (`UNLIMITED_SANDBOX`); this process's CPU only (the client
  side; Slack's side is never counted);
- **the SQL statements' server CPU**: the PostgreSQL backends' CPU of the real cycle, measured in the
  same run (its statements as they are; their count is met, ≤ 12).

The real cycle is `pause_vs_langgraph.py`'s countersign side (the same code, the same measure: this
process, PostgreSQL backends, redis-server; the sandbox not counted), and LangGraph's cycle is its
LangGraph side. The report prints each part, the floor's sum, the real cycle, LangGraph's cycle, and
the ratios. The web's part is not in the real cycle (which calls the click's domain function, not
HTTP): the floor adds it, since a deployed cycle pays it. Timings are CPU seconds from /proc and
`time.process_time`; Redis commands (`INFO stats`) are exact. Asserts nothing.

`--profile FILE` records this process with py-spy while the real cycle runs (`--gil`: samples of
the thread holding the GIL, so Python's CPU, not its waits; 250 a second; raw collapsed stacks into
FILE) and prints where the real cycle's Python CPU goes (`GAP_PARTS`): what the floor has no part
of is the gap between the two.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slack_sdk.signature import SignatureVerifier

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import pause_vs_langgraph as pvl
from bench.common import (
    PYTHON_M,
    Child,
    bench_database,
    countersign_env,
    exit_on_sigterm,
    print_table,
    session_cpu_seconds,
    start_redis,
    wait_until,
)
from bench.noop import NOOP, NoopRouterWorker
from countersign import ApprovalClient, connections
from countersign.agent.worker import AgentWorker
from countersign.bot import payload
from countersign.ports import free_port
from countersign.router import cards, review
from countersign.router import runtime as runtime_module
from countersign.router.jobs import INTAKE_QUEUE, intake_job_id, json_queue, resume_job_id
from countersign.router.runtime import Runtime
from countersign.router.worker import RouterWorker
from countersign.sandbox.identity import API_APP_ID, TEAM_DOMAIN
from countersign.sandbox.interactivity import block_actions_payload, encode_payload

SIGNING_SECRET = "bench-floor"
UNHANDLED_ACTION = "countersign_bench_floor"  # no listener: Bolt answers 404 after the checks
UNLIMITED_SANDBOX = f"""
import sys, threading
from countersign.sandbox import Sandbox, serve
serve(Sandbox({SIGNING_SECRET!r}), port=int(sys.argv[1]))
threading.Event().wait()
"""
"""The floor's Slack: the sandbox without its rate limits (`countersign.sandbox`'s command line turns
Tier 3's 50 chat.update calls a minute on, which a few hundred calls in a row exceed: the floor
measures the calls' client CPU, not Slack's limits)."""


@dataclass
class Spent:
    """What a part cost over its measured repetitions: CPU seconds per process kind, Redis commands."""

    python: float = 0.0
    redis: float = 0.0
    web: float = 0.0
    postgres: float = 0.0
    commands: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    def cpu(self) -> float:
        """CPU seconds of every process counted."""
        return self.python + self.redis + self.web + self.postgres


@contextmanager
def spent(redis: Any, redis_pid: int, web_session: int | None = None) -> Iterator[Spent]:
    """Meter the enclosed block: this process's CPU, the redis-server's, the web's session's (when
    given), and the Redis commands processed (the `INFO` itself not counted)."""
    cost = Spent()
    commands, redis_cpu = pvl.redis_commands(redis), pvl.process_cpu(redis_pid)
    web_cpu = session_cpu_seconds(web_session) if web_session else 0.0
    cpu = time.process_time()
    yield cost
    cost.python = time.process_time() - cpu
    cost.web = session_cpu_seconds(web_session) - web_cpu if web_session else 0.0
    cost.redis = pvl.process_cpu(redis_pid) - redis_cpu
    cost.commands = max(0, pvl.redis_commands(redis) - commands - 1)


# ---- the parts ---------------------------------------------------------------------------------


def rq_jobs(runtime: Runtime, count: int, redis_pid: int) -> Spent:
    """`count` no-op intake jobs run by a burst `RouterWorker`, then `count` no-op resume jobs by a
    burst `AgentWorker` (one worker a phase, as `pause_vs_langgraph` drains its queues)."""
    redis = runtime.redis
    with spent(redis, redis_pid) as cost:
        intake = json_queue(INTAKE_QUEUE, redis)
        for _ in range(count):
            intake.enqueue(NOOP, job_id=intake_job_id(uuid.uuid4().hex), result_ttl=0)
        pvl.drain(redis, INTAKE_QUEUE, NoopRouterWorker)
        agent = json_queue(pvl.AGENT_QUEUE, redis)
        for _ in range(count):
            agent.enqueue(NOOP, job_id=resume_job_id(uuid.uuid4().hex), result_ttl=0, unique=True)
        pvl.drain(redis, pvl.AGENT_QUEUE, AgentWorker)
    left = redis.keys("rq:job:*")
    if left:
        raise SystemExit(f"{len(left)} no-op job(s) left behind: the lean success path was not taken")
    return cost


def click_body(message: dict[str, Any], channel: str) -> bytes:
    """A `block_actions` form body as Slack sends a click on `message` (a real card), for an action
    no listener handles."""
    button = {"action_id": UNHANDLED_ACTION, "text": {"type": "plain_text", "text": "Approve"}, "value": "x"}
    body = block_actions_payload(
        team={"id": "T0SANDBOX", "domain": TEAM_DOMAIN},
        user={"id": pvl.APPROVER["id"], "username": "lee.lead", "name": "lee.lead", "team_id": "T0SANDBOX"},
        message=message,
        channel_id=channel,
        block_id="decision",
        button=button,
        response_url="http://127.0.0.1:9/_sandbox/response/floor",
    )
    assert body["api_app_id"] == API_APP_ID
    return encode_payload(body)


def web_posts(port: int, body: bytes, count: int) -> list[int]:
    """POST `body` signed to the web `count` times, one connection each (as each Slack delivery is);
    returns the statuses."""
    verifier = SignatureVerifier(SIGNING_SECRET)
    statuses = []
    for _ in range(count):
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": verifier.generate_signature(timestamp=timestamp, body=body),
        }
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("POST", "/slack/events", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
        finally:
            connection.close()
    return statuses


def slack_calls(runtime: Runtime, channel: str, pending: cards.Card, decided: cards.Card, count: int) -> None:
    """`count` x (chat.postMessage of the pending card, chat.update of it to the decided card)."""
    for _ in range(count):
        posted = runtime.slack.chat_postMessage(channel=channel, **pending.message())
        runtime.slack.chat_update(channel=channel, ts=posted["ts"], **decided.message())


def real_cards(runtime: Runtime) -> tuple[str, dict[str, Any], cards.Card, cards.Card]:
    """One real request through intake, the click and the resume job: its channel, its card as Slack
    keeps it (for a click's `message`), and its pending and decided cards."""
    client = ApprovalClient(runtime.redis, runtime.store)
    request_id = client.request(
        {**pvl.REQUEST, "action": "issue_refund_0", "run_id": "floor", "step": "refund"},
        resume={"queue": pvl.AGENT_QUEUE, "func": pvl.RESUME_FUNC},
    )
    pvl.drain(runtime.redis, INTAKE_QUEUE, RouterWorker)
    row = runtime.store.get(request_id)
    assert row is not None and row.card_ts is not None, "the card was not posted"
    channel, ts = row.channel, row.card_ts
    pending = cards.request_card(row)
    approval = payload.click(pvl.click(row.id, channel))
    review.approve(runtime, runtime.slack, approval.request_id, approval.user, approval.channel)
    pvl.drain(runtime.redis, pvl.AGENT_QUEUE, AgentWorker)
    decided_row = runtime.store.get(request_id)
    assert decided_row is not None and decided_row.execution == "executed"
    history = runtime.slack.conversations_history(channel=channel, latest=ts, inclusive=True, limit=1)
    message = dict(history["messages"][0])
    return channel, message, pending, cards.decided_card(decided_row)


def floor_side(args: argparse.Namespace, tmp: Path) -> dict[str, Spent]:
    """The floor's parts on a stack of their own: a private redis-server, the sandbox, a scratch
    database, `countersign web --workers 1`."""
    tmp.mkdir()
    redis_server, redis_url = start_redis(tmp)
    slack_port, web_port = free_port(), free_port()
    sandbox = Child(
        "sandbox",
        [sys.executable, "-c", UNLIMITED_SANDBOX, str(slack_port)],
        dict(os.environ),
        tmp / "sandbox.log",
    )
    sandbox.start()
    web: Child | None = None
    try:
        wait_until(lambda: pvl._answers(f"http://127.0.0.1:{slack_port}/api/auth.test"), 20, "no sandbox")
        with bench_database(args.database_url, tmp) as database_url:
            env = countersign_env(
                tmp, pvl.policy(1), redis_url, database_url, f"http://127.0.0.1:{slack_port}/api/"
            ) | {"SLACK_SIGNING_SECRET": SIGNING_SECRET, "PORT": str(web_port)}
            os.environ.update(env)
            runtime_module.current.cache_clear()
            connections.current.cache_clear()
            runtime = runtime_module.current()
            web = Child(
                "web",
                [*PYTHON_M, "countersign.cli", "web", "--host", "127.0.0.1", "--workers", "1"],
                env,
                tmp / "web.log",
            )
            web.start()
            wait_until(lambda: _healthy(web_port), 60, "countersign web did not start")
            assert redis_server.process is not None and web.process is not None
            redis_pid, web_session = redis_server.process.pid, web.process.pid
            channel, message, pending, decided = real_cards(runtime)
            body = click_body(message, channel)
            parts: dict[str, Spent] = {}
            rq_jobs(runtime, args.warmup, redis_pid)
            parts["rq"] = rq_jobs(runtime, args.runs, redis_pid)
            web_posts(web_port, body, args.warmup)
            with spent(runtime.redis, redis_pid, web_session) as cost:
                statuses = web_posts(web_port, body, args.runs)
            if set(statuses) != {404}:
                raise SystemExit(f"the web answered {sorted(set(statuses))}, not 404 (unhandled): see {tmp}")
            parts["web"] = cost
            slack_calls(runtime, channel, pending, decided, args.warmup)
            with spent(runtime.redis, redis_pid) as cost:
                slack_calls(runtime, channel, pending, decided, args.runs)
            parts["slack"] = cost
            runtime.store.engine.dispose()
            return parts
    finally:
        if web is not None:
            web.kill()
        sandbox.kill()
        redis_server.kill()


def _healthy(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False


# ---- the gap: where the real cycle's Python CPU goes --------------------------------------------

GAP_PARTS = (
    ("SQLAlchemy above the driver (ORM state, statements' cache keys and compiling, rows)", ("sqlalchemy/",)),
    ("psycopg: send the statement, wait for and read its rows", ("psycopg/",)),
    ("Redis client (redis-py: commands, pipelines, scripts)", ("redis/",)),
    ("Slack Web API client (slack_sdk, urllib3)", ("slack_sdk/", "urllib3/")),
    ("RQ's worker and job Python (its Redis I/O is redis-py's)", ("rq/",)),
    ("countersign's own Python (rendering, policy, store and job logic)", ("countersign/",)),
)
"""A sample's part: that of its leaf-most frame from one of these packages (a frame's text is
`function (path:line)`, paths shortened by py-spy to the package), so the standard library's frames
count for the package that called them; none: the bench's own loop."""


def _part(frames: list[str]) -> str:
    for frame in reversed(frames):
        path = frame.rpartition(" (")[2]
        for name, packages in GAP_PARTS:
            if path.startswith(packages):
                return name
    return "the bench's loop"


@contextmanager
def py_spy_gil(output: Path | None) -> Iterator[None]:
    """With `output`, record this process with py-spy (`--gil`, 250 a second, raw) for the enclosed
    block into `output`."""
    if output is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    argv = [str(spy), "record", "--pid", str(os.getpid()), "--gil", "--rate", "250", "--format", "raw"]
    process = subprocess.Popen(
        [*argv, "--output", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(1)  # attached
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)


def gap_parts(raw: Path, within: str = "countersign_runs (") -> list[tuple[str, object]]:
    """The share (%) of each of `GAP_PARTS` in the samples of a py-spy raw file whose stack passes
    through `within` (the real cycle's measured and warm-up runs)."""
    total, parts = 0, Counter[str]()
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if within not in stack:
            continue
        total += int(samples)
        parts[_part(stack.split(";"))] += int(samples)
    return [(name, f"{100 * n / max(total, 1):.1f}") for name, n in parts.most_common()] + [
        ("samples", total)
    ]


# ---- report ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=200, help="measured repetitions of each part (default 200)"
    )
    parser.add_argument("--warmup", type=int, default=20, help="repetitions not measured, first (default 20)")
    parser.add_argument(
        "--classes",
        type=int,
        default=0,
        help="the real cycle's action classes (pause_vs_langgraph's --classes)",
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy (--gil) of the real cycle into this raw file; print its parts"
    )
    parser.add_argument(
        "--database-url", required=True, help="the PostgreSQL server to create scratch databases on"
    )
    args = parser.parse_args()
    cycle_args = argparse.Namespace(
        **{k: v for k, v in vars(args).items() if k != "profile"},
        profile=None,
        redis_profile=False,
        redis_keys=False,
        sql_profile=False,
    )
    exit_on_sigterm()
    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-floor-"))
    (tmp / "langgraph").mkdir()
    with py_spy_gil(args.profile), pvl.countersign_side(cycle_args, tmp) as countersign:
        real = countersign(args.runs)
    floor = floor_side(args, tmp / "floor")
    with pvl.langgraph_side(cycle_args, tmp) as langgraph_run:
        langgraph = langgraph_run(args.runs)
    report(args.runs, real, floor, langgraph)
    if args.profile:
        print()
        print_table(
            gap_parts(args.profile), header=("real cycle's Python CPU (py-spy --gil)", "% of samples")
        )
    return 0


def report(runs: int, real: pvl.Side, floor: dict[str, Spent], langgraph: pvl.Side) -> None:
    """Print the parts per cycle (ms of CPU, Redis commands), the floor's sum and the ratios."""

    def ms(seconds: float) -> float:
        return seconds * 1000 / runs

    real_cycle = real.pause + real.resume
    lg_cpu = ms(langgraph.cpu())
    sql_cpu = ms(real_cycle.postgres)
    rq, web, slack = floor["rq"], floor["web"], floor["slack"]
    rows: list[tuple[str, tuple[Any, ...]]] = [
        ("two no-op RQ jobs, enqueue to finish", (ms(rq.python), ms(rq.redis), 0.0, 0.0, rq.commands / runs)),
        (
            "signed click POST, web app, no store work",
            (ms(web.python), ms(web.redis), ms(web.web), 0.0, web.commands / runs),
        ),
        ("chat.postMessage + chat.update, client", (ms(slack.python), 0.0, 0.0, 0.0, slack.commands / runs)),
        ("the real cycle's SQL, server CPU", (0.0, 0.0, 0.0, sql_cpu, 0.0)),
    ]
    total = tuple(sum(row[1][n] for row in rows) for n in range(5))
    floor_cpu = sum(total[:4])
    real_cpu = ms(real.cpu())
    print_table(
        [(name, _cells((*values, sum(values[:4])))) for name, values in rows]
        + [
            ("floor: sum of the parts", _cells((*total, floor_cpu))),
            (
                "real cycle (pause_vs_langgraph), no HTTP",
                _cells(
                    (
                        ms(real_cycle.python),
                        ms(real_cycle.redis),
                        0.0,
                        sql_cpu,
                        real_cycle.commands / runs,
                        real_cpu,
                    )
                ),
            ),
            (
                "LangGraph interrupt() + PostgresSaver cycle",
                _cells(
                    (
                        ms((langgraph.pause + langgraph.resume).python),
                        0.0,
                        0.0,
                        ms((langgraph.pause + langgraph.resume).postgres),
                        0.0,
                        lg_cpu,
                    )
                ),
            ),
        ],
        header=(
            "per cycle",
            _cells(("Python ms", "Redis ms", "web ms", "PG ms", "Redis cmds", "all CPU ms")),
        ),
    )
    print()
    web_cpu = ms(web.cpu())
    print_table(
        [
            ("2 x LangGraph's cycle: the CPU target (ms)", f"{2 * lg_cpu:.2f}"),
            ("floor / LangGraph", f"{floor_cpu / lg_cpu:.2f} x"),
            ("floor without the click's HTTP / LangGraph", f"{(floor_cpu - web_cpu) / lg_cpu:.2f} x"),
            ("real cycle (no HTTP, as pause_vs_langgraph) / LangGraph", f"{real_cpu / lg_cpu:.2f} x"),
            ("real cycle + the click's HTTP / LangGraph", f"{(real_cpu + web_cpu) / lg_cpu:.2f} x"),
            ("real cycle - floor without the click's HTTP (ms)", f"{real_cpu - floor_cpu + web_cpu:.2f}"),
            ("Redis commands: floor / real cycle", f"{total[4]:.1f} / {real_cycle.commands / runs:.1f}"),
        ],
        header=("verdict (all CPU per cycle)", "value"),
    )


def _cells(values: tuple[Any, ...]) -> str:
    return "  ".join(f"{v:>10.2f}" if isinstance(v, float) else f"{v:>10}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
