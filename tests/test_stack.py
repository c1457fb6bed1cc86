"""`countersign run` as a new user runs it: real processes (its own redis-server, sandbox, gunicorn
web, router worker, the example agent's RQ worker), a request from a second terminal (which finds
the stack through `.run/.env`), an Edit of the amount through the sandbox page's endpoints, the
example agent executing the edited payload once, and a restart that runs nothing again."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, Worker
from rq.scheduler import SCHEDULER_LOCKING_KEY_TEMPLATE

from countersign import stack
from countersign.ports import free_port
from countersign.router.jobs import INTAKE_QUEUE, resumed_key
from tests.helpers import README_REQUEST, children, wait_for
from tests.helpers.stack import (
    http_json,
    remember_sandbox_port,
    run_env,
    second_terminal,
    stack_env,
    start_stack,
    stop_stack,
)

OWN_LINE = re.compile(
    r"countersign run: "  # the launcher's own lines
    r"|\S+ \S+ countersign\.[\w.]+ INFO "  # countersign's INFO log lines
    r"|.* (WARNING|ERROR) "  # anyone's warnings and errors
    r"|REFUND "  # the example agent's outcome lines
)
"""What `make run`'s terminal may show: no RQ or gunicorn line per job or click (README, "Try it in
five minutes")."""


def test_make_run_stack_end_to_end(tmp_path: Path) -> None:
    env = stack_env(tmp_path)
    with socket.socket() as taken:  # the last run's sandbox port, now used by something else
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        last = taken.getsockname()[1]
        remember_sandbox_port(tmp_path, last)
        process, output, page = start_stack(tmp_path, env)
    port = int(page.rsplit(":", 1)[1])
    assert output.find(
        f"countersign run: port {last}, the sandbox's port, is in use; the sandbox is on "
        f"{port} this time, and later runs keep {port} while it is free"
    )
    assert (tmp_path / ".run/sandbox-port").read_text() == f"{port}\n"
    try:
        lines = output.lines
        starting = lines.index("countersign run: starting web, worker and agent worker…\n")
        assert starting < lines.index(next(line for line in lines if "open the Slack sandbox at" in line))
        assert _healthy(int(env["PORT"]))  # at once: the sandbox's line means web takes clicks already
        request = second_terminal(tmp_path, *README_REQUEST)  # it reads .run/.env
        request_id = request.stdout.strip()
        assert request.stderr == (
            f"countersign request: sent to Redis at {env['REDIS_URL']} (from .run/.env), "
            f"database at {env['DATABASE_URL']} (from .run/.env)\n"
        )
        card = wait_for(
            lambda: http_json(f"{page}/_sandbox/messages?channel=C0FINANCE"), timeout=30, what="card"
        )[0]
        assert request_id in json.dumps(card["blocks"])
        _second_terminal_sees_the_policy(tmp_path, env["COUNTERSIGN_POLICY"])
        _a_second_worker_reaches_the_sandbox(tmp_path, page)
        with urllib.request.urlopen(page + "/", timeout=10) as response:
            assert response.status == 200 and b"<html" in response.read().lower()

        pressed = http_json(
            f"{page}/_sandbox/click",
            {"channel": "C0FINANCE", "ts": card["ts"], "action_id": "countersign_edit", "user": "U0LEAD"},
        )
        assert pressed["status"] == 200, pressed
        form = wait_for(lambda: _edit_form(page), timeout=30, what="the Edit modal")
        submitted = http_json(
            f"{page}/_sandbox/submit",
            {"view_id": form["id"], "user": "U0LEAD", "values": {"edit-amount": "100.5"}},
        )
        assert submitted["status"] == 200, submitted
        executed = wait_for(lambda: output.find("REFUND EXECUTED"), timeout=30, what="the agent to resume")
        assert json.loads(executed.split("REFUND EXECUTED: ", 1)[1]) == {
            "amount": "100.50",
            "currency": "USD",
        }
        done = wait_for(
            lambda: _card_says(page, "Executed ✓"), timeout=30, what="the card to show the outcome"
        )
        assert "amount 120.00 → 100.50, edited by <@U0LEAD>" in done
        assert len([line for line in output.lines if "REFUND EXECUTED" in line]) == 1
        assert [line for line in output.lines if not OWN_LINE.match(line)] == []
        assert output.find(" WARNING ") is None, output.find(" WARNING ")
    finally:
        status = stop_stack(process, output)
    assert status == 0  # a clean stop on Ctrl-C: `make run` prints no error line
    assert wait_for(lambda: not _listening(int(env["PORT"])), what="web to stop")
    text = "".join(output.lines)
    assert "Traceback" not in text  # the commands stopped before the redis-server they use
    assert "[ERROR]" not in text  # gunicorn's "Worker (pid:…) was sent SIGTERM!" at the stop
    assert "token` will be unused" not in text  # Bolt's warning at every start


