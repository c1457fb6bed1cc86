"""Waiting in process for a decision: read the database once, block on the request's bell, read again.

The wait is written once, as a generator of steps (`steps`): read the request (`Read`), block on its
bell for at most so long (`Listen`), and after a Redis error pause (`Pause`) and check Redis answers
again (`Ping`). `run` performs the steps with a blocking Redis client (`ApprovalClient.wait`),
`run_async` with an asyncio one, the database read in a thread (`AsyncApprovalClient.wait`).

The database is read before the first block, after each ring, after each reconnect (a ring may
have been lost while Redis was away: a restart without persistence forgets it) and once at the
deadline; never in a loop on a clock. A bell that is not rung within one block (at most
`bell.MAX_BLOCK_SECONDS`, and under the client's `socket_timeout`) is simply blocked on again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from .. import bell
from ..decision import Decision
from ..exceptions import RequestDeadLettered, RouterUnavailable, SchemaOutOfDate, WaitTimeout
from ..store import Store, schema_missing

log = logging.getLogger(__name__)

FIRST_PAUSE_SECONDS = 0.05
"""After a Redis error, the first pause before asking Redis again; it doubles up to `MAX_PAUSE_SECONDS`."""
MAX_PAUSE_SECONDS = 1.0
SOCKET_MARGIN_SECONDS = 1.0
"""A block ends this long before the Redis client's `socket_timeout` would cut it."""


class Read(NamedTuple):
    """Read `request_id` from the database: its `Decision`, or the id whose bell to wait on."""

    request_id: str


class Listen(NamedTuple):
    """Block on `request_id`'s bell for at most `seconds`: True when rung."""

    request_id: str
    seconds: float


class Pause(NamedTuple):
    """Sleep `seconds` (between attempts to reach Redis again)."""

    seconds: float


class Ping(NamedTuple):
    """Ask Redis whether it answers (raises redis-py's `RedisError` while it does not)."""


Step = Read | Listen | Pause | Ping
Found = Decision | str
"""What a `Read` gives: the decision, or the id of the undecided request to wait on."""
Lookup = Callable[[str], Any]
"""`ApprovalClient.get`: the full look-up of an id that is no stored request (queued, dead letter,
a repeat of another request)."""


def read(store: Store, lookup: Lookup, request_id: str) -> Found:
    """The decision of `request_id`, or the id of the undecided request to wait on (its own, or for a
    repeat that intake found to be an earlier request, that one's). A stored request takes one or two
    SELECTs; a queued one a few more (`lookup`). Raises `RequestDeadLettered`, `UnknownRequest`,
    and `RouterUnavailable` when the database (or, for a queued request, Redis) cannot be read."""
    try:
        event = store.outbox_event(request_id)
        if event is not None:
            return Decision.from_json(event.body)
        if store.get(request_id) is not None:
            return request_id
        state = lookup(request_id)
    except SQLAlchemyError as exc:
        raise database_error(store, exc, "wait again") from exc
    except RedisError as exc:
        why = type(exc).__name__
        raise RouterUnavailable(f"the router's store is unreachable ({why}); wait again") from exc
    if state.status == "dead_letter":
        raise RequestDeadLettered(request_id, state.reason)
    return Decision.from_json(state.decision) if state.decision is not None else str(state.request_id)


def database_error(store: Store, exc: SQLAlchemyError, then: str) -> SchemaOutOfDate | RouterUnavailable:
    """What a statement of the agent's client that failed with `exc` means: `SchemaOutOfDate` when
    the database answers but was never migrated (one line naming `DATABASE_URL` and `countersign db
    upgrade`: `store.schema_missing`), else `RouterUnavailable` ("the database is unreachable
    (OperationalError); " and `then`, what to do: e.g. "wait again")."""
    missing = schema_missing(store.engine)
    return missing or RouterUnavailable(f"the database is unreachable ({type(exc).__name__}); {then}")


