"""Idempotency keys in Redis (`countersign.idempotency`): a key's value is 42 bytes (the request id
and 16 bytes of a digest of its action class and payload), and a key is its requester's."""

from __future__ import annotations

import hashlib

import pytest
from redis import Redis

from countersign.defaults import IDEMPOTENCY_TTL_SECONDS
from countersign.exceptions import IdempotencyConflict
from countersign.idempotency import _redis_key, claim_key, claim_or_find, is_request_id, release_key

SAME = hashlib.sha256(b"same").hexdigest()
OTHER = hashlib.sha256(b"other").hexdigest()


def test_a_claim_is_the_request_id_and_a_digest_and_tells_classes_and_payloads_apart(redis: Redis) -> None:
    request_id = claim_key(redis, "agent", "agent:run:step", "refund", SAME)
    held = redis.get(_redis_key("agent", "agent:run:step"))
    assert (
        is_request_id(request_id)
        and held == request_id.encode() + hashlib.sha256(f"refund\0{SAME}".encode()).digest()[:16]
    )
    assert (redis.memory_usage(_redis_key("agent", "agent:run:step")) or 0) <= 184  # 296 as JSON
    assert 0 < redis.ttl(_redis_key("agent", "agent:run:step")) <= IDEMPOTENCY_TTL_SECONDS
    assert claim_key(redis, "agent", "agent:run:step", "refund", SAME) == request_id
    with pytest.raises(IdempotencyConflict):
        claim_key(redis, "agent", "agent:run:step", "refund", OTHER)
    with pytest.raises(IdempotencyConflict):  # the same payload for another action class
        claim_key(redis, "agent", "agent:run:step", "wire_transfer", SAME)
    assert not release_key(
        redis, "agent", "agent:run:step", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
    )  # names another request
    assert release_key(redis, "agent", "agent:run:step", request_id)
    assert claim_key(redis, "agent", "agent:run:step", "refund", OTHER) != request_id


def test_a_key_is_its_requesters_own(redis: Redis) -> None:
    """Trial finding: another requester replayed a claim (learning its request id) or was refused it."""
    mine = claim_key(redis, "refund-agent", "run-4:payout", "refund", SAME)
    theirs = claim_key(redis, "billing-agent", "run-4:payout", "refund", OTHER)  # no conflict with mine
    assert theirs != mine and claim_key(redis, "billing-agent", "run-4:payout", "refund", OTHER) == theirs
    assert not release_key(redis, "billing-agent", "run-4:payout", mine)  # names none of its requests
    assert claim_key(redis, "refund-agent", "run-4:payout", "refund", SAME) == mine


def test_a_claim_says_whether_its_request_id_was_made_by_it(redis: Redis) -> None:
    """`enqueue_intake` looks for an existing intake job only when the id is not new."""
    request_id, new = claim_or_find(redis, "agent", "a:r:s", "refund", SAME)
    assert new and claim_or_find(redis, "agent", "a:r:s", "refund", SAME) == (request_id, False)
