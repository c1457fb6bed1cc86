"""`countersign run` as a new user runs it, for the tests that need the whole local stack: its
environment (`stack_env`), starting and stopping it (`start_stack`, `stop_stack`, with its output
collected by `Output`), the settings it wrote (`run_env`), a command from a second terminal
(`second_terminal`) and JSON over HTTP (`http_json`)."""

from __future__ import annotations

import contextlib
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
from rq import Queue, Worker

from countersign.ports import free_port
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent.parent


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


def stack_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a `make run` in `tmp_path`: nothing answers at `REDIS_URL` (so the stack
    starts its own redis-server), the example policy and agent from the repository."""
    return {
        "PATH": os.environ["PATH"],
        "PORT": str(free_port()),
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'run.db'}",
        "COUNTERSIGN_POLICY": str(ROOT / "examples/policy.yml"),
        "PYTHONPATH": str(ROOT),  # examples.refund_agent, as from the repository root
    }


def remember_sandbox_port(cwd: Path, port: int) -> None:
    """As if the last `make run` in `cwd` had its sandbox on `port` (not the default 3001, which
    another test run on this machine may hold)."""
    (cwd / ".run").mkdir(mode=0o700, exist_ok=True)
    (cwd / ".run/sandbox-port").write_text(f"{port}\n")


def start_stack(cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], Output, str]:
    """Start `countersign run` in `cwd`; wait until its agent worker listens. Returns the process, its
    output and the sandbox page's URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "countersign.cli", "run"],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    output = Output(process)
    try:
        line = wait_for(lambda: output.find("open the Slack sandbox at"), timeout=150, what="the sandbox URL")
        redis = Redis.from_url(env.get("REDIS_URL") or run_env(cwd)["REDIS_URL"])
        agents = Queue("refund-agent", connection=redis)
        wait_for(lambda: Worker.count(queue=agents), timeout=30, what="the agent worker")
    except AssertionError:
        stop_stack(process, output)
        raise
    return process, output, line.rsplit(" ", 1)[1].strip().rstrip("/")


def run_env(cwd: Path) -> dict[str, str]:
    """The settings `countersign run` wrote to `cwd/.run/.env` for the second terminal."""
    pairs = (line.split("=", 1) for line in (cwd / ".run/.env").read_text().splitlines() if "=" in line)
    return {name: value.strip('"') for name, value in pairs}


def stop_stack(process: subprocess.Popen[str], output: Output) -> int:
    """Ctrl-C, as a user stops `make run` (SIGINT to its process group, unless it has ended); print
    its output (shown by pytest when the test fails). Returns its exit status."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    status = process.wait(timeout=60)
    print("".join(output.lines))
    return status


def second_terminal(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`countersign ARGS` from a second terminal in `cwd`, whose shell sets no countersign variable."""
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", *args],
        cwd=cwd,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
