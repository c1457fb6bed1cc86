"""What the benchmarks share: supervised child processes, a private redis-server, the environment
countersign's processes read, waiting on a condition, percentiles and the printed table."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from sqlalchemy import Engine

ROOT = Path(__file__).resolve().parent.parent
# The `defaults` entry of a benchmark's policy: intake limits (60 a minute, 100 pending per requester
# and action class unless set) far above what one benchmark sends, so none is refused.
NO_INTAKE_LIMITS = "limits: {per_minute: 1000000000, pending: 1000000000}"
PYTHON_M = [sys.executable, "-m"]


class Child:
    """A supervised child process in its own process group, restartable after a kill; `user` (when
    we are root) runs it as that OS user instead."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log: Path, user: str | None = None
    ) -> None:
        self.name, self.argv, self.env, self.log, self.user = name, argv, env, log, user
        self.process: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()  # one instance at a time, whoever restarts it

    def start(self) -> None:
        with self.lock:
            self._start()

    def _start(self) -> None:
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=self.user,
            )

    def _kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def kill(self) -> None:
        """SIGKILL the process group (an RQ work-horse has a group of its own: it finishes its job)."""
        with self.lock:
            self._kill()

    def crash_and_restart(self, down_seconds: float) -> None:
        """SIGKILL, stay down `down_seconds`, start again."""
        with self.lock:
            self._kill()
            time.sleep(down_seconds)
            self._start()

    def restart_if_dead(self) -> None:
        """Start the process again if it exited on its own (e.g. it lost Redis)."""
        with self.lock:
            if self.process is not None and self.process.poll() is not None:
                self._start()


def start_redis(tmp: Path) -> tuple[Child, str]:
    """A private `redis-server` on a free port, keeping nothing on disk: (its `Child`, its URL)."""
    from countersign.ports import free_port

    port = free_port()
    server = Child(
        "redis",
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        dict(os.environ),
        tmp / "redis.log",
    )
    url = f"redis://127.0.0.1:{port}/0"
    wait_for_redis(server, url)
    return server, url


def wait_for_redis(server: Child, url: str) -> None:
    """Start `server` and return once it answers PING (10 s at most; `TimeoutError` otherwise)."""
    server.start()
    wait_until(lambda: _pings(Redis.from_url(url)), 10, "redis-server did not start")


def _pings(redis: Redis) -> bool:
    try:
        return bool(redis.ping())
    except Exception:  # not up yet
        return False


PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
"""Where `initdb`, `postgres` live (Debian's postgresql-15 package; `PG_BIN` overrides)."""


class PostgresServer:
    """A private PostgreSQL server for one run, as `start_redis` is a private Redis: `initdb` into a
    new temporary directory (trust authentication, superuser `postgres`), then `postgres` on a free
    port of 127.0.0.1 with no Unix socket. Run as the `postgres` OS user when we are root (the
    server refuses to run as root); the directory is handed to that user.

    `restart(mode)` takes the server down and up again the way it goes down in production:
    `fast` is a fast shutdown (SIGINT to the postmaster: clients are disconnected, open transactions
    rolled back, a checkpoint written); `kill` is a crash of the postmaster alone (SIGKILL: its
    backends notice and exit, and the next start runs crash recovery); `crash` kills the postmaster
    and every backend at once (SIGKILL to the process group, as when the container or machine dies).
    """

    MODES = ("fast", "kill", "crash")

    def __init__(self, log: Path, max_connections: int = 300) -> None:
        from countersign.ports import free_port

        self.dir = Path(tempfile.mkdtemp(prefix="countersign-pg-"))
        self.data = self.dir / "data"
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            shutil.chown(self.dir, self.user, self.user)
        self.env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        subprocess.run(
            [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            env=self.env,
            user=self.user,
            check=True,
            capture_output=True,
        )
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": "",
            "max_connections": str(max_connections),
        }
        argv = [str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        self.child = Child("postgres", argv, self.env, log, user=self.user)
        self.restarts: list[str] = []

    def start(self) -> None:
        self.child.start()
        self.wait_ready()

    def wait_ready(self, timeout: float = 120) -> None:
        """Return once the server accepts connections (crash recovery included); start it again if it
        exited meanwhile (a new postmaster refuses to start while the old one's backends live on)."""
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"PostgreSQL did not start (see {self.child.log})") from None
                self.child.restart_if_dead()
                time.sleep(0.1)

    def restart(self, mode: str, down_seconds: float) -> None:
        """Stop the server (`mode`: see the class), stay down `down_seconds`, start it, wait for it."""
        if mode not in self.MODES:
            raise ValueError(f"unknown restart mode {mode!r}")
        with self.child.lock:
            process = self.child.process
            assert process is not None
            if mode == "crash":
                self.child._kill()
            else:
                process.send_signal(signal.SIGINT if mode == "fast" else signal.SIGKILL)
                process.wait(60)
                if mode == "kill":  # the orphaned backends see the postmaster gone and exit
                    wait_until(lambda: not session_pids(process.pid), 30, "orphaned backends did not exit")
            time.sleep(down_seconds)
            self.child._start()
        self.restarts.append(mode)
        self.wait_ready()

    def stop(self, keep: bool = False) -> None:
        """Fast shutdown (SIGKILL after 20 s), then remove the data directory unless `keep`."""
        with self.child.lock:
            process = self.child.process
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(20)
            self.child._kill()
            with contextlib.suppress(ProcessLookupError):
                if process is not None:
                    for pid in session_pids(process.pid):
                        os.kill(pid, signal.SIGKILL)
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def postgres_server(log: Path, keep: bool = False) -> Iterator[PostgresServer]:
    """A started `PostgresServer`, stopped (and its files removed unless `keep`) on any exit."""
    server = PostgresServer(log)
    try:
        server.start()
        yield server
    finally:
        server.stop(keep=keep)