def steps(request_id: str, timeout: float, longest_block: float) -> Generator[Step, Any, Decision]:
    """The wait for `request_id`'s decision, at most `timeout` seconds, as steps for `run` or
    `run_async` (each step's result is sent back in; a `RedisError` is thrown back in). Returns the
    decision; raises `WaitTimeout` at the deadline, and what `read` raises. Raises at once
    `TypeError` for a `timeout` that is not a number, `ValueError` for one below 0 or not finite
    (NaN never reaches its deadline, so the wait would never end)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout: {_SECONDS}, not {timeout!r}")
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout: {_SECONDS}, not {timeout!r}")
    return _steps(request_id, timeout + 0.0, longest_block)  # + 0.0: -0.0 is 0 s


_SECONDS = "a finite number of seconds, 0 or more"


def _steps(request_id: str, timeout: float, longest_block: float) -> Generator[Step, Any, Decision]:
    deadline = time.monotonic() + timeout
    found: Found = yield Read(request_id)
    while not isinstance(found, Decision):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            found = yield Read(request_id)  # once at the deadline: a ring lost with Redis costs no more
            if isinstance(found, Decision):
                return found
            raise WaitTimeout(request_id, timeout)
        try:
            rung = yield Listen(found, min(remaining, longest_block))
        except RedisError as exc:
            log.warning("request %s: the bell's Redis failed (%s); waiting for it to answer", found, exc)
            rung = yield from _reconnect(deadline)
        if rung:
            found = yield Read(request_id)
    return found


def _reconnect(deadline: float) -> Generator[Step, Any, bool]:
    """Pause and ping until Redis answers (True: read again, a ring may be lost) or the deadline."""
    pause = FIRST_PAUSE_SECONDS
    while (remaining := deadline - time.monotonic()) > 0:
        yield Pause(min(pause, remaining))
        try:
            yield Ping()
            return True
        except RedisError:
            pause = min(2 * pause, MAX_PAUSE_SECONDS)
    return False


def longest_block(redis: Redis | AsyncRedis) -> float:
    """The longest one block on a bell may last with this client, in seconds: `bell.MAX_BLOCK_SECONDS`,
    or less under its `socket_timeout` (else redis-py would cut the block as a lost connection)."""
    socket_timeout = redis.connection_pool.connection_kwargs.get("socket_timeout")
    if socket_timeout is None:
        return bell.MAX_BLOCK_SECONDS
    return max(0.1, min(bell.MAX_BLOCK_SECONDS, float(socket_timeout) - SOCKET_MARGIN_SECONDS))


def run(wait: Generator[Step, Any, Decision], redis: Redis, read_one: Callable[[str], Found]) -> Decision:
    """Perform the steps of `wait` with a blocking Redis client and `read_one` (`read`, bound)."""
    reply: Any = None
    error: RedisError | None = None
    while not isinstance(step := _advance(wait, reply, error), Decision):
        reply, error = None, None
        try:
            if isinstance(step, Read):
                reply = read_one(step.request_id)
            elif isinstance(step, Listen):
                reply = bell.listen(redis, step.request_id, step.seconds)
            elif isinstance(step, Pause):
                time.sleep(step.seconds)
            else:
                reply = redis.ping()
        except RedisError as exc:
            error = exc
    return step


async def run_async(
    wait: Generator[Step, Any, Decision], redis: AsyncRedis, read_one: Callable[[str], Found]
) -> Decision:
    """`run` with an asyncio Redis client; `read_one` runs in a thread (`asyncio.to_thread`), off the
    event loop."""
    reply: Any = None
    error: RedisError | None = None
    while not isinstance(step := _advance(wait, reply, error), Decision):
        reply, error = None, None
        try:
            if isinstance(step, Read):
                reply = await asyncio.to_thread(read_one, step.request_id)
            elif isinstance(step, Listen):
                reply = await bell.listen_async(redis, step.request_id, step.seconds)
            elif isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
            else:
                reply = await redis.ping()  # type: ignore[misc]
        except RedisError as exc:
            error = exc
    return step


def _advance(wait: Generator[Step, Any, Decision], reply: Any, error: RedisError | None) -> Step | Decision:
    """The next step of `wait`, given the last one's `reply` or `error`; or the decision it returned."""
    try:
        return wait.throw(error) if error is not None else wait.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
