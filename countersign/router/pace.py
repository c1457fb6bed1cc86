"""A card's time in its channel: Slack allows about one message a second per channel
(https://docs.slack.dev/apis/web-api/rate-limits, chat.postMessage), so each card reserves a posting
time in Redis, once, `PACE_MILLISECONDS` after the channel's previous one and not before now (a Lua
script on Redis's clock, keyed by request, level and channel). A reservation whose time passed more than
`LAPSED_MILLISECONDS` ago (the router was down, say) has lapsed: the card reserves anew, so cards whose
times all passed while no worker ran post at the pace again, not all at once. `router/delivery.py` posts
a card whose time has come and leaves the others to wait for theirs; `countersign show` reads the time a
card waits for (`expected_card`).
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

from redis import Redis

from ..store import Request

# One card per channel every 1.1 s: Slack allows about one a second with short bursts, so posting at
# exactly 1/s leaves no slack, and any delay (a late scheduler tick, a slow job) is followed by a
# catch-up burst that drains Slack's allowance and draws 429s. The 10% margin refills it.
PACE_MILLISECONDS = 1100
# A card may post this much before its reserved time: the job is rescheduled by this host's clock,
# the time was reserved on Redis's, and a few milliseconds between the two must not cost a second.
CLOCK_SLACK_SECONDS = 0.01
# A reservation this far in the past has lapsed and is reserved anew: a job runs at the whole second
# at or after its time, found by a scheduler that looks each second, so one on time is up to about
# 2 s late; one later than that missed its turn, and the cards after it have posted or will.
LAPSED_MILLISECONDS = 2 * PACE_MILLISECONDS

# The channel's next free posting time, reserved once per card (unix milliseconds, Redis's clock, so
# one clock for every worker), and anew once lapsed: a Lua function, also part of intake's one script
# (`router/intake.py`). Takes the channel's next free time's key, this card's reservation's key, pace
# ms, ms after its time a reservation lapses, and Redis's time (ms). Returns the card's reserved ms,
# channel's next free ms.
RESERVE_LUA = """
local function reserve(channel_key, card_key, pace, lapsed, now)
    local slot = tonumber(redis.call('GET', card_key))
    if slot and slot >= now - lapsed then
        return slot, tonumber(redis.call('GET', channel_key) or 0)
    end
    slot = math.max(tonumber(redis.call('GET', channel_key) or 0), now)
    redis.call('SET', channel_key, slot + pace, 'PX', slot + pace - now)
    redis.call('SET', card_key, slot, 'PX', slot - now + lapsed)
    return slot, slot + pace
end
"""

# KEYS: the channel's next free time, this card's reservation; ARGV: pace ms, ms after its time a
# reservation lapses. Returns {reserved ms, channel's next free ms, clock seconds, clock µs}.
_RESERVE_SLOT = (
    RESERVE_LUA
    + """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local slot, free = reserve(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), now)
return {slot, free, tonumber(time[1]), tonumber(time[2])}
"""
)


class Slot(NamedTuple):
    """A card's reserved time in its channel: `due`, on this process's `time.monotonic()` clock
    (`wait`: the seconds still to go), `ahead` cards reserved before it whose time had not come when
    it was read, and `backlog` such cards in the channel in all, this one included (counted from
    the times, one per `PACE_MILLISECONDS`)."""

    due: float
    ahead: int
    backlog: int

    @property
    def wait(self) -> float:
        """Seconds from now to the card's time (<= 0: post now)."""
        return self.due - time.monotonic()

    @classmethod
    def of(cls, slot_ms: int, free_ms: int, now_ms: float) -> Slot:
        """The slot reserved at `slot_ms` in a channel whose next free time is `free_ms`, read at
        `now_ms` (unix milliseconds, Redis's clock)."""
        return cls(
            time.monotonic() + (slot_ms - now_ms) / 1000,
            max(0, round((slot_ms - now_ms) / PACE_MILLISECONDS)),
            max(0, round((free_ms - now_ms) / PACE_MILLISECONDS)),
        )


