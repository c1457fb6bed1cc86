"""`countersign run`: everything for local use, as child processes of one command.

Starts, in order: a private `redis-server` on a Unix socket in `.run/redis/` when `REDIS_URL` is
unset, or on `REDIS_URL`'s port when it is set and nothing answers there (append-only file and log in
`.run/redis/`, so its queues outlive a restart); the Slack sandbox when `SLACK_BOT_TOKEN` is
unset (with a fresh signing secret shared by sandbox and bot, on the last run's port while it is
free); the database migrations; then `countersign web`, `countersign worker` and
`countersign agent-worker` on the agents' resume queues. It says "starting…" and prints the sandbox's
address only once web answers `/healthz` and both workers listen on their queues, so that a click on
the page is never refused by a web process still starting.
It writes the Redis, database and grant secret it chose to `.run/.env`, which the commands of a second
terminal read (`config.ENV_FILE`), and the sandbox's Slack settings when it started the sandbox.
One `countersign run` a directory: it holds an exclusive lock on
`.run/lock` (`fcntl.flock`, released by the kernel when it exits, however it exits) and a second one
refuses to start, naming the first's pid, rather than join its Redis and database. Ctrl-C stops them
all, the commands before the redis-server and sandbox they use; if one dies, the rest are stopped too.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, Worker

from .config import ENV_FILE, Settings
from .connections import migrate
from .exceptions import ConfigError, StackError
from .files import private_dir, private_file, write_private
from .ports import free_port, port_is_free, port_open
from .router import reload
from .router.jobs import INTAKE_QUEUE
from .router.runtime import Runtime

EXAMPLE_POLICY = Path("examples/policy.yml")
RUN_DIR = ENV_FILE.parent
REDIS_DIR = RUN_DIR / "redis"
LOCK_FILE = RUN_DIR / "lock"  # flock'ed by the running `countersign run`; holds its pid
SANDBOX_PORT_FILE = RUN_DIR / "sandbox-port"  # the sandbox's last port, taken again when free
SANDBOX_PORT = 3001  # the sandbox's port when no run has remembered one
STARTUP_TIMEOUT_SECONDS = 10.0
READY_TIMEOUT_SECONDS = 120.0  # web, worker and agent worker import and check for ~25 s on a busy machine
COUNTERSIGN = (sys.executable, "-m", "countersign.cli")  # the `countersign` command, as a child process
# written to `.run/.env` (those set): what a second terminal's commands need to reach this stack and
# check against its policy.
SHARED_SETTINGS = (
    "REDIS_URL",
    "DATABASE_URL",
    "COUNTERSIGN_SECRET",
    "COUNTERSIGN_WEBHOOK_SECRET",
    "COUNTERSIGN_POLICY",
)
# written there too when this run started the sandbox (never a real Slack token): what a second
# `countersign worker` or `web` needs to call the sandbox and check its requests' signatures.
SANDBOX_SETTINGS = ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_API_URL")


def _redis_answers(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=1).ping())
    except RedisError:
        return False


def _wait_for(predicate: Callable[[], bool], failure: str) -> None:
    """Poll `predicate` until true; raise `StackError(failure)` after `STARTUP_TIMEOUT_SECONDS`."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not predicate():
        if time.monotonic() > deadline:
            raise StackError(failure)
        time.sleep(0.05)


class Stack:
    """The child processes of `countersign run`, stopped together: `services` (redis-server, the
    sandbox) after the `commands` that use them."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.services: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.commands: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, *argv: str, service: bool = False) -> None:
        """Start `argv` with the stack's environment, in its own process group."""
        child = subprocess.Popen(argv, env=self.env, start_new_session=True)
        (self.services if service else self.commands).append((name, child))

    def wait(self) -> tuple[int, str]:
        """Block until a child exits; say which, and what to do. Returns 1 (or the child's own exit
        status when it is above 1) and which child ended how, e.g. `redis was killed by SIGKILL`."""
        while True:
            for name, child in self.services + self.commands:
                if child.poll() is not None:
                    ended = f"{name} {_ended(child.returncode)}"
                    print(
                        f"countersign run: {ended}; stopping the rest. Run `make run` again to start "
                        "everything anew",
                        flush=True,
                    )
                    return max(child.returncode, 1), ended
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the commands, then the services (so that no command logs its Redis going away)."""
        _stop_all(self.commands)
        _stop_all(self.services)


def _ended(status: int) -> str:
    """How a child with exit `status` ended, e.g. `was killed by SIGKILL` for -9."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        return f"was killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"was killed by signal {-status}"


