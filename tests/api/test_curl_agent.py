"""`examples/curl_agent.sh` against a live `countersign run` (real web, router worker, sandbox):
curl alone creates a request, long-polls while a reviewer approves it in the sandbox (outliving the
web worker killed under it), claims the execution (the grant checked), and reports the outcome,
which closes the audit record; run again with the same RUN_ID, its claim is refused and nothing runs
twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

from tests.helpers import children, wait_for
from tests.helpers.stack import ROOT, http_json, second_terminal, stack_env, start_stack, stop_stack


def test_the_curl_agent_creates_long_polls_and_reports_the_outcome(tmp_path: Path) -> None:
    env = stack_env(tmp_path)
    process, output, page = start_stack(tmp_path, env)
    try:
        token = second_terminal(
            tmp_path, "token", "create", "--requester", "refund-agent", "--actions", "issue_refund"
        ).stdout.strip()
        agent_env = {
            "PATH": os.environ["PATH"],
            "COUNTERSIGN_URL": f"http://127.0.0.1:{env['PORT']}",
            "COUNTERSIGN_TOKEN": token,
            "RUN_ID": "curl-1",
        }
        agent = subprocess.Popen(
            ["sh", str(ROOT / "examples/curl_agent.sh")],
            env=agent_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        card = wait_for(
            lambda: http_json(f"{page}/_sandbox/messages?channel=C0FINANCE"), timeout=30, what="card"
        )[0]
        _kill_the_web_worker(process.pid, int(env["PORT"]))
        pressed = http_json(
            f"{page}/_sandbox/click",
            {"channel": "C0FINANCE", "ts": card["ts"], "action_id": "countersign_approve", "user": "U0LEAD"},
        )
        assert pressed["status"] == 200, pressed
        stdout, stderr = agent.communicate(timeout=60)
        assert agent.returncode == 0, stderr
        request_id = stderr.split()[1].rstrip(":")
        # Run again with the same RUN_ID, within the grant's TTL: the same request and decision, but
        # the approval was used up by the first run's claim, so nothing is refunded a second time.
        again = subprocess.run(
            ["sh", str(ROOT / "examples/curl_agent.sh")],
            env=agent_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        shown = json.loads(second_terminal(tmp_path, "show", request_id).stdout)
    finally:
        stop_stack(process, output)
    assert again.returncode == 1 and "REFUND EXECUTED" not in again.stdout, again.stdout
    assert f"request {request_id}: waiting for a reviewer" in again.stderr
    assert "REFUND REFUSED (409)" in again.stderr and "execution refused (already_executed)" in again.stderr
    assert 'REFUND EXECUTED: {"amount":"120.00","currency":"USD","customer":"ACME"}' in stdout
    assert '{"recorded":true}' in stdout
    assert shown["status"] == "approved" and shown["request"]["requester"] == "refund-agent"
    trail = [(event["event"], event["detail"]) for event in shown["audit"]]
    assert trail[-3:] == [
        ("execution_started", {}),
        ("executed", {"detail": "refunded by curl_agent.sh"}),
        ("execution_refused", {"why": "already_executed"}),
    ]


def _kill_the_web_worker(stack: int, port: int) -> None:
    """SIGKILL the gunicorn worker of the stack's `countersign web` (the long poll's connection drops,
    or the next one is refused), then wait until the worker gunicorn starts in its place answers."""
    [web] = [pid for pid in children(stack) if b"\0web\0" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    [worker] = children(web)
    os.kill(worker, signal.SIGKILL)

    def answering() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                return bool(answer.status == 200 and worker not in children(web))
        except OSError:
            return False

    wait_for(answering, timeout=30, what="gunicorn's new web worker")
