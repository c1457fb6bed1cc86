"""`countersign agent-worker`: the agent's RQ worker runs its resume jobs with the JSON serializer,
runs a retried job again (its scheduler moves it back onto the queue), says on the card when a resume
job failed before the agent recorded anything, and ends a job whose execution was refused in one log
line, without a retry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis
from rq import Retry
from rq.serializers import JSONSerializer

from countersign.agent import ApprovalClient
from countersign.agent.worker import AgentWorker
from countersign.router import relay
from countersign.router.jobs import json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import NotExecutable, Store
from tests.helpers import agent, anyone, countersign, drain, stop, wait_for
from tests.helpers.builders import decided_card, edited_card, new_request

ROOT = Path(__file__).parent.parent.parent
QUEUE = "test-agent-retries"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_a_resume_job_that_failed_once_runs_again_and_succeeds(env: dict[str, str], redis: Redis) -> None:
    worker = countersign(env, "agent-worker", QUEUE)
    try:
        job = json_queue(QUEUE, redis).enqueue(agent.FLAKY_FUNC, "once", retry=Retry(max=1, interval=1))
        wait_for(lambda: job.get_status(refresh=True) == "finished", timeout=60, what="the retried job")
        assert redis.get("test-agent:flaky:once") == b"2"  # failed once, then ran again from the schedule
    finally:
        worker.terminate()
        worker.wait(timeout=20)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_wrong_resume_func_is_on_the_card_and_in_show_not_only_in_the_workers_log(
    env: dict[str, str],
    redis: Redis,
    client: ApprovalClient,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """Issue 13, finding 3: `--resume-func examples.refund_agent.resum` is accepted (the requester
    cannot know what the agent's worker can import); once approved, the real agent worker's first
    try says so on the card and in `countersign show`."""
    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb, func="examples.refund_agent.resum")
    relay.sweep(runtime.store, redis)
    worker = countersign(env, "agent-worker", agent.QUEUE)
    try:
        problem = wait_for(lambda: client.get(request_id).resume["problem"], timeout=60, what="the failure")  # type: ignore[index]
    finally:
        worker.terminate()
        worker.wait(timeout=20)
    assert problem == {
        "event": "resume_failed",
        "error": "ValueError: Invalid attribute name: resum",
        "retries_left": 3,
    }
    drain(redis)  # the router worker rewrites the card
    blocks = str(edited_card(sb, card["ts"])["blocks"])  # type: ignore[index]
    assert "⚠ The agent has not run it: its resume job `examples.refund_agent.resum` failed" in blocks
    assert _shown_problem(request_id, env) == problem


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_a_job_whose_execution_is_refused_ends_in_one_log_line_without_a_retry(
    env: dict[str, str], redis: Redis, store: Store, runtime: Runtime
) -> None:
    """A resume job calling `execute_approved` itself raises `ExecutionRefused` (here the grant has
    expired): the worker logs one line, no traceback, and schedules no retry, which would be refused
    (and audited) again."""
    row = new_request(store)
    decided = store.decide(
        row.id, "approved", [{"slack_user_id": "U0LEAD", "name": "lee"}], via="slack",
        resume=runtime.resume_event, grant_ttl=0, refuse=anyone,
    )  # fmt: skip
    decision = decided.event.body  # type: ignore[union-attr]
    job = json_queue(QUEUE, redis).enqueue(
        agent.EXECUTE_DIRECTLY_FUNC, decision, retry=Retry(max=2, interval=1)
    )
    worker = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "agent-worker", "--burst", QUEUE],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == 0, worker.stderr
    output = worker.stdout + worker.stderr
    refusals = [line for line in output.splitlines() if "execution refused (grant_expired)" in line]
    assert len(refusals) == 1 and "Traceback" not in output, output
    assert job.get_status(refresh=True) == "failed"
    assert job.id not in json_queue(QUEUE, redis).scheduled_job_registry  # no retry
    refused = [e.detail["why"] for e in store.audit_trail(row.id) if e.event == "execution_refused"]
    assert refused == ["grant_expired"] and agent.executed(redis) == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_an_action_that_raised_is_its_failed_outcome_and_its_job_is_not_retried(
    env: dict[str, str], redis: Redis, store: Store, runtime: Runtime
) -> None:
    """A resume job whose approved action raised after its claim (`approved_action`, a charge the
    bank declined) has its `failed` outcome; RQ does not run it again, though the job has retries
    left (a retry would only be refused, and audited as if something had stopped the action)."""
    row = new_request(store)
    decided = store.decide(
        row.id, "approved", [{"slack_user_id": "U0LEAD", "name": "lee"}], via="slack",
        resume=runtime.resume_event, grant_ttl=600, refuse=anyone,
    )  # fmt: skip
    job = json_queue(QUEUE, redis).enqueue(
        agent.FAILING_FUNC,
        decided.event.body,
        retry=Retry(max=2, interval=1),  # type: ignore[union-attr]
    )
    worker = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "agent-worker", "--burst", QUEUE],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == 0, worker.stderr
    assert job.get_status(refresh=True) == "failed"
    assert job.id not in json_queue(QUEUE, redis).scheduled_job_registry  # no retry
    trail = [(e.event, e.detail) for e in store.audit_trail(row.id)]
    assert trail[-2:] == [("execution_started", {}), ("failed", {"detail": "RuntimeError: card declined"})]
    assert store.claim_execution(row.id, "agent") == NotExecutable("already_failed")  # not "executed"


def test_the_agent_worker_needs_the_secret_its_jobs_verify_grants_with(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "agent-worker", QUEUE],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
        cwd=tmp_path,  # no `.run/.env` here to set it
    )
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "countersign: error: COUNTERSIGN_SECRET is not set; `countersign agent-worker` (execute_approved) "
        "needs it",
    )


def test_the_agent_worker_refuses_countersigns_own_queue(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "agent-worker", "--burst", QUEUE, "countersign"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "COUNTERSIGN_SECRET": "s" * 64},
        cwd=tmp_path,
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "countersign: error: countersign is countersign's own queue, which only `countersign worker` takes; "
        "name your agent's resume queue\n",
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_the_agent_worker_runs_its_jobs_in_its_own_process_with_the_agents_modules_loaded_once(
    env: dict[str, str], redis: Redis
) -> None:
    """Issue 14: a fork per job imported the job's module and connected again for every job (a few
    jobs a second); the worker now runs them in its own process, one import for all."""
    queue = json_queue(QUEUE, redis)
    jobs = [queue.enqueue(agent.PROCESS_FUNC, n) for n in range(3)]
    worker = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "agent-worker", "--burst", QUEUE],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == 0, worker.stderr
    results = [job.return_value(refresh=True) for job in jobs]
    pids = {pid for pid, _ in results}
    assert len(pids) == 1 and os.getpid() not in pids
    assert [runs for _, runs in results] == [1, 2, 3]


def test_a_running_job_keeps_its_heartbeat_so_a_killed_worker_is_found_as_a_forking_ones_is(
    redis: Redis,
) -> None:
    """Without a work-horse to watch, RQ's `SimpleWorker` gives a job its whole timeout plus 60 s
    before RQ may call it abandoned (660 s for a resume job); the agent's worker gives it its
    monitoring interval plus 60 s, as RQ's forking worker does, and renews it while the job runs."""
    job = json_queue(QUEUE, redis).enqueue(agent.OUTLIVE_HEARTBEAT_FUNC, job_timeout=600)
    worker = AgentWorker(
        [json_queue(QUEUE, redis)], connection=redis, serializer=JSONSerializer, job_monitoring_interval=1
    )
    worker.work(burst=True)
    given, renewed = job.return_value(refresh=True)
    assert 59 <= given <= 61.5  # min(600 s timeout, 1 s interval) + 60 s
    assert 59 <= renewed <= 61.5  # renewed while the job ran, not left to run out


