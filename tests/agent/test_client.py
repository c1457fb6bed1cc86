"""The agent's client (`ApprovalClient`): a request is checked before anything is enqueued, a
repeat with the same idempotency key gives the same request, a conflicting one is refused, `get`
reports where a request is, and an unreachable Redis is said clearly."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient, IdempotencyConflict, RouterUnavailable
from countersign.exceptions import ConfigError, SchemaOutOfDate
from countersign.ports import free_port
from countersign.router.jobs import intake_job_id, json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.schema import InvalidRequest
from countersign.store import Store, create_db_engine
from tests.helpers import drain
from tests.helpers.builders import CONFLICTING, refund
from tests.helpers.redis_server import RedisServer


def cards_for(sb: Sandbox, request_id: str) -> list[dict[str, Any]]:
    return [m for m in sb.messages() if request_id in str(m["blocks"])]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"action": None}, "action: required"),
        ({"payload": [1, 2]}, "payload: should be a JSON object"),
        ({"payload": "refund 5"}, "payload: should be a JSON object"),
        ({"summary": 42}, "summary: should be a string"),
        ({"confidence": "high"}, "confidence: should be a number"),
        ({"confidence": 1.5}, "confidence: should be 1 or less"),
        (
            {"action": "Issue Refund!"},
            "action: should be 1 to 64 lower-case letters, digits, '_', '.' or '-' (e.g. issue_refund)",
        ),
        ({"colour": "red"}, "colour: unknown field"),
        ({"run_id": None}, "give idempotency_key, or both run_id and step"),
        ({"resume": {"queue": "q"}}, "resume.func: required"),
        ({"payload": {"blob": "x" * 70_000}}, "payload: larger than 65536 bytes"),
        ({"payload": {"note": "a\x00b"}}, "payload: contains a NUL character (U+0000)"),
        ({"summary": "a\x00b"}, "summary: contains a NUL character (U+0000)"),
        ({"confidence": float("nan")}, "confidence: should be a finite number (not NaN or infinity)"),
        ({"run_id": "x:y"}, "may not contain ':' (give idempotency_key instead)"),
        ({"resume": "q"}, "resume: should be a JSON object"),
        (
            {"resume": {"queue": "countersign", "func": "builtins.print"}},
            "resume.queue: 'countersign' is countersign's own queue, whose worker runs only "
            "countersign's jobs",
        ),
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


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"resume": {"queue": "q", "func": "a.b", "webhook": "https://x.example.com/z"}},
            "resume: give queue and func, or webhook, not both",
        ),
        (
            {"resume": {"func": "a.b", "webhook": "https://x.example.com/z"}},
            "resume: give queue and func, or webhook, not both",
        ),
        ({"payload": {1: "x"}}, "payload: the key 1 should be a string"),
        ({"payload": {(1, 2): "x"}}, "payload: the key (1, 2) should be a string"),  # as repr, like 1
        (
            {"payload": {"scan": b"%PDF"}},
            "payload: scan is bytes, which JSON has no type for: send a string, number, list or object",
        ),
        (
            {"payload": {"lines": [{"rate": float("nan")}]}},
            "payload: lines[0].rate is NaN, which canonical JSON (RFC 8785) has no form for: send a finite "
            "number or a string",
        ),
        (
            {"payload": {"limit": -float("inf")}},
            "payload: limit is minus infinity, which canonical JSON (RFC 8785) has no form for: send a "
            "finite number or a string",
        ),
        (
            {"payload": {"id": 2**53}},
            "payload: id is 9007199254740992, beyond the integers canonical JSON (RFC 8785, an IEEE 754 "
            "double) keeps exactly (at most 9007199254740991 either side of 0): send it as a string, e.g. "
            '"9007199254740992"',
        ),
        ({"payload": {"items": [{"sku": "a", 2: "x"}]}}, "payload: the key 2 of items[0] should be a string"),
        (
            {"payload": {"amount": Decimal("201.00")}},
            "payload: amount is a Decimal, which canonical JSON (RFC 8785) has no type for: "
            'send it as a string, e.g. "201.00"',
        ),
        (
            {"context": {"seen": {1, 2}}},
            "context: seen is a set, which JSON has no type for: send a string, number, list or object",
        ),
    ],
)
def test_a_python_value_json_cannot_hold_or_a_mixed_resume_is_one_clear_line(
    client: ApprovalClient, redis: Redis, change: dict[str, Any], error: str
) -> None:
    """The whole refusal is the one thing to fix: no unknown-field noise, no Python type repr."""
    with pytest.raises(InvalidRequest) as raised:
        client.request({**refund(), **change})
    assert str(raised.value) == error
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


@CONFLICTING
def test_conflict_raises_and_changes_nothing(
    other: dict[str, Any],
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    """The same key (run and step) for another payload, or for the same payload under another action
    class (which would count against that class's limits and never reach its approvers)."""
    first = client.request(refund())
    with pytest.raises(IdempotencyConflict) as raised:
        client.request(refund(**other))
    assert raised.value.request_id == first
    assert json_queue("countersign", redis).job_ids == [intake_job_id(first)]
    drain(redis)
    row = store.get(first)
    assert row is not None and row.payload == {"amount": "120.00", "currency": "USD"}


def test_get_reports_queued_before_intake_and_unknown_ids(
    client: ApprovalClient, runtime: Runtime, redis: Redis
) -> None:
    request_id = client.request(refund())
    queued = client.get(request_id)
    assert queued.status == "queued" and queued.request is not None
    assert queued.request["requester"] == refund()["requester"]  # whose it is, in the same read
    drain(redis)  # intake takes it (and deletes its intake message): the stored request from now on
    assert client.get(request_id).status == "pending"
    odd = ("x;DROP TABLE requests", "01j0000000000000000000000", "A" * 5000)
    for unknown in ("01J00000000000000000000009", *odd):
        with pytest.raises(LookupError):
            client.get(unknown)


def test_the_agent_is_told_clearly_when_redis_is_unreachable(store: Store) -> None:
    down = ApprovalClient(
        Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1), store
    )
    try:
        down.request(refund())
    except RouterUnavailable as exc:
        assert "retry with the same key" in str(exc)
    else:
        raise AssertionError("request() succeeded without Redis")


