"""The agent client and the intake job: validation, idempotency, dead letters."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient, IdempotencyConflict
from countersign.router.jobs import intake_job_id, json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.schema import InvalidRequest
from countersign.store import Store

from .helpers import drain
from .test_flow import refund


def cards_for(sb: Sandbox, request_id: str) -> list[dict[str, Any]]:
    return [m for m in sb.messages() if request_id in str(m["blocks"])]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"action": None}, "action: Field required"),
        ({"payload": [1, 2]}, "payload: should be a JSON object"),
        ({"payload": "refund 5"}, "payload: should be a JSON object"),
        ({"summary": 42}, "summary: Input should be a valid string"),
        ({"confidence": "high"}, "confidence: Input should be a valid number"),
        ({"confidence": 1.5}, "confidence: Input should be less than or equal to 1"),
        ({"action": "Issue Refund!"}, "action: String should match pattern"),
        ({"colour": "red"}, "colour: unknown field"),
        ({"run_id": None}, "give idempotency_key, or both run_id and step"),
        ({"resume": {"queue": "q"}}, "resume.func: Field required"),
        ({"payload": {"blob": "x" * 70_000}}, "payload: larger than 65536 bytes"),
        ({"payload": {"note": "a\x00b"}}, "payload: contains a NUL character (U+0000)"),
        ({"summary": "a\x00b"}, "summary: contains a NUL character (U+0000)"),
        ({"confidence": float("nan")}, "confidence: Input should be a finite number"),
        ({"run_id": "x:y"}, "may not contain ':' (give idempotency_key instead)"),
        ({"resume": "q"}, "resume: should be a JSON object"),
    ],
)
def test_invalid_request_fails_at_request_with_one_line_and_enqueues_nothing(
    client: ApprovalClient, redis: Redis, change: dict[str, Any], error: str
) -> None:
    request = {k: v for k, v in {**refund(), **change}.items() if v is not None}
    with pytest.raises(InvalidRequest) as raised:
        client.request(request)
    assert error in str(raised.value)
    assert "\n" not in str(raised.value)
    assert json_queue("countersign", redis).count == 0


def test_repeat_gives_the_same_id_and_one_card(
    client: ApprovalClient, redis: Redis, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    first = client.request(refund())
    drain(redis)
    second = client.request(refund())
    drain(redis)
    assert second == first
    assert len(cards_for(sandbox[0], first)) == 1
    assert len(sandbox[0].messages()) == 1


def test_conflict_raises_and_changes_nothing(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    first = client.request(refund())
    with pytest.raises(IdempotencyConflict) as raised:
        client.request(refund(payload={"amount": "999.00", "currency": "USD"}))
    assert raised.value.request_id == first
    assert json_queue("countersign", redis).job_ids == [intake_job_id(first)]
    drain(redis)
    row = store.get(first)
    assert row is not None and row.payload == {"amount": "120.00", "currency": "USD"}


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


def test_get_reports_queued_before_intake_and_unknown_ids(client: ApprovalClient, runtime: Runtime) -> None:
    request_id = client.request(refund())
    assert client.get(request_id).status == "queued"
    with pytest.raises(LookupError):
        client.get("01J00000000000000000000009")


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
