"""Which reviewers' App Home tabs are due a refresh, and the pace of `views.publish`, in Redis.

A change to a request (its card posted or rewritten: new, voted on, decided, expired, escalated)
marks the approvers it concerns due in `DEBOUNCE_SECONDS` (`mark_due`); marking one already due
keeps the earlier time, so a burst of changes costs one publish per reviewer and window, not one per
change. The sweep takes the due ones (`take_due`) within the pace: `views.publish` is Tier 4, 100+ a
minute per workspace (https://docs.slack.dev/apis/web-api/rate-limits), so at most
`PUBLISHES_PER_MINUTE` a minute are taken, counted in Redis across every process; the rest stay due
for the next minute. Every key has a TTL; times are Redis's clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from redis import Redis

DUE_KEY = "countersign:home:due"  # sorted set: Slack user id -> when their Home is due (unix s)
SPENT_PREFIX = "countersign:home:spent:"  # + unix minute: views.publish calls made in that minute
DEBOUNCE_SECONDS = 3
PUBLISHES_PER_MINUTE = 90  # Tier 4's 100+ a minute, with room for a 429's retry
DUE_TTL_SECONDS = 3600

# A Lua function, also part of intake's one script (`router/intake.py`): marks the users in
# ARGV[first..] due at `due` (unix s) in the due set `key`, unless due already (NX keeps the earlier
# time), in one ZADD per 500 users (Lua's `unpack` has a limit), and gives the set `ttl` seconds.
MARK_LUA = """
local function mark_due(key, due, ttl, first)
    for i = first, #ARGV, 500 do
        local members = {}
        for j = i, math.min(i + 499, #ARGV) do
            members[#members + 1] = due
            members[#members + 1] = ARGV[j]
        end
        redis.call('ZADD', key, 'NX', unpack(members))
    end
    redis.call('EXPIRE', key, ttl)
end
"""

# KEYS: the due set; ARGV: seconds from now, TTL of the set, then the users.
_MARK = (
    MARK_LUA
    + """
mark_due(KEYS[1], tonumber(redis.call('TIME')[1]) + tonumber(ARGV[1]), tonumber(ARGV[2]), 3)
"""
)

# KEYS: the due set; ARGV: spent key prefix, per-minute budget, at most this many. Takes the users
# due now (Redis's clock), oldest first, as many as the minute's budget leaves, and counts them spent.
_TAKE = """
local now = tonumber(redis.call('TIME')[1])
local spent_key = ARGV[1] .. math.floor(now / 60)
local room = tonumber(ARGV[2]) - tonumber(redis.call('GET', spent_key) or 0)
if room <= 0 then return {} end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, math.min(room, tonumber(ARGV[3])))
if #due > 0 then
    redis.call('ZREM', KEYS[1], unpack(due))
    redis.call('INCRBY', spent_key, #due)
    redis.call('EXPIRE', spent_key, 120)
end
return due
"""

# ARGV: spent key prefix, per-minute budget. 1 (and counted) when a publish fits this minute, else 0.
_SPEND = """
local now = tonumber(redis.call('TIME')[1])
local spent_key = ARGV[1] .. math.floor(now / 60)
if tonumber(redis.call('GET', spent_key) or 0) >= tonumber(ARGV[2]) then return 0 end
redis.call('INCR', spent_key)
redis.call('EXPIRE', spent_key, 120)
return 1
"""


def mark_due(redis: Redis, users: Iterable[str], seconds: int = DEBOUNCE_SECONDS) -> None:
    """Mark these Slack users' Home tabs due in `seconds` (Redis's clock), keeping an earlier time
    for one already due."""
    users = list(users)
    if users:
        redis.register_script(_MARK)(keys=[DUE_KEY], args=[seconds, DUE_TTL_SECONDS, *users])


def take_due(redis: Redis, limit: int, budget: int = PUBLISHES_PER_MINUTE) -> list[str]:
    """The users whose Home is due now, at most `limit` and what is left of this minute's `budget`
    of publishes (which they are counted against), oldest due first; atomic (one Lua script)."""
    taken = redis.register_script(_TAKE)(keys=[DUE_KEY], args=[SPENT_PREFIX, budget, limit])
    return [user.decode() if isinstance(user, bytes) else str(user) for user in taken]


def spend(redis: Redis, budget: int = PUBLISHES_PER_MINUTE) -> bool:
    """Count one publish outside the sweep (a user opening their Home) against this minute's
    `budget`: True when it fits, False when the minute is spent (then mark the user due instead)."""
    return bool(redis.register_script(_SPEND)(args=[SPENT_PREFIX, budget]))
