"""The router worker as a real process: it survives its own SIGKILL without leaving anything behind
that could take the next job (a forked child holding the dead worker's blocked Redis command), its
sweep says on the card when no agent worker takes a resume job, and a sweep that does not end on
SIGTERM does not hold the worker's stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis
from rq import Worker
from rq.scheduler import SCHEDULER_LOCKING_KEY_TEMPLATE
from sqlalchemy import func, insert, select, update

from countersign.agent import ApprovalClient
from countersign.router import relay, timeouts
from countersign.router.jobs import INTAKE_QUEUE, json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import ApprovalRequest, AuditEvent, OutboxEvent
from countersign.store.models import utcnow_plus
from tests.helpers import alive, children, countersign, settled, stop, wait_for
from tests.helpers.builders import decided_card, edited_card, new_request, refund

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_a_killed_worker_leaves_nothing_that_steals_the_next_job(
    env: dict[str, str], redis: Redis, client: ApprovalClient, sandbox: tuple[Sandbox, str]
) -> None:
    """Checked by waits, each failing the test when it times out: once the worker is SIGKILLed its
    child processes exit, and a new worker then posts the card of a request made while none ran (a
    leftover child still blocked on the dead worker's Redis command would take that job and lose
    it)."""
    first = countersign(env, "worker")
    try:
        wait_for(lambda: Worker.all(connection=redis), timeout=30, what="the worker to register")
        helpers = wait_for(lambda: children(first.pid), what="the sweep process")
        first.send_signal(signal.SIGKILL)
        first.wait()
        wait_for(lambda: not any(alive(pid) for pid in helpers), what="the worker's children to exit")

        request_id = client.request(refund(run_id="while-down"))
        second = countersign(env, "worker")
        try:
            wait_for(
                lambda: [m for m in sandbox[0].messages() if request_id in str(m["blocks"])],
                timeout=20,
                what="the new worker to post the card",
            )
        finally:
            second.terminate()
            second.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_the_worker_follows_policy_changes_and_keeps_the_last_good_one(
    env: dict[str, str],
    redis: Redis,
    client: ApprovalClient,
    sandbox: tuple[Sandbox, str],
    policy_file: Path,
    tmp_path: Path,
) -> None:
    sb, _ = sandbox
    log = tmp_path / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "countersign.cli", "worker"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches pytest alone; `finally` stops it
        )
    try:

        def card_in(channel: str, request_id: str) -> bool:
            return any(request_id in str(m["blocks"]) for m in sb.messages(channel))

        first = client.request(refund(run_id="1"))
        wait_for(lambda: card_in("C0FINANCE", first), timeout=20, what="the first card")
        policy_file.write_text(policy_file.read_text().replace("channel: C0FINANCE", "chanel: C0FINANCE"))
        settled(policy_file)
        second = client.request(refund(run_id="2"))
        wait_for(lambda: card_in("C0FINANCE", second), timeout=20, what="a card under the last good policy")
        assert "POLICY NOT RELOADED, version 3 stays in force" in log.read_text()
        policy_file.write_text(policy_file.read_text().replace("chanel: C0FINANCE", "channel: C0NEWFIN"))
        settled(policy_file)
        third = client.request(refund(run_id="3"))
        wait_for(lambda: card_in("C0NEWFIN", third), timeout=20, what="a card under the fixed policy")
        logged = log.read_text()
        for secret in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "COUNTERSIGN_SECRET"):
            assert env[secret] not in logged  # secrets never reach the logs
    finally:
        stop(worker)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_the_worker_says_on_the_card_when_no_agent_worker_takes_a_resume_job(
    env: dict[str, str],
    redis: Redis,
    client: ApprovalClient,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """The sweep looks for untaken resume jobs at start and then every 30 s, with the wait set by
    `COUNTERSIGN_RESUME_WAIT_SECONDS`; here the job was published 2 minutes before the worker starts."""
    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb)
    relay.sweep(runtime.store, redis)
    with runtime.store.engine.begin() as connection:  # as if published 2 minutes ago
        connection.execute(update(OutboxEvent).values(published_at=utcnow_plus(-120)))
    worker = countersign({**env, "COUNTERSIGN_RESUME_WAIT_SECONDS": "60"}, "worker")
    try:
        rewritten = wait_for(lambda: edited_card(sb, card["ts"]), timeout=30, what="the card rewritten")
    finally:
        stop(worker)
    assert "⚠ The agent has not run it: no worker has taken its resume job from queue `test-agent`" in str(
        rewritten["blocks"]
    )
    assert client.get(request_id).resume["problem"]["waited_seconds"] == 60  # type: ignore[index]


def _sweep(worker: int) -> int | None:
    """The process id of `worker`'s sweep (its spawned child; the other is multiprocessing's resource
    tracker), once it runs."""
    for pid in children(worker):
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    return None


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_a_sweep_that_does_not_end_on_sigterm_does_not_hold_the_workers_stop(
    env: dict[str, str], redis: Redis
) -> None:
    """The worker SIGTERMs its sweep as it stops, and multiprocessing joined it at exit without a
    bound: a sweep that SIGTERM cannot reach (here: stopped with SIGSTOP; in life, a wait in a C call)
    held the worker's stop for as long as it lasted. It is killed after `workers.CHILD_STOP_SECONDS`."""
    worker = countersign(env, "worker")
    sweep = None
    try:
        wait_for(lambda: Worker.all(connection=redis), timeout=60, what="the worker to register")
        sweep = wait_for(lambda: _sweep(worker.pid), timeout=30, what="the sweep process")
        os.kill(sweep, signal.SIGSTOP)
        stop(worker)  # TimeoutExpired: the worker waits for its sweep
        wait_for(lambda: not alive(sweep), what="the sweep to be gone")
    finally:
        if worker.poll() is None:
            worker.kill()
        if sweep is not None and alive(sweep):
            os.kill(sweep, signal.SIGKILL)