def reserve_slot(redis: Redis, row: Request) -> Slot:
    """The time reserved for this card in its channel, and the channel's backlog.

    The first call for a card (request id, level, channel) reserves the channel's next free time,
    `PACE_MILLISECONDS` after the previous reservation and not before now (Redis's clock); later
    calls return the same time, so a job run again keeps its place, until it lapses (over
    `LAPSED_MILLISECONDS` past: the card missed its turn) and the card reserves the next free time
    instead. Atomic in Redis (a Lua script).
    """
    slot, free, seconds, micros = redis.register_script(_RESERVE_SLOT)(
        keys=slot_keys(row.channel, row.id, row.level), args=[PACE_MILLISECONDS, LAPSED_MILLISECONDS]
    )
    return Slot.of(slot, free, seconds * 1000 + micros / 1000)


def expected_card(redis: Redis, row: Request) -> dict[str, Any]:
    """When the card of a pending request that has none yet is expected, for `countersign show`:
    `{channel, ts: None, expected, scheduled_in_seconds, cards_ahead}`, `expected` reading e.g.
    "card scheduled in 412 s, 374 cards ahead in C0FINANCE" (its reserved time in the channel).
    With no time reserved, or its time past, `expected` says the worker is still to post it (the
    audit trail says what it waits for) and the two numbers are null. Reads only."""
    channel_key, card_key = slot_keys(row.channel, row.id, row.level)
    with redis.pipeline() as pipe:  # MULTI/EXEC: the clock and both times at one moment
        pipe.time()
        pipe.get(card_key)
        pipe.get(channel_key)
        (seconds, micros), slot_ms, free_ms = pipe.execute()
    now_ms = seconds * 1000 + micros / 1000
    slot = None if slot_ms is None else Slot.of(int(slot_ms), int(free_ms or 0), now_ms)
    card: dict[str, Any] = {"channel": row.channel, "ts": None}
    if slot is None or slot.wait <= 0:
        expected = f"card not posted yet and not waiting for a time in {row.channel}; the worker posts it"
        return card | {"expected": expected, "scheduled_in_seconds": None, "cards_ahead": None}
    return card | {
        "expected": f"card scheduled in {slot.wait:.0f} s, {slot.ahead} cards ahead in {row.channel}",
        "scheduled_in_seconds": round(slot.wait),
        "cards_ahead": slot.ahead,
    }


def give_up_slot(redis: Redis, row: Request) -> None:
    """Forget this card's reserved time (Slack asked to wait after all): its next run reserves anew."""
    redis.delete(slot_keys(row.channel, row.id, row.level)[1])


def slot_keys(channel: str, request_id: str, level: int) -> list[str]:
    """The Redis keys of the channel's next free time and of the reservation of the card of
    `request_id` at `level` in it."""
    channel_key = f"countersign:pace:{channel}"
    return [channel_key, f"{channel_key}:{request_id}:{level}"]


class HeldOff:
    """The Web API methods Slack answered 429 for, each held off in this process until its
    `Retry-After` has passed. Slack counts a method's calls per workspace and app (chat.update: Tier 3,
    50+ a minute) and asks a client over its limit to wait that many seconds before calling it
    again (https://docs.slack.dev/apis/web-api/rate-limits): a call meanwhile only draws another 429.
    Safe to share between threads (a race at worst calls Slack once more)."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}  # method -> time.monotonic() it may be called again

    def hold(self, method: str, seconds: int) -> None:
        """Hold `method` off for `seconds` from now (never shortening a longer hold)."""
        self._until[method] = max(self._until.get(method, 0.0), time.monotonic() + seconds)

    def seconds_left(self, method: str) -> int:
        """Whole seconds (rounded up) until `method` may be called again; 0 when it may now."""
        left = self._until.get(method, 0.0) - time.monotonic()
        return math.ceil(left) if left > 0 else 0
