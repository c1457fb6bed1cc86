"""Idempotency keys in Redis: the agent's `request()` learns at once whether its key is new.

A key is its requester's: two requesters that send the same key (by chance, or one guessing the
other's) get two requests, and neither learns the other's request id nor blocks its key. An atomic
`SET NX` of the hash of the requester and the key → the request id and a digest of its action
class and payload (`_claim`), kept `IDEMPOTENCY_TTL_SECONDS`, decides "same request" or "conflict"
before any worker runs; the database's unique constraint on (requester, key) stays the final guard
when Redis has forgotten it, and the router's intake then points the key at the stored request
again (`remember_key`). Same requester, key, action class and payload → the same id; same
requester and key, another action class or payload → `IdempotencyConflict`, as Stripe's idempotency
keys, each an account's own, refuse a key reused with other parameters
(https://docs.stripe.com/api/idempotent_requests)."""

from __future__ import annotations

import hashlib
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


def _redis_key(requester: str, key: str) -> str:
    """The Redis key of `requester`'s idempotency key `key`: SHA-256 over both, split by a NUL,
    which a requester may not contain (`schema`: no control characters), so no two pairs share it. Claims
    an earlier version made of the key alone are not read: they expire within
    `IDEMPOTENCY_TTL_SECONDS`, and a repeat meanwhile is found by the database, as when Redis forgot."""
    scoped = f"{requester}\0{key}".encode()
    return "countersign:idempotency:" + hashlib.sha256(scoped).hexdigest()


ID_LENGTH = 26
"""Characters of a request id (a ULID's text)."""
DIGEST_BYTES = 16
"""Bytes of the digest a claim keeps: enough to tell one request's action class and payload from
another's sent with the same key (a chance of 2^-128 of taking one for the other), not a signature:
the grant signs the whole payload hash, and the database keeps it."""


def _digest(action: str, payload_sha256: str) -> bytes:
    """The first `DIGEST_BYTES` bytes of SHA-256 over the action class and the payload's SHA-256
    (hex): what a repeat with the same key must match."""
    return hashlib.sha256(f"{action}\0{payload_sha256}".encode()).digest()[:DIGEST_BYTES]


def _claim(request_id: str, action: str, payload_sha256: str) -> bytes:
    """The value of an idempotency key: the request id's 26 characters, then `_digest`. 42 bytes,
    which Redis keeps in one allocation with its object (an embedded string, up to 44 bytes): 184
    bytes a key (`MEMORY USAGE`), where the JSON `{request_id, payload_sha256}` took 296, for 7 days."""
    return request_id.encode() + _digest(action, payload_sha256)


def _claimed(held: bytes, action: str, payload_sha256: str) -> tuple[str, bool]:
    """The request id a claim (`_claim`) names, and whether it was made for `action` and the payload
    of `payload_sha256`."""
    return held[:ID_LENGTH].decode(), held[ID_LENGTH:] == _digest(action, payload_sha256)


def claim_key(redis: Redis, requester: str, key: str, action: str, payload_sha256: str) -> str:
    """The request id for `requester`'s idempotency key `key` of a request of action class `action`
    whose payload hashes to `payload_sha256` (hex): a new ULID if the key is new to `requester`,
    else the id it was claimed with. Raises as `claim_or_find` does."""
    return claim_or_find(redis, requester, key, action, payload_sha256)[0]


def claim_or_find(
    redis: Redis, requester: str, key: str, action: str, payload_sha256: str
) -> tuple[str, bool]:
    """`claim_key`'s request id, and whether it is new: made by this call, so that nothing anywhere
    (a job, a row) can carry it yet. Raises `IdempotencyConflict` if `requester` claimed the key for
    another action class or payload, `RouterUnavailable` if it keeps expiring under us, and
    redis-py's `RedisError`s."""
    redis_key = _redis_key(requester, key)
    request_id = str(ULID())
    value = _claim(request_id, action, payload_sha256)
    for _ in range(3):  # the key may expire between SET NX and GET
        if redis.set(redis_key, value, nx=True, ex=IDEMPOTENCY_TTL_SECONDS):
            return request_id, True
        held = redis.get(redis_key)
        if held is not None:
            earlier, same = _claimed(cast(bytes, held), action, payload_sha256)
            if not same:
                raise IdempotencyConflict(key, earlier)
            return earlier, False
    raise RouterUnavailable("idempotency key kept expiring while being claimed")


# Delete the key only while it still names this request (KEYS: the key; ARGV: the request id): its
# first 26 bytes (`_claim`).
_RELEASE = """
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, 26) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


def release_key(redis: Redis, requester: str, key: str, request_id: str) -> bool:
    """Free `requester`'s idempotency key `key` if it still names `request_id` (atomic, a Lua script): intake
    refused that request, so the key saved no result and the agent may send it again, corrected or
    not (Stripe saves no result for a request that failed validation either). True if freed.
    Raises redis-py's `RedisError`."""
    return bool(redis.register_script(_RELEASE)(keys=[_redis_key(requester, key)], args=[request_id]))


def remember_key(
    redis: Redis, requester: str, key: str, request_id: str, action: str, payload_sha256: str
) -> None:
    """Point `requester`'s idempotency key `key` at `request_id` (of action class `action`, its
    payload hashing to `payload_sha256`) again, after Redis forgot it, for 7 days."""
    claim = _claim(request_id, action, payload_sha256)
    redis.set(_redis_key(requester, key), claim, ex=IDEMPOTENCY_TTL_SECONDS)
