"""Intake limits (the policy's `limits`, DESIGN.md "Policy file"): how many requests one requester
may have accepted of one action class in any 60 seconds, and pending at once. Intake checks them
before it stores a request (`intake.handle`) and dead-letters one over either, with a reason naming
the limit; a dead letter frees the request's idempotency key, so the agent may send it again later.
So a burst is refused at once instead of queueing cards in its channel for an hour.

- **Rate**: a sliding window of 60 s in Redis, one sorted set per action class and requester (request id
  → Redis's time), checked and recorded in one Lua script (`ADMIT_LUA`, part of the one script intake
  sends before it stores a request), so two router workers cannot both take the last place. A request is
  counted once however often its intake job runs; a refused one is not counted.
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

# A Lua function, part of intake's one script (`router/intake.py`): counts `member` (a request id) in
# the window `key` of one action class and requester at `now` (Redis's time, ms), unless counted
# already. Returns 0 when it is counted (now or by an earlier run), else the ms until the oldest of
# the `limit` counted leaves the `window` (ms); a refused request is not counted.
ADMIT_LUA = """
local function admit(key, member, limit, window, now)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    if redis.call('ZADD', key, 'NX', now, member) == 0 then
        return 0
    end
    if redis.call('ZCARD', key) > limit then
        redis.call('ZREM', key, member)
        local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        return tonumber(oldest[2]) + window - now
    end
    redis.call('PEXPIRE', key, window)
    return 0
end
"""


def check_pending(runtime: Runtime, policy: Policy, request: ApprovalRequestV1) -> None:
    """Raise `IntakeLimitReached`, naming the limit, when `request`'s requester already has
    `limits.pending` requests of its action class pending (`Store.pending_count`, up to the limit)."""
    limits = policy.limits(request.action)
    pending = runtime.store.pending_count(request.action, request.requester, up_to=limits.pending)
    if pending >= limits.pending:
        raise IntakeLimitReached(
            f"intake limit: requester {request.requester!r} has {pending} {request.action} requests "
            f"pending (policy v{policy.version} limits.pending: {limits.pending}); send it again once "
            "fewer are pending"
        )


def rate_args(policy: Policy, request: ApprovalRequestV1, request_id: str) -> tuple[str, list[str | int]]:
    """The key and the arguments of `ADMIT_LUA`'s `admit` for `request` (to be stored as
    `request_id`) but Redis's time: its rate window, its id, its class's `limits.per_minute` and
    the window (`RATE_WINDOW_MILLISECONDS`)."""
    limit = policy.limits(request.action).per_minute
    return rate_key(request.action, request.requester), [request_id, limit, RATE_WINDOW_MILLISECONDS]


def over_rate(policy: Policy, request: ApprovalRequestV1, wait_ms: int) -> IntakeLimitReached:
    """The refusal of `request` over its class's `limits.per_minute`, to send again in `wait_ms`."""
    limit = policy.limits(request.action).per_minute
    return IntakeLimitReached(
        f"intake limit: requester {request.requester!r} has sent {limit} {request.action} requests in the "
        f"last 60 s (policy v{policy.version} limits.per_minute: {limit}); send it again in "
        f"{math.ceil(wait_ms / 1000)} s"
    )


def rate_key(action: str, requester: str) -> str:
    """The Redis key of the rate window of one action class and requester (an action class has no
    `:`, so no two pairs share a key)."""
    return f"countersign:rate:{action}:{requester}"
