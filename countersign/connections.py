"""The database and Redis connections of a countersign process, built once from `Settings`.

RQ jobs receive only JSON arguments, so a job finds its connections through `current()`: an
agent's resume job through this module, a router job through `router.runtime.current()` (which
adds the Slack client and the policy).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from .config import Settings, load_settings
from .exceptions import ConfigError, ServiceUnavailable
from .store import Store, check_schema

REDIS_CONNECT_TIMEOUT_SECONDS = 5
REDIS_TIMEOUT_SECONDS = 10
"""A server's (and a library client's) Redis timeouts: to connect, and for each answer, in seconds. A
`countersign` command uses `COUNTERSIGN_CLI_REDIS_TIMEOUT_SECONDS` for both (`Connections.for_cli`)."""


@dataclass
class Connections:
    """Lazily built clients for one process. Each property raises `ConfigError` if its setting is
    malformed. `redis_timeout`: seconds Redis has to connect and to answer each command (None: the
    servers' `REDIS_CONNECT_TIMEOUT_SECONDS` and `REDIS_TIMEOUT_SECONDS`)."""

    settings: Settings
    redis_timeout: float | None = None

    @classmethod
    def for_cli(cls, settings: Settings) -> Connections:
        """The connections of a `countersign` command: a Redis that does not answer (down, or hung)
        fails it within `COUNTERSIGN_CLI_REDIS_TIMEOUT_SECONDS`, in one line naming `REDIS_URL`."""
        return cls(settings, redis_timeout=settings.COUNTERSIGN_CLI_REDIS_TIMEOUT_SECONDS)

    @cached_property
    def store(self) -> Store:
        """The database (`DATABASE_URL`)."""
        return Store.from_url(self.settings.DATABASE_URL)

    @cached_property
    def redis(self) -> Redis:
        """The RQ transport (`REDIS_URL`)."""
        return Redis.from_url(
            self.settings.REDIS_URL,
            socket_connect_timeout=self.redis_timeout or REDIS_CONNECT_TIMEOUT_SECONDS,
            socket_timeout=self.redis_timeout or REDIS_TIMEOUT_SECONDS,
        )

    def check(self) -> None:
        """A command's start-up check: the database answers and is at the latest schema, and Redis
        answers. Raises `ServiceUnavailable` naming `DATABASE_URL` or `REDIS_URL` when one does not
        answer, `SchemaOutOfDate` when the database is not migrated."""
        self.check_database()
        self._check_redis()

    def check_database(self, read_only: bool = False) -> None:
        """The database half of `check`. `read_only`: the command only reads (`show`), so a SQLite
        file that does not exist is refused (`ConfigError` naming `DATABASE_URL`) rather than
        created empty. Raises `ServiceUnavailable` naming `DATABASE_URL` when it does not answer."""
        if read_only:
            self.check_sqlite_file()
        try:
            check_schema(self.store.engine)
        except SQLAlchemyError as exc:
            raise database_unreachable(self.settings, exc) from None

    def check_sqlite_file(self) -> None:
        """Raise `ConfigError` naming `DATABASE_URL` (and `countersign db upgrade`) when it names a
        SQLite file that does not exist, without connecting: a connection would create it empty."""
        url = make_url(self.settings.DATABASE_URL)
        path = url.database or ""
        on_disk = url.get_backend_name() == "sqlite" and path != ":memory:" and not path.startswith("file:")
        if on_disk and path and not Path(path).exists():  # connecting would create an empty file
            raise ConfigError(
                f"DATABASE_URL: no SQLite database at {self.settings.shown('DATABASE_URL')}; "
                "create it with `countersign db upgrade`, or set DATABASE_URL to an existing one"
            )

    def _check_redis(self) -> None:
        try:
            self.redis.ping()
        except RedisError as exc:
            raise ServiceUnavailable(
                f"REDIS_URL: Redis does not answer at {self.settings.shown('REDIS_URL')} "
                f"({str(exc).rstrip('.')}); start it, or set REDIS_URL to one that runs"
            ) from None


def migrate(settings: Settings) -> None:
    """Bring the database at `DATABASE_URL` to the latest schema (Alembic). Raises
    `ServiceUnavailable` naming `DATABASE_URL` when it cannot be used."""
    from .store import create_db_engine, upgrade

    try:
        upgrade(create_db_engine(settings.DATABASE_URL))
    except SQLAlchemyError as exc:
        raise database_unreachable(settings, exc) from None


def database_unreachable(settings: Settings, exc: SQLAlchemyError) -> ServiceUnavailable:
    """The one-line `ServiceUnavailable` naming `DATABASE_URL` for a database that cannot be used."""
    first = str(getattr(exc, "orig", None) or exc).splitlines()[0].rstrip(".")
    return ServiceUnavailable(
        f"DATABASE_URL: cannot use the database at {settings.shown('DATABASE_URL')} ({first}); "
        "check that it runs and that DATABASE_URL names it"
    )


@functools.cache
def current() -> Connections:
    """This process's `Connections`, from the environment. Tests call `current.cache_clear()`."""
    return Connections(load_settings())
