"""The journal of acknowledged reviewer actions: a click Slack has its ack for is not lost with the
web process that was recording it.

Slack wants the ack within 3 s, before the decision is written (bot.app), so between the ack and
the commit a reviewer's action lives only in the web process. `act` writes it to a Redis sorted set
first (scored by this host's clock, in seconds) and removes it once the decision work has ended,
whatever its result. An action still there `REPLAY_AFTER_SECONDS` later belonged to a process that
died: the router worker's sweep replays it (`replay`), unless the store shows the reviewer's vote
or decision already (the process died after its commit). While the database refuses, the action is
kept and tried again; after `GIVE_UP_AFTER_SECONDS` the reviewer is told it was not recorded.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from typing import Literal, cast

from redis import Redis
from redis.exceptions import RedisError
from slack_sdk import WebClient
from ulid import ULID

from . import delivery, review, texts
from .review import Action
from .runtime import Runtime

log = logging.getLogger(__name__)

JOURNAL_KEY = "countersign:acked"
REPLAY_AFTER_SECONDS = 60
GIVE_UP_AFTER_SECONDS = 3600


def act(runtime: Runtime, client: WebClient, action: Action) -> review.Settled | Literal["unknown_request"]:
    """`review.act`, journaled while it runs. Raises what `review.act` raises (the caller tells the
    reviewer); a Redis error on the journal is logged and the action goes on unjournaled."""
    entry = record(runtime.redis, action)
    try:
        return review.act(runtime, client, action)
    finally:
        if entry is not None:
            forget(runtime.redis, entry)


def replay(runtime: Runtime, older_than_seconds: float = REPLAY_AFTER_SECONDS, limit: int = 100) -> int:
    """Replay the journaled actions older than `older_than_seconds` (their process died before it
    finished them). Returns how many were settled (replayed, found recorded, or given up)."""
    cutoff = time.time() - older_than_seconds
    entries = cast(list[bytes], runtime.redis.zrangebyscore(JOURNAL_KEY, "-inf", cutoff, 0, limit))
    return sum(_replay_one(runtime, entry.decode()) for entry in entries)


def _replay_one(runtime: Runtime, entry: str) -> bool:
    """Replay one journaled action; True when it is settled and dropped from the journal."""
    fields = json.loads(entry)
    age = time.time() - fields.pop("at")
    fields.pop("id")
    action = Action(**fields)
    what = f"{action.kind} of request {action.request_id}"
    try:
        if not review.already_recorded(runtime, action):
            log.warning("replaying the %s, acked by a process that died", what)
            review.act(runtime, runtime.slack, action)
    except Exception as exc:
        if age < GIVE_UP_AFTER_SECONDS:
            log.warning("replay of the %s failed (%s); trying again", what, exc)
            return False
        user_id = action.user["slack_user_id"]
        delivery.tell(runtime.slack, action.channel, user_id, texts.not_recorded(type(exc).__name__))
    forget(runtime.redis, entry)
    return True


def record(redis: Redis, action: Action) -> str | None:
    """Journal `action` now; returns its entry (for `forget`), or None when Redis refused (logged)."""
    entry = json.dumps({"id": str(ULID()), "at": time.time(), **asdict(action)}, sort_keys=True)
    try:
        redis.zadd(JOURNAL_KEY, {entry: time.time()})
    except RedisError as exc:
        log.warning("action on request %s not journaled (%s)", action.request_id, exc)
        return None
    return entry


def forget(redis: Redis, entry: str) -> None:
    """Drop a journal entry: its action has ended (a Redis error is logged; a replay then finds the
    action recorded)."""
    try:
        redis.zrem(JOURNAL_KEY, entry)
    except RedisError as exc:  # a replay later finds the action recorded and drops it
        log.warning("journal entry not removed (%s)", exc)
