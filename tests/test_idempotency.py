"""Idempotency keys in Redis (`countersign.idempotency`): a key's value is 42 bytes (the request id
and 16 bytes of a digest of its action class and payload), and a key an earlier version claimed as
JSON is honoured until it expires."""

from __future__ import annotations

import hashlib
import json

import pytest
from redis import Redis

from countersign.defaults import IDEMPOTENCY_TTL_SECONDS
from countersign.exceptions import IdempotencyConflict
from countersign.idempotency import _redis_key, claim_key, claim_or_find, is_request_id, release_key

SAME = hashlib.sha256(b"same").hexdigest()
OTHER = hashlib.sha256(b"other").hexdigest()


def test_a_claim_is_the_request_id_and_a_digest_and_tells_classes_and_payloads_apart(redis: Redis) -> None:
    request_id = claim_key(redis, "agent:run:step", "refund", SAME)
    held = redis.get(_redis_key("agent:run:step"))
    assert (
        is_request_id(request_id)
        and held == request_id.encode() + hashlib.sha256(f"refund\0{SAME}".encode()).digest()[:16]
    )
    assert (redis.memory_usage(_redis_key("agent:run:step")) or 0) <= 184  # 296 as JSON
    assert 0 < redis.ttl(_redis_key("agent:run:step")) <= IDEMPOTENCY_TTL_SECONDS
    assert claim_key(redis, "agent:run:step", "refund", SAME) == request_id
    with pytest.raises(IdempotencyConflict):
        claim_key(redis, "agent:run:step", "refund", OTHER)
    with pytest.raises(IdempotencyConflict):  # the same payload for another action class
        claim_key(redis, "agent:run:step", "wire_transfer", SAME)
    assert not release_key(redis, "agent:run:step", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ")  # names another request
    assert release_key(redis, "agent:run:step", request_id)
    assert claim_key(redis, "agent:run:step", "refund", OTHER) != request_id


def test_a_key_an_earlier_version_claimed_as_json_is_still_honoured(redis: Redis) -> None:
    earlier = "01JD3XYZABCDEFGHJKMNPQRSTV"
    redis.set(_redis_key("a:r:s"), json.dumps({"request_id": earlier, "payload_sha256": SAME}), ex=60)
    assert claim_key(redis, "a:r:s", "refund", SAME) == earlier
    with pytest.raises(IdempotencyConflict):
        claim_key(redis, "a:r:s", "refund", OTHER)
    assert release_key(redis, "a:r:s", earlier) and redis.get(_redis_key("a:r:s")) is None


def test_a_claim_says_whether_its_request_id_was_made_by_it(redis: Redis) -> None:
    """`enqueue_intake` looks for an existing intake job only when the id is not new."""
    request_id, new = claim_or_find(redis, "a:r:s", "refund", SAME)
    assert new and claim_or_find(redis, "a:r:s", "refund", SAME) == (request_id, False)
