"""Engines and schema migrations for SQLite and PostgreSQL.

SQLite is for one machine: WAL lets readers run beside the single writer, `busy_timeout` makes a
second writer wait instead of failing, and write transactions start with `BEGIN IMMEDIATE` so a
read-then-write transaction cannot hit SQLITE_BUSY half way (https://www.sqlite.org/wal.html;
SQLAlchemy's SQLite dialect page, "Serializable isolation / Savepoints / Transactional DDL").
Use PostgreSQL as soon as processes run on more than one machine. A SQLite file is private to its
owner (0600, `countersign.files`): SQLite creates its `-wal` and `-shm` files with the database
file's mode.
"""

from __future__ import annotations

import logging
import select
import threading
import weakref
from collections.abc import Callable
from importlib.resources import files as resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError

from ..exceptions import SchemaOutOfDate
from ..files import private_file

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MILLISECONDS = 10_000
WRITE = {"countersign_write": True}


def create_db_engine(url: str) -> Engine:
    """An `Engine` for `url` (`sqlite:///path` or `postgresql+psycopg://...`).

    `postgresql://` is upgraded to the psycopg 3 driver, and a pooled connection is checked without
    a round trip when it is checked out (`_alive_on_checkout`). For SQLite, each connection gets WAL and
    the busy timeout, and a transaction opened on `engine.execution_options(**WRITE)` begins with
    `BEGIN IMMEDIATE`, and the database file is created private (0600) or made so.
    """
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() != "sqlite":
        return _postgresql_engine(parsed)
    if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
        _private_database(Path(parsed.database))
    engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MILLISECONDS / 1000})
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _postgresql_engine(url: URL, autocommit: bool = False) -> Engine:
    """A PostgreSQL `Engine` whose pooled connections are checked on checkout (`_alive_on_checkout`);
    with `autocommit`, its connections are in autocommit from their connect on (each statement its
    own transaction: `single_statement_engine`)."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT") if autocommit else create_engine(url)
    event.listen(engine, "checkout", _alive_on_checkout)
    return engine


def single_statement_engine(engine: Engine) -> Engine | None:
    """For a PostgreSQL `engine`, a second `Engine` on its URL whose connections are in autocommit
    from their connect on, for statements that are a transaction of their own (`Queries._connection`,
    `Queries._read`): no BEGIN and COMMIT round trips (psycopg sends each apart). None for SQLite.

    `engine.execution_options(isolation_level="AUTOCOMMIT")` shares `engine`'s pool instead, so it
    turns autocommit on as it checks a connection out and off again as it checks it in (SQLAlchemy's
    "Setting Transaction Isolation Levels including DBAPI Autocommit", which warns of that reset):
    about 70 µs of CPU a statement here (BENCHMARKS.md, "Issue 14, tenth pass"). This engine has a
    pool of its own and is disposed with `engine` (its `engine_disposed` event); statements sent
    through it fire its own events, not `engine`'s (`Queries.engines` lists both). One such engine
    per `engine`, shared by every store made on it (`Store`, `Tokens`, ...)."""
    if engine.dialect.name != "postgresql":
        return None
    with _SINGLE_LOCK:
        single = _SINGLE.get(engine)
        if single is None:
            single = _SINGLE[engine] = _postgresql_engine(engine.url, autocommit=True)
            event.listen(engine, "engine_disposed", _dispose_too(single))
    return single


_SINGLE: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
"""Each PostgreSQL engine's `single_statement_engine`, kept as long as the engine is."""
_SINGLE_LOCK = threading.Lock()


def _dispose_too(single: Engine) -> Callable[[Engine], None]:
    """An `engine_disposed` listener disposing `single` with the engine it listens to."""
    return lambda _engine: single.dispose()


def _alive_on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Refuse a pooled PostgreSQL connection that the server closed or is closing, so that the pool
    replaces it (a `DisconnectionError` raised in the "checkout" event: SQLAlchemy's "Disconnect
    Handling - Pessimistic" recipe, https://docs.sqlalchemy.org/en/20/core/pooling.html). An idle
    connection outside a transaction receives nothing from the server, unless the server ended it
    (a restart, `pg_terminate_backend`, an idle timeout: an error message, then end of file) or
    sends a notice: either makes its socket readable, which `poll` sees without a round trip. This
    replaces `pool_pre_ping`'s `SELECT 1` on every checkout (a round trip per transaction); like it,
    it cannot save a transaction the server drops while it runs."""
    if dbapi_connection.closed or dbapi_connection.broken:
        raise DisconnectionError("the connection is closed")
    idle = select.poll()
    idle.register(dbapi_connection.fileno(), select.POLLIN)
    if idle.poll(0):
        raise DisconnectionError("the server wrote to an idle connection: closed or closing it")


def _private_database(path: Path) -> None:
    """Create the SQLite file `path` private, or tighten it and its `-wal` and `-shm` files. A
    missing directory is left to SQLite to report on connect; a file that cannot be tightened
    (another user's) is used as it is, with a warning."""
    try:
        private_file(path)
        for suffix in ("-wal", "-shm"):
            private_file(path.with_name(path.name + suffix), create=False)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("database file %s not made private: %s", path, exc)


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # let the "begin" hook below issue BEGIN itself
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MILLISECONDS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(conn: Any) -> None:
    write = conn.get_execution_options().get("countersign_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _config() -> Config:
    # Alembic is imported only here: an agent's RQ worker may import countersign in every forked job,
    # and never migrates.
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(resources("countersign.store") / "migrations"))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the Alembic migrations shipped in `countersign/store/migrations` up to `revision`."""
    from alembic import command

    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


NO_SCHEMA = (
    "DATABASE_URL: the database has no countersign schema yet; create it with `countersign db upgrade`"
)
ALEMBIC_VERSION_TABLE = "alembic_version"


def schema_missing(engine: Engine) -> SchemaOutOfDate | None:
    """`SchemaOutOfDate` (`NO_SCHEMA`) when the database answers but was never migrated (it has no
    `alembic_version` table), else None, also when it does not answer. Without Alembic (an agent's
    client asks it after a failed statement, to tell "not migrated" from "unreachable")."""
    try:
        with engine.connect() as connection:
            migrated = inspect(connection).has_table(ALEMBIC_VERSION_TABLE)
    except SQLAlchemyError:
        return None
    return None if migrated else SchemaOutOfDate(NO_SCHEMA)


def check_schema(engine: Engine) -> None:
    """Raise `SchemaOutOfDate` (one line, naming the fix) unless the database is at the latest
    migration. Connection errors propagate as SQLAlchemy's `OperationalError`."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    if current is None:
        raise SchemaOutOfDate(NO_SCHEMA)
    if current != head:
        raise SchemaOutOfDate(
            f"DATABASE_URL: the database schema is at {current}, this version needs {head}; "
            "run `countersign db upgrade`"
        )
