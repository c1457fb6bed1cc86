"""Idempotency keys in Redis: the agent's `request()` learns at once whether its key is new.

An atomic `SET NX` of the key's hash → `{request_id, payload_sha256}`, kept
`IDEMPOTENCY_TTL_SECONDS`, decides "same request" or "conflict" before any worker runs; the
database's unique constraint on the key stays the final guard when Redis has forgotten it, and the
router's intake then points the key at the stored request again (`remember_key`). Same key and
payload → the same id; same key, other payload → `IdempotencyConflict`, as Stripe's idempotency
keys behave (https://docs.stripe.com/api/idempotent_requests).
"""

from __future__ import annotations

import hashlib
import json
from typing import cast

from redis import Redis
from ulid import ULID

from .defaults import IDEMPOTENCY_TTL_SECONDS
from .exceptions import IdempotencyConflict, RouterUnavailable


def is_request_id(text: str) -> bool:
    """Whether `text` has the form of a request id: a ULID, 26 characters of Crockford's base32
    (https://github.com/ulid/spec), as `claim_key` makes them. Any other text names no request."""
    try:
        ULID.from_str(text)
    except ValueError:
        return False
    return True


def _redis_key(key: str) -> str:
    return "countersign:idempotency:" + hashlib.sha256(key.encode()).hexdigest()


def _claim(request_id: str, payload_sha256: str) -> str:
    return json.dumps({"request_id": request_id, "payload_sha256": payload_sha256})


def claim_key(redis: Redis, key: str, payload_sha256: str) -> str:
    """The request id for idempotency key `key`: a new ULID if the key is new, else the id it was
    claimed with. Raises `IdempotencyConflict` if it was claimed with another payload hash,
    `RouterUnavailable` if it keeps expiring under us, and redis-py's `RedisError`s."""
    redis_key = _redis_key(key)
    claim = _claim(str(ULID()), payload_sha256)
    for _ in range(3):  # the key may expire between SET NX and GET
        if redis.set(redis_key, claim, nx=True, ex=IDEMPOTENCY_TTL_SECONDS):
            request_id: str = json.loads(claim)["request_id"]
            return request_id
        held = redis.get(redis_key)
        if held is not None:
            earlier = json.loads(cast(bytes, held))
            if earlier["payload_sha256"] != payload_sha256:
                raise IdempotencyConflict(key, earlier["request_id"])
            return str(earlier["request_id"])
    raise RouterUnavailable("idempotency key kept expiring while being claimed")


# Delete the key only while it still names this request (KEYS: the key; ARGV: the request id).
_RELEASE = """
local held = redis.call('GET', KEYS[1])
if held and cjson.decode(held)['request_id'] == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


def release_key(redis: Redis, key: str, request_id: str) -> bool:
    """Free idempotency key `key` if it still names `request_id` (atomic, a Lua script): intake
    refused that request, so the key saved no result and the agent may send it again, corrected or
    not (Stripe saves no result for a request that failed validation either). True if freed.
    Raises redis-py's `RedisError`."""
    return bool(redis.register_script(_RELEASE)(keys=[_redis_key(key)], args=[request_id]))


def remember_key(redis: Redis, key: str, request_id: str, payload_sha256: str) -> None:
    """Point the idempotency key at `request_id` again (after Redis forgot it), for 7 days."""
    redis.set(_redis_key(key), _claim(request_id, payload_sha256), ex=IDEMPOTENCY_TTL_SECONDS)