def session_pids(session_id: int) -> list[int]:
    """The live processes of a session (Linux: field 6 of /proc/<pid>/stat), zombies left out."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session_id and fields[0] != "Z":
                pids.append(int(stat.parent.name))
    return pids


def countersign_env(
    tmp: Path, policy: str, redis_url: str, database_url: str, slack_url: str
) -> dict[str, str]:
    """The environment of a countersign process: `policy` (YAML text) written to `tmp/policy.yml`,
    Slack at `slack_url` (the sandbox's `<url>/api/`), a fresh `COUNTERSIGN_SECRET`."""
    (tmp / "policy.yml").write_text(policy)
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": "xoxb-bench",
        "SLACK_API_URL": slack_url,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "COUNTERSIGN_POLICY": str(tmp / "policy.yml"),
        "COUNTERSIGN_SECRET": secrets.token_hex(32),
    }


def wait_until(
    done: Callable[[], bool], timeout: float, what: str = "the benchmark did not finish in time"
) -> None:
    """Poll `done` every 20 ms; raise `TimeoutError(what)` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def percentile(values: Sequence[float], p: float) -> float:
    """The `p`-th percentile (0-100) of `values`, nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, round(p / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def print_table(rows: Sequence[tuple[str, object]], header: tuple[str, str] = ("measure", "value")) -> None:
    """Print two aligned columns."""
    width = max(len(header[0]), *(len(name) for name, _ in rows))
    print(f"{header[0].ljust(width)}  {header[1]}")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


@contextlib.contextmanager
def bench_database(url: str | None, tmp: Path, keep: bool = False) -> Iterator[str]:
    """A new, empty, migrated database for one run, dropped afterwards (unless `keep`): on the
    PostgreSQL server of `url` (a database named `countersign_bench_<random>`), or a SQLite file in
    `tmp` when `url` is None. Yields its URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import OperationalError

    from countersign.store import create_db_engine, upgrade

    if url is None:
        fresh = f"sqlite:///{tmp / 'bench.db'}"
        upgrade(create_db_engine(fresh))
        yield fresh
        return
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise SystemExit(
            f"--database-url: {parsed.drivername} is not a PostgreSQL server URL "
            "(postgresql://user@host:port/db); leave it out to use a SQLite file"
        )
    name = f"countersign_bench_{secrets.token_hex(4)}"
    server = create_engine(
        parsed.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT", pool_pre_ping=True
    )
    try:
        with server.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {name}"))
    except OperationalError as exc:
        raise SystemExit(
            f"--database-url: cannot create a scratch database on {parsed.host}:{parsed.port}: {exc.orig}"
        ) from None
    fresh = parsed.set(database=name).render_as_string(hide_password=False)
    engine = create_db_engine(fresh)
    try:
        upgrade(engine)
        yield fresh
    finally:
        engine.dispose()
        if not keep:
            with server.connect() as connection:
                connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        server.dispose()


def exit_on_sigterm() -> None:
    """Turn SIGTERM (a CI cancel, `timeout`) into `SystemExit` in the main thread, so that a bench's
    `finally` blocks stop its processes and drop its scratch database, as they do on Ctrl-C."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def session_cpu_seconds(session_id: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of a session, e.g. a `Child`
    (which starts its own session: its pid) and every process it forked or spawned. Linux only
    (reads /proc/<pid>/stat, fields 6 `session`, 14 `utime` and 15 `stime`, in clock ticks)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process exited meanwhile
        if int(fields[3]) == session_id:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (/proc/PID/stat); 0.0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (read from /proc; Linux only), parents before children."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        tree.append(current)
        todo.extend(sorted(children.get(current, [])))
    return tree


def rss_kib(pid: int) -> int:
    """The resident memory of one process in KiB (`VmRSS` in /proc/<pid>/status); 0 once it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cards_stored(engine: Engine, ids: Sequence[str] | None = None) -> int:
    """How many approval requests (those of `ids`, or all) have their card's `ts` stored."""
    from sqlalchemy import func, select

    from countersign.store import ApprovalRequest

    stmt = select(func.count()).select_from(ApprovalRequest).where(ApprovalRequest.card_ts.is_not(None))
    if ids is not None:
        stmt = stmt.where(ApprovalRequest.id.in_(ids))
    with engine.connect() as connection:
        return connection.execute(stmt).scalar_one()


def py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """Record the process `pid` with py-spy (wall clock, idle samples included, 100 Hz, raw collapsed
    stacks) into `output` until the returned process gets SIGINT; returns once py-spy has attached."""
    spy = Path(sys.executable).with_name("py-spy")
    argv = [str(spy), "record", "--pid", str(pid), "--idle", "--format", "raw", "--rate", "100"]
    process = subprocess.Popen(
        [*argv, "--output", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(1)  # attached
    return process


@dataclass
class WebStack:
    """A running `countersign web` and `countersign worker` on `database_url` and `redis_url`, with
    `sandbox` as their Slack; `url` is the web's base URL, `port` its port. `children` are killed
    when the stack stops (add a child of the benchmark's own, e.g. a profiler)."""

    sandbox: Any
    url: str
    port: int
    redis_url: str
    database_url: str
    web: Child
    worker: Child
    tmp: Path
    children: list[Child]


@contextlib.contextmanager
def web_stack(policy: str, database_url: str | None, trace: Path | None = None) -> Iterator[WebStack]:
    """Start a private redis-server, the sandbox, a scratch database (`bench_database`) and
    `countersign web` + `countersign worker` on them with `policy` (YAML text); yield once the web
    answers `/healthz`; stop everything afterwards. With `trace` (a directory), the processes write
    each click's stage timings there (`bench/clicktrace/sitecustomize.py`)."""
    from countersign.ports import free_port
    from countersign.sandbox import Sandbox, serve

    tmp = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    redis_server, redis_url = start_redis(tmp)
    sandbox = Sandbox(signing_secret=secrets.token_hex(16))
    server = serve(sandbox)
    children: list[Child] = []
    try:
        with bench_database(database_url, tmp) as url:
            port = free_port()
            sandbox.interactivity_url = f"http://127.0.0.1:{port}/slack/events"
            env = countersign_env(tmp, policy, redis_url, url, server.url + "/api/") | {
                "SLACK_SIGNING_SECRET": sandbox.signing_secret,
                "PORT": str(port),
            }
            if trace is not None:
                tracer = ROOT / "bench" / "clicktrace"
                env |= {"PYTHONPATH": f"{tracer}:{ROOT}", "COUNTERSIGN_BENCH_CLICKTRACE": str(trace)}
            cli = [*PYTHON_M, "countersign.cli"]
            web = Child("web", [*cli, "web", "--host", "127.0.0.1"], env, tmp / "web.log")
            worker = Child("worker", [*cli, "worker"], env, tmp / "worker.log")
            children = [web, worker]
            for child in children:
                child.start()
            base = f"http://127.0.0.1:{port}"
            wait_until(lambda: _answers(base + "/healthz"), 60, "countersign web did not start")
            yield WebStack(sandbox, base, port, redis_url, url, web, worker, tmp, children)
    finally:
        for child in children:
            child.kill()
        redis_server.kill()
        server.shutdown()


def _answers(url: str) -> bool:
    """True when a GET of `url` answers 200 within 2 s."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def top_frames(raw: Path, count: int = 25) -> list[tuple[str, object]]:
    """The `count` functions present in most samples of a py-spy raw (collapsed stacks) file, with
    their inclusive share: `[("function (file:line)", "12.3")]`."""
    total, inclusive = 0, Counter[str]()
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        total += int(samples)
        frames = {re.sub(r":\d+\)$", ")", frame.replace(str(ROOT) + "/", "")) for frame in stack.split(";")}
        for frame in frames:
            inclusive[frame] += int(samples)
    return [(frame, f"{100 * n / total:.1f}") for frame, n in inclusive.most_common(count)]
