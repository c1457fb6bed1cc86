"""`countersign run`: everything for local use, as child processes of one command.

Starts, in order: a private `redis-server` when nothing answers at `REDIS_URL`; the Slack sandbox
when `SLACK_BOT_TOKEN` is unset (with a fresh signing secret shared by sandbox and bot); the
database migrations; then `countersign web`, `countersign worker` and `countersign agent-worker`
on the agents' resume queues. Ctrl-C stops them all; if one dies, the rest are stopped too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from redis import Redis
from redis.exceptions import RedisError

from .config import Settings
from .exceptions import StackError
from .files import private_dir, private_file, write_private
from .ports import free_port, port_is_free, port_open
from .store import create_db_engine, upgrade

EXAMPLE_POLICY = Path("examples/policy.yml")
STARTUP_TIMEOUT_SECONDS = 10.0
COUNTERSIGN = (sys.executable, "-m", "countersign.cli")  # the `countersign` command, as a child process


def _redis_answers(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=1).ping())
    except RedisError:
        return False


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not predicate():
        if time.monotonic() > deadline:
            raise StackError(f"{what} did not start within {STARTUP_TIMEOUT_SECONDS:.0f} s")
        time.sleep(0.05)


class Stack:
    """The child processes of `countersign run`, stopped together."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, *argv: str) -> None:
        """Start `argv` with the stack's environment, in its own process group."""
        self.children.append((name, subprocess.Popen(argv, env=self.env, start_new_session=True)))

    def wait(self) -> int:
        """Block until a child exits; return its status."""
        while True:
            for name, child in self.children:
                if child.poll() is not None:
                    print(
                        f"countersign run: {name} exited with status {child.returncode}; stopping", flush=True
                    )
                    return child.returncode or 1
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM every child's process group (a dead child may have left children of its own),
        then SIGKILL the groups still running after 10 s."""
        for _, child in self.children:
            _signal_group(child.pid, signal.SIGTERM)
        for _, child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)
            _signal_group(child.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def run_stack(settings: Settings, agent_queues: list[str]) -> int:
    """Run the local stack until interrupted; returns the exit status."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    stack = Stack(env)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if not port_is_free("127.0.0.1", settings.PORT):
            raise StackError(f"PORT {settings.PORT} is already in use; set PORT to a free port")
        _ensure_redis(settings, stack)
        page = _ensure_slack(settings, stack)
        env.setdefault("COUNTERSIGN_SECRET", _local_secret())
        if "COUNTERSIGN_POLICY" not in env and EXAMPLE_POLICY.is_file():
            env["COUNTERSIGN_POLICY"] = str(EXAMPLE_POLICY.resolve())
        upgrade(create_db_engine(env.get("DATABASE_URL", settings.DATABASE_URL)))
        stack.start("web", *COUNTERSIGN, "web", "--workers", "1", "--host", "127.0.0.1")
        stack.start("worker", *COUNTERSIGN, "worker")
        stack.start("agent worker", *COUNTERSIGN, "agent-worker", *agent_queues)
        print(f"countersign run: web on http://127.0.0.1:{settings.PORT}/slack/events")
        if page:
            print(f"countersign run: open the Slack sandbox at {page}", flush=True)
        return stack.wait()
    finally:
        stack.stop()


def _local_secret() -> str:
    """A COUNTERSIGN_SECRET kept in `.run/secret`, so grants issued in one local run still verify in
    the next. `.run/` is 0700 and the file 0600 whatever the umask; an existing one open to others
    is made private, with a warning (`files.private_file`)."""
    path = private_dir(Path(".run")) / "secret"
    if not path.exists():
        write_private(path, secrets.token_hex(32))
    return private_file(path).read_text().strip()


def _ensure_redis(settings: Settings, stack: Stack) -> None:
    stack.env["REDIS_URL"] = settings.REDIS_URL
    if _redis_answers(settings.REDIS_URL):
        return
    server = shutil.which("redis-server")
    if server is None:
        raise StackError(
            f"nothing answers at REDIS_URL ({settings.REDIS_URL}) and redis-server is not installed"
        )
    url = urlsplit(settings.REDIS_URL)
    local = url.scheme == "redis" and url.hostname in ("localhost", "127.0.0.1")
    port = (url.port or 6379) if local else free_port()
    stack.start(
        "redis", server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"
    )
    stack.env["REDIS_URL"] = settings.REDIS_URL if local else f"redis://127.0.0.1:{port}/0"
    print(f"countersign run: nothing answered at REDIS_URL; started a private redis-server on port {port}")
    _wait_for(lambda: _redis_answers(stack.env["REDIS_URL"]), "redis-server")


def _ensure_slack(settings: Settings, stack: Stack) -> str | None:
    """Start the sandbox when no Slack token is set; return its page URL (None for real Slack)."""
    if settings.SLACK_BOT_TOKEN:
        return None
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stack.env.update(
        SLACK_BOT_TOKEN="xoxb-sandbox",
        SLACK_SIGNING_SECRET=secrets.token_hex(16),
        SLACK_API_URL=f"{url}/api/",
    )
    stack.start(
        "sandbox",
        *COUNTERSIGN,
        "sandbox",
        "--port",
        str(port),
        "--interactivity-url",
        f"http://127.0.0.1:{settings.PORT}/slack/events",
    )
    _wait_for(lambda: port_open(port), "the Slack sandbox")
    return url + "/"