BACKLOG = 5000


def test_a_worker_whose_sweep_drains_a_backlog_stops_promptly_and_loses_nothing(
    env: dict[str, str], redis: Redis, runtime: Runtime
) -> None:
    """SIGTERM while the sweep expires a backlog (batches of 500): the worker and its sweep stop (the
    sweep by its own exit, which releases RQ's scheduler lock, not killed), and what the stop cut
    short is finished by the next sweep: every request expired once, with one resume event, one
    `expired` audit event and one resume job."""
    store = runtime.store
    template = new_request(store)
    with store.engine.begin() as connection:
        row = connection.execute(select(ApprovalRequest.__table__).where(ApprovalRequest.id == template.id))
        values = dict(row.mappings().one())
        copies = [{**values, "id": f"B{n:025d}", "idempotency_key": f"backlog-{n}"} for n in range(BACKLOG)]
        connection.execute(insert(ApprovalRequest.__table__), copies)
        connection.execute(update(ApprovalRequest).values(expires_at=utcnow_plus(-1)))

    def count(*where: object) -> int:
        with store.engine.connect() as connection:
            return int(connection.execute(select(func.count()).where(*where)).scalar_one())

    worker = countersign(env, "worker")
    try:
        wait_for(lambda: count(ApprovalRequest.status == "expired"), timeout=60, what="the sweep to expire")
        stop(worker)  # TimeoutExpired: the stop waited for the backlog
    finally:
        if worker.poll() is None:
            worker.kill()
    assert redis.get(SCHEDULER_LOCKING_KEY_TEMPLATE % INTAKE_QUEUE) is None  # the sweep ended on SIGTERM

    while timeouts.sweep(runtime, rewrites=0) or relay.sweep(store, redis):  # the next sweep's work
        pass
    total = BACKLOG + 1
    assert count(ApprovalRequest.status == "expired") == total
    assert count(OutboxEvent.published_at.is_not(None)) == count(OutboxEvent.id.is_not(None)) == total
    assert count(AuditEvent.event == "expired") == total
    assert json_queue(template.resume_queue, redis).count == total


@pytest.mark.parametrize(
    "database_url", ["sqlite"], indirect=True
)  # process behaviour; SQL: test_reload_history
def test_a_worker_restarted_on_an_older_shorter_policy_says_so_and_starts(
    env: dict[str, str], redis: Redis, sandbox: tuple[Sandbox, str], policy_file: Path
) -> None:
    """Trial finding: restarted on a file a live reload had refused (an older version, without an
    action class of the one in force), the worker said only "policy … version 1 loaded"."""

    def start() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "countersign.cli", "worker", "--burst"],
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout + done.stderr

    first = start()
    assert f"policy {policy_file} version 3 loaded" in first and "POLICY" not in first, first
    policy_file.write_text(
        policy_file.read_text().replace("version: 3", "version: 2").split("  send_email")[0]
    )
    second = start()
    assert "POLICY DROPS ACTION CLASSES AT START" in second, second
    assert "does not name send_email of version 3" in second
    assert (
        f"POLICY VERSION GOES BACK: {policy_file} says version 2, below version 3 in force before" in second
    )
    assert f"policy {policy_file} version 2 loaded" in second
