"""Logging a periodic loop's failures without flooding the terminal: a lost connection is logged once
(one line naming the error; a traceback only for a failure of another kind), each failing step then
at most one short line every `REPEAT_SECONDS`, and the connection's return once ("Redis reachable
again after 31 s").

The router worker's sweep runs about ten steps a second (`router.worker.sweep_forever`); with Redis
or the database gone every one of them fails every tick, and a traceback each would be thousands of
lines a minute that hide the one that matters. `Steps` runs the steps and keeps the log readable;
`Throttled` does the same for a library's own retry lines (RQ's "could not connect to Redis
instance ... retrying").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError

REPEAT_SECONDS = 30.0
"""The shortest time between two lines about the same failing step (or library message)."""


def lost(exc: BaseException) -> str | None:
    """What a failure says is unreachable: `Redis` (redis-py's connection errors and timeouts),
    `the database` (a DBAPI error that invalidated its connection: the server is gone), or None for
    any other failure (a bug, a refusal)."""
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
        return "Redis"
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return "the database"
    return None


def summary(exc: BaseException) -> str:
    """`exc` in one short line: its type and its message's first 200 characters, white space folded."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


class Steps:
    """Runs named steps (`run`), logging to `log`: the first failure of a connection (`lost`) as one
    error line (type and message, no traceback), the first failure of a step for another reason
    with its traceback, and after that one short line per failing step at most every `every` seconds
    (of `clock`); once every step that failed for a connection has run again, one line saying it is
    reachable again."""

    def __init__(
        self,
        log: logging.Logger,
        every: float = REPEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.every, self.clock = log, every, clock
        self.down_since: dict[str, float] = {}  # what is unreachable -> since when
        self.failing: dict[str, str | None] = {}  # failing step -> what it lost (None: another failure)
        self.logged_at: dict[str, float] = {}  # failing step -> when it was last logged

    def run(self, name: str, step: Callable[[], object]) -> None:
        """Run `step`; a failure (any `Exception`) is logged as above, never raised."""
        try:
            step()
        except Exception as exc:
            self._failed(name, exc)
        else:
            self._ran(name)

    def _failed(self, name: str, exc: Exception) -> None:
        now, what = self.clock(), lost(exc)
        first = name not in self.failing
        self.failing[name] = what
        if what is not None and what not in self.down_since:
            self.down_since[what] = now
            self.log.error(
                "%s unreachable (%s): retrying every step; one line per failing step every %g s "
                "until it answers",
                what,
                summary(exc),
                self.every,
            )  # no traceback: a refused or timed-out connection says all it has in that one line
        elif first:  # a connection already said lost needs no line of its own yet
            if what is None:
                self.log.error("sweep step %s failed; retrying", name, exc_info=exc)
        elif now - self.logged_at.get(name, now - self.every) >= self.every:
            self.log.warning("sweep step %s still failing (%s)", name, summary(exc))
        else:
            return
        self.logged_at[name] = now

    def _ran(self, name: str) -> None:
        if name not in self.failing:
            return
        what = self.failing.pop(name)
        self.logged_at.pop(name, None)
        if what is None:
            self.log.info("sweep step %s ran again", name)
        elif what not in self.failing.values():
            since = self.down_since.pop(what)
            self.log.warning("%s reachable again after %.0f s", what, self.clock() - since)


class Throttled(logging.Filter):
    """A filter passing a record whose message (its format string) contains `part` at most once every `every`
    seconds (of `clock`), with a count of those dropped since; every other record passes."""

    def __init__(self, part: str, every: float = REPEAT_SECONDS, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.part, self.every, self.clock = part, every, clock
        self.passed_at: float | None = None
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self.part not in str(record.msg):
            return True
        now, last = self.clock(), self.passed_at
        if last is not None and now - last < self.every:
            self.dropped += 1
            return False
        if last is not None and self.dropped:
            record.msg = f"{record.msg} ({self.dropped} such lines in the last %.0f s not shown)"
            record.args = (*(record.args if isinstance(record.args, tuple) else ()), now - last)
        self.passed_at, self.dropped = now, 0
        return True


RQ_RECONNECTS = Throttled("could not connect to Redis instance")
"""RQ's workers log each reconnection attempt while Redis is gone (their dequeue loop and their pubsub
thread, every 2 s or so); one line every `REPEAT_SECONDS` is enough."""


def throttle_rq_reconnects() -> None:
    """Let RQ's "could not connect to Redis instance … retrying" lines (logger `rq.worker`) through
    once every `REPEAT_SECONDS` in this process (`RQ_RECONNECTS`; adding it twice adds it once)."""
    logging.getLogger("rq.worker").addFilter(RQ_RECONNECTS)
