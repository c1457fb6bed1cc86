"""Intake limits (the policy's `limits`, DESIGN.md "Policy file"): how many requests one requester
may have accepted of one action class in any 60 seconds, and pending at once. Intake checks them
before it stores a request (`intake.handle`) and dead-letters one over either, with a reason naming
the limit; a dead letter frees the request's idempotency key, so the agent may send it again later.
So a burst is refused at once instead of queueing cards in its channel for an hour.

- **Rate**: a sliding window of 60 s in Redis, one sorted set per action class and requester (request
  id → Redis's time), checked and recorded in one Lua script, so two router workers cannot both take
  the last place. A request is counted once however often its intake job runs; a refused one is not
  counted.
- **Pending**: counted in the database (`Store.pending_count`, up to the limit), which knows what is
  pending. Router workers taking one requester's requests at the same moment may each find room for
  one more, so the count can pass the limit by at most the number of router workers.

The requester is the name the agent gives: the limits contain a runaway agent, not one that makes
up a new name for each request (the timeouts, which count from the card, keep such a flood from
getting anything past a human: `store.Store.schedule_card`, `attach_card`).
"""

from __future__ import annotations

import math

from ..exceptions import IntakeLimitReached
from ..schema import ApprovalRequestV1
from .policy import Policy
from .runtime import Runtime

RATE_WINDOW_MILLISECONDS = 60_000

# KEYS: the window of one action class and requester; ARGV: request id, limit, window ms. Returns 0
# when the request is counted (now or by an earlier run), else the ms until the oldest leaves the window.
_ADMIT = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    return 0
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return tonumber(oldest[2]) + window - now
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], window)
return 0
"""


def admit(runtime: Runtime, policy: Policy, request: ApprovalRequestV1, request_id: str) -> None:
    """Count `request` (to be stored as `request_id`) against its action class's limits in `policy`.

    Raises `IntakeLimitReached`, naming the limit and when to send it again, when its requester
    already has `limits.pending` requests of the class pending, or had `limits.per_minute` accepted
    in the last 60 s (Redis's clock). Counting the same `request_id` again changes nothing.
    """
    limits = policy.limits(request.action)
    who = f"requester {request.requester!r} has"
    limit = f"(policy v{policy.version} limits"
    pending = runtime.store.pending_count(request.action, request.requester, up_to=limits.pending)
    if pending >= limits.pending:
        raise IntakeLimitReached(
            f"intake limit: {who} {pending} {request.action} requests pending {limit}.pending: "
            f"{limits.pending}); send it again once fewer are pending"
        )
    wait = int(
        runtime.redis.register_script(_ADMIT)(
            keys=[rate_key(request.action, request.requester)],
            args=[request_id, limits.per_minute, RATE_WINDOW_MILLISECONDS],
        )
    )
    if wait:
        raise IntakeLimitReached(
            f"intake limit: {who} sent {limits.per_minute} {request.action} requests in the last 60 s "
            f"{limit}.per_minute: {limits.per_minute}); send it again in {math.ceil(wait / 1000)} s"
        )


def rate_key(action: str, requester: str) -> str:
    """The Redis key of the rate window of one action class and requester (an action class has no
    `:`, so no two pairs share a key)."""
    return f"countersign:rate:{action}:{requester}"