def test_from_env_without_a_database_url_names_the_variable_and_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, redis_server: RedisServer
) -> None:
    """No DATABASE_URL (nor `.run/.env`): the default SQLite file does not exist, so `from_env`
    says what to do in one line, instead of creating an empty file whose first read fails on a
    missing table; and no file is left behind."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    with pytest.raises(ConfigError) as raised:
        ApprovalClient.from_env()
    said = str(raised.value)
    assert said.startswith("DATABASE_URL: ") and "countersign db upgrade" in said and "\n" not in said
    assert list(tmp_path.iterdir()) == []


def test_a_database_never_migrated_is_said_so_by_get_request_and_wait(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, redis_server: RedisServer
) -> None:
    """A database file that exists but was never migrated (e.g. left empty by an earlier client):
    every call that reads or writes it says "not migrated" and the command, not "no such table"."""
    empty = tmp_path / "agents.db"
    engine = create_db_engine(f"sqlite:///{empty}")
    with engine.connect() as connection:
        connection.exec_driver_sql("CREATE TABLE notes (body TEXT)")  # a database, not countersign's
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{empty}")
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    client = ApprovalClient.from_env()
    calls = {
        "get": lambda: client.get("01KBDT9WJQ2X6M8ZC4V0R7Y5NA"),
        "request": lambda: client.request(refund()),
        "wait": lambda: client.wait("01KBDT9WJQ2X6M8ZC4V0R7Y5NA", timeout=5),
    }
    for name, call in calls.items():
        with pytest.raises(SchemaOutOfDate) as raised:
            call()
        assert "countersign db upgrade" in str(raised.value), name