def _second_terminal_sees_the_policy(cwd: Path, policy: str) -> None:
    """Trial finding: `.run/.env` lacked the policy `make run` used, so a second terminal's `request`
    sent an action class the policy does not name, and `policy suggest` asked for `--policy`."""
    assert run_env(cwd)["COUNTERSIGN_POLICY"] == policy
    unknown = [*README_REQUEST[:2], "not_in_the_policy", *README_REQUEST[3:]]
    refused = subprocess.run(
        [sys.executable, "-m", "countersign.cli", *unknown],
        cwd=cwd,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "not_in_the_policy" in refused.stderr, refused
    assert second_terminal(cwd, "policy", "suggest").returncode == 0


def _a_second_worker_reaches_the_sandbox(cwd: Path, page: str) -> None:
    """Trial finding: a second `countersign worker` from a second terminal failed "SLACK_BOT_TOKEN is
    not set": `.run/.env` now holds the sandbox's Slack settings (only when the run started it)."""
    written = run_env(cwd)
    assert (written["SLACK_BOT_TOKEN"], written["SLACK_API_URL"]) == ("xoxb-sandbox", f"{page}/api/")
    assert len(written["SLACK_SIGNING_SECRET"]) == 32
    intake = Queue(INTAKE_QUEUE, connection=Redis.from_url(written["REDIS_URL"]))
    assert Worker.count(queue=intake) == 1
    worker = subprocess.Popen(
        [sys.executable, "-m", "countersign.cli", "worker"],
        cwd=cwd,
        env={"PATH": os.environ["PATH"]},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: Worker.count(queue=intake) == 2 or worker.poll() is not None, timeout=60, what="worker"
        )
        assert worker.poll() is None, worker.stdout.read() if worker.stdout else ""
    finally:
        os.killpg(worker.pid, signal.SIGINT)
        worker.communicate(timeout=60)


def test_a_real_slack_token_is_never_written_to_run_env(tmp_path: Path, monkeypatch: Any) -> None:
    """Only the sandbox's Slack settings go to `.run/.env`: with real Slack, the second terminal's
    environment gives them."""
    monkeypatch.chdir(tmp_path)
    real = {"REDIS_URL": "redis://127.0.0.1:1/0", "SLACK_BOT_TOKEN": "xoxb-real", "SLACK_SIGNING_SECRET": "s"}
    stack._write_env_file({**real, "SLACK_API_URL": "https://slack.com/api/"}, sandbox=False)
    assert run_env(tmp_path) == {"REDIS_URL": "redis://127.0.0.1:1/0"}


def test_a_restarted_make_run_keeps_its_redis_and_runs_nothing_again(tmp_path: Path) -> None:
    """`make run`, approve, Ctrl-C, `make run` again: the private redis-server kept its data in
    `.run/redis/`, so the marker of the resume job that ran is still there and nothing is enqueued or
    run again. Then the agent worker is killed: the stack stops, saying so and what to do."""
    env = stack_env(tmp_path)
    remember_sandbox_port(tmp_path, free_port())
    process, output, page = start_stack(tmp_path, env)
    try:
        request_id = second_terminal(tmp_path, *README_REQUEST).stdout.strip()
        card = wait_for(lambda: _card(page, request_id), timeout=30, what="the card")
        pressed = http_json(
            f"{page}/_sandbox/click",
            {"channel": "C0FINANCE", "ts": card["ts"], "action_id": "countersign_approve", "user": "U0LEAD"},
        )
        assert pressed["status"] == 200, pressed
        wait_for(lambda: output.find("REFUND EXECUTED"), timeout=30, what="the agent to resume")
        wait_for(lambda: _card_says(page, "Executed ✓"), timeout=30, what="the card to show the outcome")
    finally:
        stop_stack(process, output)
    assert (tmp_path / ".run/redis/appendonlydir").is_dir()

    process, output, restarted_page = start_stack(tmp_path, env)
    assert restarted_page == page  # a sandbox page left open works again
    try:
        redis = Redis.from_url(env["REDIS_URL"])
        assert redis.exists(resumed_key(request_id))  # kept: heal finds nothing lost
        lock = SCHEDULER_LOCKING_KEY_TEMPLATE % "countersign"
        wait_for(lambda: redis.exists(lock), timeout=30, what="the sweep")
        [agent_worker] = Worker.all(queue=Queue("refund-agent", connection=redis))
        os.kill(agent_worker.pid, signal.SIGKILL)  # one process dies: the whole stack stops, saying so
        assert process.wait(timeout=60) == 1
    finally:
        stop_stack(process, output)
    assert output.find(
        "countersign run: agent worker was killed by SIGKILL; stopping the rest. "
        "Run `make run` again to start everything anew"
    )
    restarted = "".join(output.lines)
    assert "REFUND EXECUTED" not in restarted and "Traceback" not in restarted
    shown = json.loads(second_terminal(tmp_path, "show", request_id).stdout)
    trail = [event["event"] for event in shown["audit"]]
    assert trail.count("executed") == 1
    assert not {"resume_republished", "execution_refused"} & set(trail)


def test_a_killed_redis_stops_the_stack_in_a_few_lines_its_own_last(tmp_path: Path) -> None:
    """Trial finding: killing the private redis-server printed 221 lines with 9 tracebacks (RQ's
    scheduler's, printed twice; the sweep's) before the one line that says what happened. Now each
    process that stops or fails for want of Redis says so in one line, and the stack's line is last."""
    env = stack_env(tmp_path)
    remember_sandbox_port(tmp_path, free_port())
    process, output, _ = start_stack(tmp_path, env)
    try:
        redis = Redis.from_url(env["REDIS_URL"])
        for queue in ("countersign", "refund-agent"):  # the sweep's scheduler and the agent worker's
            lock = SCHEDULER_LOCKING_KEY_TEMPLATE % queue
            wait_for(lambda: redis.exists(lock), timeout=30, what=f"the scheduler of {queue}")  # noqa: B023
        before = len(output.lines)
        os.kill(int(redis.info("server")["process_id"]), signal.SIGKILL)
        assert process.wait(timeout=60) == 1
    finally:
        stop_stack(process, output)
    after = output.lines[before:]
    assert after[-1] == (
        "countersign run: stopped, as redis was killed by SIGKILL. "
        "Run `make run` again to start everything anew\n"
    )
    assert not [line for line in after if "Traceback" in line or line.startswith((" ", "\t"))], after
    assert len(after) <= 12, after  # a line or two per process, not a screenful


def _card(page: str, request_id: str) -> dict[str, Any] | None:
    cards = http_json(f"{page}/_sandbox/messages?channel=C0FINANCE")
    return next((card for card in cards if request_id in json.dumps(card["blocks"])), None)


def _edit_form(page: str) -> dict[str, Any] | None:
    views = http_json(f"{page}/_sandbox/views?user=U0LEAD")
    return next((v for v in views if "edit-amount" in json.dumps(v["view"])), None)


def _card_says(page: str, text: str) -> str | None:
    blocks = json.dumps(
        http_json(f"{page}/_sandbox/messages?channel=C0FINANCE")[0]["blocks"], ensure_ascii=False
    )
    return blocks if text in blocks else None


def _healthy(port: int) -> bool:
    try:
        return bool(http_json(f"http://127.0.0.1:{port}/healthz")["ok"])
    except OSError:
        return False


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_make_run_without_redis_url_uses_a_private_redis_never_the_machines(tmp_path: Path) -> None:
    """With `REDIS_URL` unset, `make run` does not use whatever listens on Redis's default port (a
    machine's Redis may hold another stack's idempotency keys and job ids, so a request there can
    get another stack's id and its resume job be taken for done): it starts a private redis-server
    on a Unix socket in `.run/redis/`, which the second terminal finds through `.run/.env`."""
    env = {name: value for name, value in stack_env(tmp_path).items() if name != "REDIS_URL"}
    remember_sandbox_port(tmp_path, free_port())
    process, output, page = start_stack(tmp_path, env)
    try:
        socket = (tmp_path / ".run/redis/redis.sock").resolve()
        assert run_env(tmp_path)["REDIS_URL"] == f"unix://{socket}"
        assert output.find(f"started a private redis-server at unix://{socket}")
        request_id = second_terminal(tmp_path, *README_REQUEST).stdout.strip()
        cards = f"{page}/_sandbox/messages?channel=C0FINANCE"
        wait_for(lambda: request_id in json.dumps(http_json(cards)), timeout=30, what="the card")
    finally:
        assert stop_stack(process, output) == 0


def test_when_its_redis_dies_make_run_says_so_last(tmp_path: Path) -> None:
    """Redis killed under `make run`: the rest stop without it (the sweep does not fail releasing
    its scheduler locks there), and the last line says what ended, under what they printed."""
    env = {name: value for name, value in stack_env(tmp_path).items() if name != "REDIS_URL"}
    remember_sandbox_port(tmp_path, free_port())
    process, output, _ = start_stack(tmp_path, env)
    try:
        lock = SCHEDULER_LOCKING_KEY_TEMPLATE % "countersign"
        stack_redis = Redis.from_url(run_env(tmp_path)["REDIS_URL"])
        wait_for(lambda: stack_redis.exists(lock), timeout=30, what="the sweep to hold its locks")
        [redis] = [
            pid
            for pid in children(process.pid)
            if b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        os.kill(redis, signal.SIGKILL)
        assert process.wait(timeout=60) == 1
        last = "countersign run: stopped, as redis was killed by SIGKILL. Run `make run` again"
        wait_for(lambda: output.find(last), timeout=10, what="the last line")
    finally:
        stop_stack(process, output)
    assert output.lines[-1].startswith(last)
    assert "scheduler.release_locks()" not in "".join(output.lines)  # the sweep's (RQ's own scheduler: self.)


def test_a_broken_policy_stops_make_run_before_it_starts_anything(tmp_path: Path) -> None:
    """New-user trial, finding 9: one line naming COUNTERSIGN_POLICY and the field, exit 2, and
    nothing started (no redis-server, no sandbox) so nothing to tear down."""
    broken = tmp_path / "policy.yml"
    example = (Path(__file__).resolve().parents[1] / "examples/policy.yml").read_text()
    broken.write_text(example.replace("on_timeout: escalate", "on_timout: escalate", 1))
    env = {**stack_env(tmp_path), "COUNTERSIGN_POLICY": str(broken)}
    ran = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 2 and ran.stdout == ""
    [line] = ran.stderr.splitlines()
    assert line.startswith(f"countersign: error: COUNTERSIGN_POLICY: {broken}: ") and "on_timout" in line
    assert not (tmp_path / ".run/redis").exists()


def test_a_second_make_run_in_the_same_directory_is_refused(tmp_path: Path) -> None:
    """Trial finding: `PORT=3006 make run` beside a running `make run` joined its private Redis and
    database and overwrote `.run/sandbox-port`. Now it refuses in one line naming the running one's
    pid and how to stop it, and changes nothing of the first's."""
    env = stack_env(tmp_path)
    remember_sandbox_port(tmp_path, free_port())
    process, output, page = start_stack(tmp_path, env)
    try:
        kept = {name: (tmp_path / ".run" / name).read_text() for name in (".env", "sandbox-port", "lock")}
        assert kept["lock"] == f"{process.pid}\n"
        second = subprocess.run(
            [sys.executable, "-m", "countersign.cli", "run"],
            cwd=tmp_path,
            env={**env, "PORT": str(free_port())},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1 and second.stdout == ""  # run-time state, not bad input
        assert second.stderr.splitlines() == [
            f"countersign: error: another `countersign run` (pid {process.pid}) is running in {tmp_path}, "
            "with this directory's Redis and database; stop it first (Ctrl-C in its terminal, or "
            f"`kill {process.pid}`), or run from another directory"
        ]
        assert {name: (tmp_path / ".run" / name).read_text() for name in kept} == kept
        assert (
            http_json(f"{page}/_sandbox/messages?channel=C0FINANCE") == []
        )  # the first's sandbox still serves
    finally:
        assert stop_stack(process, output) == 0