def _scheduler(redis: Redis) -> tuple[str, int] | None:
    """The name and process id of the scheduler holding `QUEUE`'s scheduler lock, if one does."""
    name = redis.get(f"rq:scheduler-lock:{QUEUE}")
    pid = name and redis.hget(f"rq:scheduler:{name.decode()}", "pid")
    return (name.decode(), int(pid)) if name and pid and int(pid) else None


def _gone(pid: int) -> bool:
    """Process `pid` has ended (or is a zombie its new parent has not reaped yet): Linux's /proc."""
    status = Path(f"/proc/{pid}/status")
    try:
        return "\nState:\tZ" in status.read_text()
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_the_scheduler_of_a_killed_agent_worker_ends_with_it_and_the_next_worker_schedules(
    env: dict[str, str], redis: Redis
) -> None:
    """RQ forks the agent worker's scheduler into a child process; after a SIGKILL of the worker the
    child lived on, holding the scheduler's lock, and the worker started in its place had no
    scheduler (no timed retries). The child now stops within its 1 s interval of its worker's death,
    releasing the lock, which the next worker takes as it starts."""
    first = countersign(env, "agent-worker", QUEUE)
    second = None
    try:
        name, child = wait_for(lambda: _scheduler(redis), timeout=60, what="the worker's scheduler")
        assert child != first.pid
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=20)
        wait_for(lambda: _gone(child), timeout=15, what="the scheduler to end with its worker")
        assert redis.get(f"rq:scheduler-lock:{QUEUE}") is None  # released, not left to run out
        second = countersign(env, "agent-worker", QUEUE)
        taken = wait_for(lambda: _scheduler(redis), timeout=60, what="the next worker's scheduler")
        assert taken[0] != name and not _gone(taken[1])
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                stop(worker)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_a_scheduler_that_does_not_end_on_sigterm_does_not_hold_the_workers_stop(
    env: dict[str, str], redis: Redis
) -> None:
    """RQ stops the worker's scheduler process with a SIGTERM and a wait without a bound: a scheduler
    SIGTERM cannot reach (here: stopped with SIGSTOP) held the worker's stop for good. It is killed
    after `workers.CHILD_STOP_SECONDS`."""
    worker = countersign(env, "agent-worker", QUEUE)
    child = None
    try:
        _, child = wait_for(lambda: _scheduler(redis), timeout=60, what="the worker's scheduler")
        os.kill(child, signal.SIGSTOP)
        stop(worker)  # TimeoutExpired: the worker waits for its scheduler
        assert _gone(child)
    finally:
        if worker.poll() is None:
            worker.kill()
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_an_action_whose_worker_was_killed_in_it_is_shown_as_of_unknown_outcome_not_as_executed(
    env: dict[str, str],
    redis: Redis,
    client: ApprovalClient,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """The agent's worker is SIGKILLed inside the approved action, after `execute_approved` claimed
    the run and before its outcome. The decision coming again (here: delivered again to a worker)
    does not run it again, and is not reported as `already_executed`: the card, `countersign show`
    and the API say the run started and never reported an outcome, so someone must check."""
    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb, func=agent.HANG_APPROVED_FUNC)
    relay.sweep(runtime.store, redis)
    worker = countersign(env, "agent-worker", agent.QUEUE)
    try:
        wait_for(lambda: redis.get(agent.HANGING_KEY), timeout=60, what="the action to start")
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=20)
    redis.delete(agent.HANGING_KEY)
    event = runtime.store.outbox_event(request_id)
    assert event is not None
    json_queue(agent.QUEUE, redis).enqueue(agent.HANG_APPROVED_FUNC, event.body)
    again = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "agent-worker", "--burst", agent.QUEUE],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert redis.get(agent.HANGING_KEY) is None  # not run again
    said = again.stdout + again.stderr
    assert "the action started and its outcome is unknown; not run again" in said, said
    assert "nothing ran" not in said
    stored = runtime.store.get(request_id)
    assert stored is not None and stored.execution == "started"
    started_at = client.get(request_id).resume["problem"]["started_at"]  # type: ignore[index]
    problem = {"event": "outcome_unknown", "started_at": started_at}
    assert client.get(request_id).resume["problem"] == problem  # type: ignore[index]
    refusals = [e.detail for e in runtime.store.audit_trail(request_id) if e.event == "execution_refused"]
    assert refusals == [{"why": "outcome_unknown", "started_at": started_at}]
    drain(redis)  # the router worker rewrites the card
    blocks = str(edited_card(sb, card["ts"])["blocks"])  # type: ignore[index]
    assert "⚠ Outcome unknown: execution started at" in blocks and "check whether it happened" in blocks
    assert _shown_problem(request_id, env) == problem


def _shown_problem(request_id: str, env: dict[str, str]) -> object:
    """The resume problem `countersign show ID` prints for `request_id` (exit status 0 asserted)."""
    shown = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "show", request_id],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["resume"]["problem"]
