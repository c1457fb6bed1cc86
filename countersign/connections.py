"""The database and Redis connections of a countersign process, built once from `Settings`.

RQ jobs receive only JSON arguments, so a job finds its connections through `current()`: an
agent's resume job through this module, a router job through `router.runtime.current()` (which
adds the Slack client and the policy).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property

from redis import Redis

from .config import Settings, load_settings
from .store import Store

REDIS_CONNECT_TIMEOUT_SECONDS = 5
REDIS_TIMEOUT_SECONDS = 10


@dataclass
class Connections:
    """Lazily built clients for one process. Each property raises `ConfigError` if its setting is
    malformed."""

    settings: Settings

    @cached_property
    def store(self) -> Store:
        """The database (`DATABASE_URL`)."""
        return Store.from_url(self.settings.DATABASE_URL)

    @cached_property
    def redis(self) -> Redis:
        """The RQ transport (`REDIS_URL`)."""
        return Redis.from_url(
            self.settings.REDIS_URL,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS,
            socket_timeout=REDIS_TIMEOUT_SECONDS,
        )


@functools.cache
def current() -> Connections:
    """This process's `Connections`, from the environment. Tests call `current.cache_clear()`."""
    return Connections(load_settings())
