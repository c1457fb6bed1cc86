"""Intake limits (the policy's `limits`): a requester over its rate or its pending count for an
action class is refused at intake with a reason naming the limit, its idempotency key freed; the
same request is accepted once it is under the limit again. Time in the rate window is moved, not
waited for (`a_minute_passes`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.limits import RATE_WINDOW_MILLISECONDS
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import anyone, drain
from tests.helpers.builders import refund

POLICY = """\
version: 5
defaults:
  channel: C0APPROVALS
  approvers: {users: [U0LEAD]}
  limits: {pending: 2}
actions:
  issue_refund:
    channel: C0FINANCE
    approvers: {users: [U0LEAD, U0ALICE]}
    limits: {per_minute: 3, pending: 10}
  send_email: {}
"""


@pytest.fixture
def limits_policy(policy_file: Path) -> Path:
    """The test policy file, rewritten to `POLICY`: 3 refunds a minute, 2 emails pending."""
    policy_file.write_text(POLICY)
    return policy_file


def a_minute_passes(redis: Redis) -> None:
    """Every request counted in the rate windows was counted a minute earlier (as if Redis's clock
    had run on a minute)."""
    for key in redis.scan_iter("countersign:rate:*"):
        counted = redis.zrange(key, 0, -1, withscores=True)
        redis.zadd(key, {member: score - RATE_WINDOW_MILLISECONDS for member, score in counted})


def cards_of(sb: Sandbox, request_id: str) -> int:
    return len([m for m in sb.messages() if request_id in str(m["blocks"])])


def test_a_requester_over_its_rate_is_refused_with_the_reason_and_accepted_a_minute_later(
    limits_policy: Path, client: ApprovalClient, redis: Redis, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    ids = [client.request(refund(step=f"s{n}")) for n in range(4)]
    drain(redis)
    assert [client.get(i).status for i in ids] == ["pending", "pending", "pending", "dead_letter"]
    assert re.fullmatch(
        r"intake limit: requester 'refund-agent' has sent 3 issue_refund requests in the last 60 s "
        r"\(policy v5 limits\.per_minute: 3\); send it again in [1-6]?\d s",
        client.get(ids[3]).reason or "",
    )
    other = client.request(refund(step="s3", requester="other-agent"))  # per requester
    email = client.request(refund(step="e1", action="send_email", payload={"to": "a@b.c"}))  # per class
    drain(redis)
    assert client.get(other).status == client.get(email).status == "pending"

    a_minute_passes(redis)
    again = client.request(refund(step="s3"))  # the same key: the refusal freed it
    drain(redis)
    assert again != ids[3] and client.get(again).status == "pending"
    assert cards_of(sb, ids[3]) == 0 and cards_of(sb, ids[0]) == 1


def test_a_requester_at_its_pending_limit_is_refused_until_one_is_decided(
    limits_policy: Path, client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime
) -> None:
    def email(step: str) -> str:
        return client.request(refund(step=step, action="send_email", payload={"to": "a@b.c"}))

    ids = [email(f"s{n}") for n in range(3)]
    drain(redis)
    assert [client.get(i).status for i in ids] == ["pending", "pending", "dead_letter"]
    assert client.get(ids[2]).reason == (
        "intake limit: requester 'refund-agent' has 2 send_email requests pending (policy v5 "
        "limits.pending: 2); send it again once fewer are pending"
    )
    assert store.get(ids[2]) is None and store.pending_count("send_email", "refund-agent", up_to=100) == 2

    store.decide(
        ids[0],
        "rejected",
        [{"slack_user_id": "U0LEAD", "name": "lee"}],
        "slack",
        runtime.resume_event,
        refuse=anyone,
    )
    again = email("s2")  # the same key: the refusal freed it
    drain(redis)
    assert again != ids[2] and client.get(again).status == "pending"
