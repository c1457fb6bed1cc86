"""The intake job: a request becomes one stored request and one card, or a dead letter with its
reason; a repeat the client could not catch (Redis forgot the key) is resolved by the database; a
card posted before a crash is found, not posted again."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.jobs import json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import drain
from tests.helpers.builders import refund


def test_conflict_found_by_the_database_when_redis_forgot_the_key(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    first = client.request(refund())
    drain(redis)
    redis.flushall()
    second = client.request(refund(payload={"amount": "999.00", "currency": "USD"}))
    drain(redis)
    assert store.get(second) is None
    state = client.get(second)
    assert state.status == "dead_letter" and "IdempotencyConflict" in (state.reason or "")
    assert len(sandbox[0].messages()) == 1
    assert store.get(first).payload["amount"] == "120.00"  # type: ignore[union-attr]


def test_same_request_after_redis_forgot_the_key_resolves_to_the_original(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    first = client.request(refund())
    drain(redis)
    redis.flushall()
    second = client.request(refund())
    drain(redis)
    assert second != first and store.get(second) is None
    assert client.get(second).request_id == first and client.get(second).status == "pending"
    assert client.request(refund()) == first  # the key points at the original again
    assert len(sandbox[0].messages()) == 1


def test_invalid_message_on_the_queue_is_dead_lettered_and_visible(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from countersign.cli import main

    bad = {"v": 1, "request_id": "01J0000000000000000000000Z", "request": {**refund(), "payload": [1]}}
    json_queue("countersign", redis).enqueue("countersign.router.intake.intake", bad, job_id="bad-1")
    json_queue("countersign", redis).enqueue("countersign.router.intake.intake", {"hello": 1}, job_id="bad-2")
    drain(redis)
    assert sandbox[0].messages() == []
    assert main(["show", "01J0000000000000000000000Z"]) == 0
    shown = capsys.readouterr().out
    assert '"status": "dead_letter"' in shown and "request.payload: should be a JSON object" in shown
    letter = store.get_dead_letter("bad-2")
    assert (
        letter is not None
        and letter.received == {"hello": 1}
        and "request_id: Field required" in letter.reason
    )


def test_action_without_a_route_is_dead_lettered(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, policy_file: Any
) -> None:
    policy_file.write_text(
        "version: 1\ndefaults: {channel: C0OPS}\nactions:\n  issue_refund: {approvers: {users: [U0LEAD]}}\n"
    )
    request_id = client.request(refund(action="delete_user"))
    drain(redis)
    state = client.get(request_id)
    assert state.status == "dead_letter" and "no approvers for action class 'delete_user'" in (
        state.reason or ""
    )


def test_a_card_posted_before_a_crash_is_found_not_posted_twice(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    from sqlalchemy import update

    from countersign.router.delivery import post_card
    from countersign.store.models import ApprovalRequest, utcnow_plus

    sb, _ = sandbox
    request_id = client.request(refund())
    drain(redis)
    row = store.get(request_id)
    assert row is not None and row.card_ts is not None and len(sb.messages("C0FINANCE")) == 1
    assert sb.messages("C0FINANCE")[0]["metadata"]["event_payload"] == {"request_id": request_id, "level": 0}

    # Simulate a crash after chat.postMessage and before the ts was stored: the card exists in
    # Slack, the database does not know it, and the posting lease has run out.
    with store.engine.begin() as connection:
        connection.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == request_id)
            .values(card_ts=None, card_lease_until=utcnow_plus(-1))
        )
    redis.delete("countersign:pace:C0FINANCE")  # more than a second later, as a retry would be
    assert post_card(runtime, store.get(request_id)) == "found"  # type: ignore[arg-type]
    assert len(sb.messages("C0FINANCE")) == 1 and store.get(request_id).card_ts == row.card_ts  # type: ignore[union-attr]


def test_a_live_posting_lease_keeps_a_second_poster_out(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    from sqlalchemy import update

    from countersign.store.models import ApprovalRequest

    request_id = client.request(refund())
    drain(redis)
    with store.engine.begin() as connection:
        connection.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == request_id)
            .values(card_ts=None, card_lease_until=None)
        )
    assert store.claim_card(request_id) is not None
    assert store.claim_card(request_id) is None  # someone is posting right now
