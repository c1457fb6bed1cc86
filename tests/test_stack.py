"""`countersign run` as a new user runs it: real processes (sandbox, gunicorn web, router worker,
the example agent's RQ worker), a request from the CLI, an Edit of the amount through the sandbox
page's endpoints, and the example agent executing the edited payload once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

from redis import Redis

from countersign.ports import free_port
from tests.helpers import README_REQUEST, wait_for
from tests.helpers.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent


class Output:
    """Collects a child's merged stdout/stderr lines on a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line)

    def find(self, text: str) -> str | None:
        return next((line for line in self.lines if text in line), None)


def http_json(url: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_make_run_stack_end_to_end(redis_server: RedisServer, redis: Redis, tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "PORT": str(free_port()),
        "REDIS_URL": redis_server.url,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'run.db'}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "countersign.cli", "run"],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    output = Output(process)
    try:
        line = wait_for(lambda: output.find("open the Slack sandbox at"), timeout=30, what="the sandbox URL")
        page = line.rsplit(" ", 1)[1].strip().rstrip("/")
        wait_for(lambda: output.find("Listening on refund-agent"), timeout=30, what="the agent worker")

        request = subprocess.run(
            [sys.executable, "-m", "countersign.cli", *README_REQUEST],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        request_id = request.stdout.strip()
        card = wait_for(
            lambda: http_json(f"{page}/_sandbox/messages?channel=C0FINANCE"), timeout=30, what="card"
        )[0]
        assert request_id in json.dumps(card["blocks"])
        with urllib.request.urlopen(page + "/", timeout=10) as response:
            assert response.status == 200 and b"<html" in response.read().lower()

        wait_for(lambda: _healthy(int(env["PORT"])), timeout=30, what="countersign web to be healthy")
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
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        print("".join(output.lines))  # shown by pytest when the test fails
    assert wait_for(lambda: not _listening(int(env["PORT"])), what="web to stop")


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
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