class _Stopped(BaseException):
    """SIGINT (Ctrl-C) or SIGTERM asked `countersign run` to stop. A BaseException, so that no
    `except Exception` of the start-up steps swallows it."""


def _stop_asked(*_: object) -> None:
    """Signal handler of SIGINT and SIGTERM: stop the stack (`run_stack`, which then ignores both, so
    that a second Ctrl-C cannot cut the stop short and leave children running)."""
    raise _Stopped


def _stop_all(children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    """SIGTERM every child's process group (a dead child may have left children of its own), then
    SIGKILL the groups still running after 10 s."""
    for _, child in children:
        _signal_group(child.pid, signal.SIGTERM)
    for _, child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)
        _signal_group(child.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def run_stack(settings: Settings, agent_queues: list[str]) -> int:
    """Run the local stack until Ctrl-C (SIGINT) or SIGTERM, then stop it and return 0 (so that `make
    run` ends without an error line); when a child exits first, stop the rest and return 1 (or its
    status). `settings` are the environment's alone (not `.run/.env`, which this writes). Raises
    `StackError` or `ConfigError` (one line naming the setting) when a part cannot start, and
    `StackError` when another `countersign run` holds this directory (`_take_run_lock`)."""
    lock = _take_run_lock()
    try:
        return _run_locked(settings, agent_queues)
    finally:
        os.close(lock)


def _take_run_lock() -> int:
    """Lock this directory's `.run/` for this process (`LOCK_FILE`, `fcntl.flock`, exclusive, no
    waiting) and write our pid there; return the open descriptor, which holds the lock until it is
    closed or the process exits (children do not inherit it: `subprocess` closes other descriptors).
    Raises `StackError` naming the holder's pid and how to stop it when another process holds it."""
    private_dir(RUN_DIR)
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StackError(
            f"another `countersign run` (pid {holder}) is running in {Path.cwd()}, with this directory's "
            f"Redis and database; stop it first (Ctrl-C in its terminal, or `kill {holder}`), or run from "
            "another directory"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _run_locked(settings: Settings, agent_queues: list[str]) -> int:
    """`run_stack` once `.run/` is locked for this process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    env["DATABASE_URL"] = settings.DATABASE_URL
    env.setdefault("COUNTERSIGN_LIBRARY_LOG_LEVEL", "WARNING")  # no RQ or gunicorn line per job or click
    stack = Stack(env)
    signal.signal(signal.SIGINT, _stop_asked)
    signal.signal(signal.SIGTERM, _stop_asked)
    try:
        _start(settings, stack, agent_queues)
        status, ended = stack.wait()
    except _Stopped:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # nothing cuts the stop short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
    # Said again last: what the rest printed while stopping (their Redis gone, say) may bury the first.
    print(f"countersign run: stopped, as {ended}. Run `make run` again to start everything anew", flush=True)
    return status


def _start(settings: Settings, stack: Stack, agent_queues: list[str]) -> None:
    """Start the stack's services and commands (`run_stack`); print where web and the sandbox are."""
    env = stack.env
    if "COUNTERSIGN_POLICY" not in env and EXAMPLE_POLICY.is_file():
        env["COUNTERSIGN_POLICY"] = str(EXAMPLE_POLICY.resolve())
    if "COUNTERSIGN_POLICY" in env:  # checked before anything starts: a bad file is one line, nothing to stop
        env["COUNTERSIGN_POLICY"] = str(Path(env["COUNTERSIGN_POLICY"]).resolve())  # as `.run/.env` says it
        reload.at_start(env["COUNTERSIGN_POLICY"])
    if not port_is_free("127.0.0.1", settings.PORT):
        raise ConfigError(f"PORT: {settings.PORT} is already in use on 127.0.0.1; set PORT to a free port")
    _ensure_redis(settings, stack)
    page = _ensure_slack(settings, stack)
    env.setdefault("COUNTERSIGN_SECRET", _local_secret("secret", _grant_secret))
    env.setdefault("COUNTERSIGN_WEBHOOK_SECRET", _local_secret("webhook-secret", _webhook_secret))
    migrate(settings)
    _write_env_file(env, sandbox=page is not None)
    stack.start("web", *COUNTERSIGN, "web", "--workers", "1", "--host", "127.0.0.1")
    stack.start("worker", *COUNTERSIGN, "worker")
    stack.start("agent worker", *COUNTERSIGN, "agent-worker", *agent_queues)
    print("countersign run: starting web, worker and agent worker…", flush=True)
    if not _wait_ready(stack, _readiness(settings.PORT, env["REDIS_URL"], agent_queues)):
        return  # a child ended: `stack.wait` says which
    print(f"countersign run: ready; web on http://127.0.0.1:{settings.PORT}/slack/events")
    if page:
        print(f"countersign run: open the Slack sandbox at {page}", flush=True)


def _readiness(port: int, redis_url: str, agent_queues: list[str]) -> dict[str, Callable[[], bool]]:
    """What answers once each command serves: web's `/healthz` (its database and Redis), and the
    router worker and agent worker listening on their queues (registered in Redis by RQ as they
    start working, after their start-up checks)."""
    redis = Redis.from_url(redis_url, socket_connect_timeout=1, socket_timeout=1)

    def listening(names: list[str]) -> Callable[[], bool]:
        return lambda: all(Worker.count(redis, Queue(name, connection=redis)) for name in names)

    return {
        "web": lambda: _healthy(f"http://127.0.0.1:{port}/healthz"),
        "worker": listening([INTAKE_QUEUE]),
        "agent worker": listening(agent_queues),
    }


def _wait_ready(stack: Stack, checks: dict[str, Callable[[], bool]]) -> bool:
    """Poll `checks` until all hold (True); False as soon as a child has ended. Past
    `READY_TIMEOUT_SECONDS`, say once which do not answer yet, and keep waiting."""
    deadline, waiting, said = time.monotonic() + READY_TIMEOUT_SECONDS, dict(checks), False
    while waiting:
        if any(child.poll() is not None for _, child in stack.services + stack.commands):
            return False
        waiting = {name: check for name, check in waiting.items() if not _holds(check)}
        if waiting and not said and time.monotonic() > deadline:
            late = ", ".join(waiting)
            print(f"countersign run: still starting after {READY_TIMEOUT_SECONDS:.0f} s: {late}", flush=True)
            said = True
        time.sleep(0.2 if waiting else 0)
    return True


def _holds(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except (OSError, RedisError):
        return False


def _healthy(url: str) -> bool:
    """True when `url` answers 200 (web's `/healthz`: its database and Redis answer)."""
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def _local_secret(name: str, new: Callable[[], str]) -> str:
    """A secret kept in `.run/<name>` (made by `new` the first time): the COUNTERSIGN_SECRET in
    `.run/secret`, so grants issued in one local run still verify in the next, and the
    COUNTERSIGN_WEBHOOK_SECRET in `.run/webhook-secret`, so a receiver keeps verifying. `.run/` is
    0700 and the file 0600 whatever the umask; an existing one open to others is made private, with
    a warning (`files.private_file`)."""
    path = private_dir(RUN_DIR) / name
    if not path.exists():
        write_private(path, new())
    return private_file(path).read_text().strip()


def _grant_secret() -> str:
    """A COUNTERSIGN_SECRET: 32 random bytes in hex."""
    return secrets.token_hex(32)


def _webhook_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and the base64 of 32 random bytes (the spec asks for 24 to
    64)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _write_env_file(env: dict[str, str], sandbox: bool) -> None:
    """`.run/.env` (mode 600, it holds the grant and webhook secrets): the settings of
    `SHARED_SETTINGS` this run chose (the policy file as an absolute path), which a second terminal's
    `countersign request`, `show`, `stats`, `policy suggest`, `report` or `agent-worker` then read;
    with `sandbox` (this run started the Slack sandbox), its `SANDBOX_SETTINGS` too, which are no
    secret of a real workspace, for a second `countersign worker` or `web`. A real Slack token is
    never written: with real Slack those come from the second terminal's own environment."""
    private_dir(ENV_FILE.parent)
    ENV_FILE.unlink(missing_ok=True)  # written afresh each run, private from its first byte
    names = SHARED_SETTINGS + (SANDBOX_SETTINGS if sandbox else ())
    chosen = {name: env[name] for name in names if name in env}
    quoted = {name: value.replace("\\", "\\\\").replace('"', '\\"') for name, value in chosen.items()}
    write_private(ENV_FILE, "".join(f'{name}="{value}"\n' for name, value in quoted.items()))


def _ensure_redis(settings: Settings, stack: Stack) -> None:
    """The stack's Redis. With `REDIS_URL` unset, a private redis-server on a Unix socket in
    `.run/redis/` (started, or the one an earlier run left): never whatever listens on the default
    port, which may be the machine's Redis holding another stack's idempotency keys and job ids.
    With `REDIS_URL` set, that Redis, or a private redis-server on its port when nothing answers."""
    if settings.source("REDIS_URL") == "default":
        socket = REDIS_DIR.resolve() / "redis.sock"
        stack.env["REDIS_URL"] = f"unix://{socket}"
        if not _redis_answers(stack.env["REDIS_URL"]):
            _start_redis(stack, ("--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700"))
        return
    stack.env["REDIS_URL"] = settings.REDIS_URL
    if _redis_answers(settings.REDIS_URL):
        return
    url = urlsplit(settings.REDIS_URL)
    local = url.scheme == "redis" and url.hostname in ("localhost", "127.0.0.1")
    port = (url.port or 6379) if local else free_port()
    stack.env["REDIS_URL"] = settings.REDIS_URL if local else f"redis://127.0.0.1:{port}/0"
    _start_redis(stack, ("--port", str(port), "--bind", "127.0.0.1"))


def _start_redis(stack: Stack, listen: tuple[str, ...]) -> None:
    """Start a private redis-server listening as `listen` says, its append-only file and log in
    `.run/redis/`, and wait until it answers at the stack's `REDIS_URL`. Raises `StackError`."""
    server = shutil.which("redis-server")
    if server is None:
        raise StackError(
            "REDIS_URL: redis-server is not installed; install it (`make install` does) or set "
            "REDIS_URL to a running Redis"
        )
    private_dir(RUN_DIR)  # before its redis/ directory, which would create it open to others
    REDIS_DIR.mkdir(parents=True, exist_ok=True)
    data = REDIS_DIR.resolve()
    stack.start(
        "redis",
        *(server, *listen, "--save", "", "--appendonly", "yes"),
        *("--dir", str(data), "--logfile", str(data / "redis.log")),
        service=True,
    )
    where = stack.env["REDIS_URL"]
    print(f"countersign run: started a private redis-server at {where} (its data and log in {REDIS_DIR}/)")
    _wait_for(
        lambda: _redis_answers(where),
        f"REDIS_URL: the private redis-server at {where} did not start within "
        f"{STARTUP_TIMEOUT_SECONDS:.0f} s; see {REDIS_DIR / 'redis.log'}, or set REDIS_URL to a running "
        "Redis",
    )


def _ensure_slack(settings: Settings, stack: Stack) -> str | None:
    """Start the sandbox when no Slack token is set; return its page URL (None for real Slack, whose
    answer to the token is checked first)."""
    if settings.SLACK_BOT_TOKEN:
        settings.require("SLACK_SIGNING_SECRET", needed_by="`countersign run` with SLACK_BOT_TOKEN set")
        Runtime(settings).check_slack()
        return None
    port = _sandbox_port()
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
        "--quiet",  # run_stack prints the page's address
        service=True,
    )
    _wait_for(
        lambda: port_open(port),
        f"SLACK_BOT_TOKEN: unset, so the Slack sandbox was started, and it did not answer on port {port} "
        f"within {STARTUP_TIMEOUT_SECONDS:.0f} s; see its output above",
    )
    return url + "/"


def _sandbox_port() -> int:
    """The port of the last run's sandbox (`SANDBOX_PORT_FILE`, else `SANDBOX_PORT`) when it is free,
    so that a sandbox page left open works again after a restart; else a free one, said on stdout.
    The port chosen is remembered for the next run. Raises `OSError` if `.run/` cannot be written."""
    remembered = _remembered_port()
    port = remembered if port_is_free("127.0.0.1", remembered) else free_port()
    if port != remembered:
        print(
            f"countersign run: port {remembered}, the sandbox's port, is in use; the sandbox is on {port} "
            f"this time, and later runs keep {port} while it is free"
        )
    private_dir(RUN_DIR)
    SANDBOX_PORT_FILE.unlink(missing_ok=True)
    write_private(SANDBOX_PORT_FILE, f"{port}\n")
    return port


def _remembered_port() -> int:
    """The port in `SANDBOX_PORT_FILE` (`SANDBOX_PORT` when the file is missing or not a port)."""
    try:
        port = int(SANDBOX_PORT_FILE.read_text().strip())
    except (OSError, ValueError):
        return SANDBOX_PORT
    return port if 0 < port < 65536 else SANDBOX_PORT
