"""Engines and schema migrations for SQLite and PostgreSQL.

SQLite is for one machine: WAL lets readers run beside the single writer, `busy_timeout` makes a
second writer wait instead of failing, and write transactions start with `BEGIN IMMEDIATE` so a
read-then-write transaction cannot hit SQLITE_BUSY half way (https://www.sqlite.org/wal.html;
SQLAlchemy's SQLite dialect page, "Serializable isolation / Savepoints / Transactional DDL").
Use PostgreSQL as soon as processes run on more than one machine.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from ..exceptions import SchemaOutOfDate

if TYPE_CHECKING:
    from alembic.config import Config

SQLITE_BUSY_TIMEOUT_MILLISECONDS = 10_000
WRITE = {"countersign_write": True}


def create_db_engine(url: str) -> Engine:
    """An `Engine` for `url` (`sqlite:///path` or `postgresql+psycopg://...`).

    `postgresql://` is upgraded to the psycopg 3 driver. For SQLite, each connection gets WAL and
    the busy timeout, and a transaction opened on `engine.execution_options(**WRITE)` begins with
    `BEGIN IMMEDIATE`.
    """
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MILLISECONDS / 1000})
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


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
    config.set_main_option("script_location", str(files("countersign.store") / "migrations"))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the Alembic migrations shipped in `countersign/store/migrations` up to `revision`."""
    from alembic import command

    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def check_schema(engine: Engine) -> None:
    """Raise `SchemaOutOfDate` (one line, naming the fix) unless the database is at the latest
    migration. Connection errors propagate as SQLAlchemy's `OperationalError`."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    if current != head:
        raise SchemaOutOfDate(
            f"DATABASE_URL: the database schema is at {current or 'nothing'}, this version needs {head}; "
            "run `countersign db upgrade`"
        )
