"""Fixtures on real components: a private redis-server, SQLite and PostgreSQL, the Slack sandbox
over HTTP, and the bot's WSGI app served over HTTP.

PostgreSQL tests use `COUNTERSIGN_TEST_POSTGRES_URL` (`.ci/run` points it at the local server) and
a database of their own created on it; without the variable they are skipped, unless
`COUNTERSIGN_REQUIRE_POSTGRES=1` (set by CI) makes that an error.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from redis import Redis
from rq.worker import BaseWorker
from sqlalchemy import text
from sqlalchemy.engine import make_url

from countersign import connections
from countersign.agent import ApprovalClient
from countersign.router import directory
from countersign.router import runtime as runtime_module
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.sandbox.limits import METHOD_CALLS_PER_MINUTE
from countersign.store import Store, create_db_engine, upgrade
from countersign.store.models import Base
from tests.helpers.faults import ServedSandbox
from tests.helpers.redis_server import RedisServer

POLICY = """\
version: 3
defaults:
  channel: C0APPROVALS
  approvers: {users: [U0LEAD]}
actions:
  issue_refund:
    channel: C0FINANCE
    approvers: {users: [U0LEAD, U0ALICE]}
    editable: {amount: {type: decimal, places: 2, min: "0.01"}}
    edit_rule: "edited.amount <= original.amount"
    reject_reason: required
  send_email: {}                  # named, so routed by the defaults (unknown classes are refused)
"""


@pytest.fixture(autouse=True)
def ctrl_c_stops_pytest(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt in pytest, whatever a test runs in process: an RQ
    worker's `work()` there (`drain`, say) would otherwise install RQ's SIGINT and SIGTERM handlers
    for good (a warm shutdown: `StopRequested`, which fails one test, and pytest carries on), so it
    installs none; the handlers a test changed anyway (RQ's `request_stop` does) are put back after it."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(BaseWorker, "_install_signal_handlers", lambda self: None)
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis(redis_server: RedisServer) -> Iterator[Redis]:
    client = Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test session."""
    base = os.environ.get("COUNTERSIGN_TEST_POSTGRES_URL")
    if not base:
        if os.environ.get("COUNTERSIGN_REQUIRE_POSTGRES"):
            pytest.fail("COUNTERSIGN_TEST_POSTGRES_URL is not set but COUNTERSIGN_REQUIRE_POSTGRES is")
        pytest.skip("set COUNTERSIGN_TEST_POSTGRES_URL to run the PostgreSQL tests")
    name = f"countersign_test_{os.getpid()}"
    admin = create_db_engine(base).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    engine = create_db_engine(url)
    upgrade(engine)
    engine.dispose()
    yield url
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database: a new SQLite file, or the session's PostgreSQL database truncated."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'countersign.db'}"
        engine = create_db_engine(url)
        upgrade(engine)
        engine.dispose()
        return url
    url = request.getfixturevalue("postgres_url")
    engine = create_db_engine(url)
    with engine.begin() as connection:
        tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
        connection.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()
    return url


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = Store.from_url(database_url)
    yield store
    store.engine.dispose()


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def sandbox_server() -> Iterator[ServedSandbox]:
    """The Slack sandbox served over HTTP, which a test may take down for a while (`ServedSandbox.down`)."""
    served = ServedSandbox(
        Sandbox(signing_secret=secrets.token_hex(16), method_limits=METHOD_CALLS_PER_MINUTE)
    )
    yield served
    served.stop()


@pytest.fixture
def sandbox(sandbox_server: ServedSandbox) -> tuple[Sandbox, str]:
    """The Slack sandbox over HTTP: `(sandbox, base_url)`; its Web API is at `base_url + '/api/'`."""
    return sandbox_server.sb, sandbox_server.url


@pytest.fixture
def env(
    monkeypatch: pytest.MonkeyPatch,
    redis_server: RedisServer,
    redis: Redis,
    database_url: str,
    policy_file: Path,
    sandbox: tuple[Sandbox, str],
) -> Iterator[dict[str, str]]:
    """The process environment every countersign command reads, pointing at the test components."""
    sb, url = sandbox
    values = {
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": sb.signing_secret,
        "SLACK_API_URL": url + "/api/",
        "REDIS_URL": redis_server.url,
        "DATABASE_URL": database_url,
        "COUNTERSIGN_POLICY": str(policy_file),
        "COUNTERSIGN_SECRET": secrets.token_hex(32),
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    runtime_module.current.cache_clear()
    connections.current.cache_clear()
    directory.clear_cache()
    yield values
    runtime_module.current.cache_clear()
    connections.current.cache_clear()


@pytest.fixture
def runtime(env: dict[str, str]) -> Runtime:
    """The process runtime the RQ jobs use (`runtime.current()`), built from `env`."""
    return runtime_module.current()


@pytest.fixture
def client(runtime: Runtime) -> ApprovalClient:
    return ApprovalClient(runtime.redis, runtime.store)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def bot(runtime: Runtime, sandbox: tuple[Sandbox, str]) -> Iterator[str]:
    """The bot's WSGI app (Bolt) over real HTTP; the sandbox sends its clicks there. Yields the base URL."""
    from countersign.bot.web import create_wsgi

    server = make_server("127.0.0.1", 0, create_wsgi(runtime), _ThreadingWSGIServer, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    sandbox[0].interactivity_url = url + "/slack/events"
    yield url
    server.shutdown()
    server.server_close()
