"""Resume by webhook, against real receivers on local ports that verify with `standardwebhooks`:
the decision is POSTed signed, tried again with back-off while the receiver fails, times out or
throttles, delivered on its 2xx, dead-lettered visibly when countersign gives up, never POSTed by
two sweeps at once, and delivered after the delivering process is killed mid-POST."""

from __future__ import annotations

import base64
import math
import os
import signal
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from countersign import ExecutionRefused, connections, execute_approved
from countersign.agent import ApprovalClient
from countersign.config import load_settings
from countersign.exceptions import ConfigError
from countersign.ports import free_port, port_open
from countersign.router import relay
from countersign.router import runtime as runtime_module
from countersign.router.jobs import webhook_id
from countersign.router.runtime import Runtime
from countersign.router.webhooks import BACKOFF_BASE_SECONDS, WEBHOOK, Deliverer
from countersign.sandbox import Sandbox
from countersign.store import OutboxEvent, Store
from countersign.store.models import utcnow, utcnow_plus
from tests.helpers import REPO, alive, children, countersign, drain, wait_for
from tests.helpers.builders import edited_card, events, post_card, refund
from tests.helpers.receiver import HANG, Receiver

SECRET = "whsec_" + base64.b64encode(b"countersign-test-webhook-key-32b").decode()


def settings_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, **values: str | None) -> Runtime:
    """Set (or, with None, unset) these settings in the environment and `env`, and return the
    process runtime built from them."""
    for name, value in values.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
            env.pop(name, None)
        else:
            monkeypatch.setenv(name, value)
            env[name] = value
    runtime_module.current.cache_clear()
    connections.current.cache_clear()
    return runtime_module.current()


@pytest.fixture
def hooks(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """The runtime with a webhook secret and a 1-second webhook timeout."""
    return settings_env(
        env,
        monkeypatch,
        COUNTERSIGN_WEBHOOK_SECRET=SECRET,
        COUNTERSIGN_WEBHOOK_TIMEOUT_SECONDS="1",
    )


def approved(runtime: Runtime, sb: Sandbox, url: str, **overrides: Any) -> tuple[str, dict[str, Any]]:
    """A refund resumed by the webhook `url`, its card posted, approved by U0LEAD; its id and card."""
    client = ApprovalClient(runtime.redis, runtime.store)
    request_id, card = post_card(client, runtime.redis, sb, resume={"webhook": url}, **overrides)
    runtime.store.vote(
        request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", runtime.resume_event
    )
    return request_id, card


def deliver_due(deliverer: Deliverer) -> int:
    """Claim the attempts due and make them here, one after the other, as the sweep's threads do.
    Returns how many."""
    claimed = deliverer.claim(100)
    for attempt in claimed:
        deliverer.attempt(attempt)
    return len(claimed)


def outbox(store: Store, request_id: str) -> OutboxEvent:
    event = store.outbox_event(request_id)
    assert event is not None
    return event


def due_now(store: Store, request_id: str, **columns: Any) -> None:
    """Make the request's next webhook attempt due now (its back-off, or its lease, has run out)."""
    with store.engine.begin() as connection:
        connection.execute(
            update(OutboxEvent)
            .where(OutboxEvent.request_id == request_id)
            .values(next_attempt_at=utcnow(), **columns)
        )


def webhook_events(store: Store, request_id: str) -> list[tuple[str, dict[str, Any], datetime]]:
    return [
        (e.event, e.detail, e.at) for e in store.audit_trail(request_id) if e.event.startswith("webhook_")
    ]


def waited(detail: dict[str, Any], at: datetime) -> float:
    """Seconds from a failed attempt's audit event to the next attempt it scheduled."""
    return (datetime.fromisoformat(detail["next_attempt_at"]) - at).total_seconds()


def verdict_text(card: dict[str, Any]) -> str:
    """The decided card's verdict section (who decided, and what became of the decision)."""
    return str(next(b for b in card["blocks"] if b["block_id"].startswith("verdict-")))


def test_a_decision_is_tried_with_backoff_until_the_receiver_takes_it(
    hooks: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """500, then 429 with Retry-After: 30, then no answer within the timeout, then a slow 200: four
    attempts, each audited with its answer and the next attempt's time, the same `webhook-id`
    and a signature the receiver's library verifies; the card says the agent was not told while
    it was not, and the agent runs the decision it was sent once."""
    sb, _ = sandbox
    store, redis = hooks.store, hooks.redis
    script = [500, (429, {"retry-after": "30"}), HANG, ("slow", 0.3)]
    with Receiver(SECRET, script) as receiver:
        request_id, card = approved(hooks, sb, receiver.url)
        deliverer = Deliverer(hooks)
        assert deliver_due(deliverer) == 1
        assert deliver_due(deliverer) == 0  # the next attempt waits for its back-off
        drain(redis)  # the sweep rewrites the cards asked for
        told = edited_card(sb, card["ts"])
        assert told is not None
        assert (
            "The agent has not been told yet: its webhook did not take the decision (HTTP 500, 1 attempt)"
            in (verdict_text(told))
        )
        assert receiver.url.removeprefix("http://") not in str(told["blocks"])
        for _ in range(3):
            due_now(store, request_id)
            assert deliver_due(deliverer) == 1
        drain(redis)

    trail = webhook_events(store, request_id)
    assert [(name, d["attempt"], d["status"]) for name, d, _ in trail] == [
        ("webhook_failed", 1, 500),
        ("webhook_failed", 2, 429),
        ("webhook_failed", 3, None),
        ("webhook_delivered", 4, 200),
    ]
    (_, first, first_at), (_, second, second_at), (_, third, third_at), _ = trail
    assert math.ceil(BACKOFF_BASE_SECONDS / 2) - 1 <= waited(first, first_at) <= BACKOFF_BASE_SECONDS
    assert 29 <= waited(second, second_at) <= 30  # the receiver's Retry-After, over the back-off's 5-10 s
    assert 4 * BACKOFF_BASE_SECONDS / 2 - 1 <= waited(third, third_at) <= 4 * BACKOFF_BASE_SECONDS
    assert third["error"].startswith("ReadTimeout")
    assert {d["webhook_id"] for _, d, _ in trail} == {webhook_id(request_id)}

    event = outbox(store, request_id)
    assert (event.attempts, event.next_attempt_at, event.problem) == (4, None, None)
    assert event.published_at is not None
    assert [r.webhook_id for r in receiver.received] == [webhook_id(request_id)] * 4
    assert [r.error for r in receiver.received] == [None] * 4
    assert all(r.verified == event.body for r in receiver.received)
    assert len({r.timestamp for r in receiver.received}) >= 2  # each attempt signs its own time
    rewritten = edited_card(sb, card["ts"])
    assert rewritten is not None and "not been told" not in verdict_text(rewritten)

    ran: list[dict[str, Any]] = []
    execute_approved(receiver.received[-1].verified, ran.append)
    with pytest.raises(ExecutionRefused):  # a repeat of the same webhook runs nothing twice
        execute_approved(receiver.received[0].verified, ran.append)
    assert ran == [{"amount": "120.00", "currency": "USD"}]
    assert relay.sweep(store, redis) == 0 and relay.heal(store, redis, window_seconds=3600) == 0


@pytest.mark.parametrize(
    ("status", "attempts"),
    [(503, 2), (410, 1)],  # 503 until the give-up time has passed; 410 Gone at once
)
def test_a_webhook_countersign_gives_up_on_is_dead_lettered_on_the_card_and_in_show(
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    sandbox: tuple[Sandbox, str],
    status: int,
    attempts: int,
) -> None:
    sb, _ = sandbox
    runtime = settings_env(
        env, monkeypatch, COUNTERSIGN_WEBHOOK_SECRET=SECRET, COUNTERSIGN_WEBHOOK_GIVE_UP_SECONDS="60"
    )
    store = runtime.store
    with Receiver(SECRET, [status] * 5) as receiver:
        request_id, card = approved(runtime, sb, receiver.url)
        deliverer = Deliverer(runtime)
        assert deliver_due(deliverer) == 1
        if attempts == 2:
            assert outbox(store, request_id).problem["event"] == "webhook_failing"  # type: ignore[index]
            due_now(store, request_id, created_at=utcnow_plus(-61))  # the decision is 61 s old
            assert deliver_due(deliverer) == 1
        assert deliver_due(deliverer) == 0  # dead: nothing tries it again
        drain(runtime.redis)

    assert len(receiver.received) == attempts
    trail = webhook_events(store, request_id)
    assert [name for name, _, _ in trail] == ["webhook_failed"] * attempts + ["webhook_dead_lettered"]
    assert trail[-2][1]["next_attempt_at"] is None
    assert trail[-1][1] == {"error": f"HTTP {status}", "attempts": attempts}
    event = outbox(store, request_id)
    assert event.problem == {
        "event": "webhook_dead_lettered",
        "error": f"HTTP {status}",
        "attempts": attempts,
    }
    assert (event.next_attempt_at, event.published_at) == (None, None)
    shown = ApprovalClient(runtime.redis, store).get(request_id).resume
    assert shown is not None
    assert (shown["webhook"], shown["attempts"], shown["problem"]) == (receiver.url, attempts, event.problem)
    rewritten = edited_card(sb, card["ts"])
    assert rewritten is not None
    assert (
        f"The agent has not been told: its webhook did not take the decision (HTTP {status}, {attempts} "
        in verdict_text(rewritten)
    )
    assert "countersign gave up (dead-lettered)" in verdict_text(rewritten)


def test_an_attempt_is_claimed_by_one_sweep_and_a_late_answer_changes_nothing(
    hooks: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """Two sweeps claiming at once start one attempt; once its lease runs out (its process died)
    the next claim is attempt 2, and the first attempt's late answer is not recorded."""
    store = hooks.store
    request_id, _ = approved(hooks, sandbox[0], "https://agent.example.com/decisions")
    start = threading.Barrier(2)
    claimed: list[Any] = []

    def claim() -> None:
        start.wait()
        claimed.extend(store.claim_webhooks(10, lease_seconds=60, give_up_seconds=3600))

    threads = [threading.Thread(target=claim) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [first] = claimed
    assert first.event.attempts == 1 and not first.last
    assert store.claim_webhooks(10, lease_seconds=60, give_up_seconds=3600) == []  # the lease holds it

    due_now(store, request_id)  # the lease ran out
    [second] = store.claim_webhooks(10, lease_seconds=60, give_up_seconds=3600)
    assert second.event.attempts == 2
    assert not store.webhook_delivered(first.event, WEBHOOK, attempt=1)
    assert store.webhook_delivered(second.event, WEBHOOK, attempt=2)
    assert [(name, d["attempt"]) for name, d, _ in webhook_events(store, request_id)] == [
        ("webhook_delivered", 2)
    ]


def test_a_webhook_request_is_dead_lettered_at_intake_when_the_router_cannot_sign(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no .run/.env of a local `countersign run` supplies the secret
    runtime = settings_env(env, monkeypatch, COUNTERSIGN_WEBHOOK_SECRET=None)
    client = ApprovalClient(runtime.redis, runtime.store)
    request_id = client.request(refund(resume={"webhook": "https://agent.example.com/decisions"}))
    drain(runtime.redis)
    state = client.get(request_id)
    assert state.status == "dead_letter"
    assert state.reason is not None and "COUNTERSIGN_WEBHOOK_SECRET" in state.reason


def test_http_webhooks_beyond_loopback_follow_the_setting(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's client and the router's intake each read `COUNTERSIGN_WEBHOOK_ALLOW_HTTP`."""
    runtime = settings_env(
        env, monkeypatch, COUNTERSIGN_WEBHOOK_SECRET=SECRET, COUNTERSIGN_WEBHOOK_ALLOW_HTTP="true"
    )
    client = ApprovalClient.from_env()
    request_id = client.request(refund(resume={"webhook": "http://agent.internal:8080/decisions"}))
    drain(runtime.redis)
    row = runtime.store.get(request_id)
    assert row is not None
    assert (row.resume_webhook, row.resume_queue, row.resume_func) == (
        "http://agent.internal:8080/decisions",
        None,
        None,
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_a_webhook_survives_a_kill_of_the_process_delivering_it(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, sandbox: tuple[Sandbox, str]
) -> None:
    """The router worker's sweep POSTs the decision to a receiver that never answers; the worker
    and its sweep are SIGKILLed mid-POST. A new worker POSTs it again once the attempt's lease has
    run out, with the same `webhook-id`, and the receiver's 200 delivers it."""
    runtime = settings_env(
        env, monkeypatch, COUNTERSIGN_WEBHOOK_SECRET=SECRET, COUNTERSIGN_WEBHOOK_TIMEOUT_SECONDS="5"
    )
    store = runtime.store
    with Receiver(SECRET, [HANG]) as receiver:
        first = countersign(env, "worker")
        try:
            request_id = ApprovalClient(runtime.redis, store).request(
                refund(resume={"webhook": receiver.url})
            )
            wait_for(lambda: store.get(request_id), timeout=30, what="the worker's intake")
            store.vote(
                request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", runtime.resume_event
            )
            wait_for(lambda: receiver.received, timeout=30, what="the first POST")
            helpers = children(first.pid)
            for pid in [*helpers, first.pid]:
                os.kill(pid, signal.SIGKILL)
            first.wait()
            wait_for(lambda: not any(alive(pid) for pid in helpers), what="the sweep to die")
        finally:
            if first.poll() is None:
                first.kill()
        event = outbox(store, request_id)
        assert (event.attempts, event.published_at) == (1, None)  # the attempt died with its process

        second = countersign(env, "worker")
        try:
            wait_for(
                lambda: outbox(store, request_id).published_at,
                timeout=90,
                what="the delivery after the lease",
            )
        finally:
            second.terminate()
            second.wait(timeout=30)

    assert [r.webhook_id for r in receiver.received] == [webhook_id(request_id)] * 2
    assert [r.error for r in receiver.received] == [None, None]
    assert [(name, d["attempt"]) for name, d, _ in webhook_events(store, request_id)] == [
        ("webhook_delivered", 2)
    ]
    assert "resume_published" in events(store, request_id)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the example, not SQL
def test_the_example_receiver_runs_the_approved_refund(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, sandbox: tuple[Sandbox, str], tmp_path: Path
) -> None:
    """`python -m examples.webhook_receiver`, the README's way to try webhooks, verifies the POST and
    runs the refund through `execute_approved`."""
    runtime = settings_env(env, monkeypatch, COUNTERSIGN_WEBHOOK_SECRET=SECRET)
    port = free_port()
    log = tmp_path / "receiver.log"
    with log.open("wb") as sink:
        receiver = subprocess.Popen(
            [sys.executable, "-m", "examples.webhook_receiver", "--port", str(port)],
            cwd=REPO,
            env={**os.environ, **env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches pytest alone; `finally` stops it
        )
    try:
        wait_for(lambda: port_open(port), timeout=30, what="the example receiver")
        request_id, _ = approved(runtime, sandbox[0], f"http://127.0.0.1:{port}/decisions")
        assert deliver_due(Deliverer(runtime)) == 1
        executed = wait_for(
            lambda: (row := runtime.store.get(request_id)) is not None and row.execution == "executed",
            what="the refund to run",
        )
        assert executed
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)
    printed = log.read_text()
    assert f"WEBHOOK {webhook_id(request_id)}" in printed
    assert 'REFUND EXECUTED: {"amount": "120.00", "currency": "USD"}' in printed
    assert outbox(runtime.store, request_id).published_at is not None


@pytest.mark.parametrize(
    "secret",
    ["secret", "whsec_", "whsec_" + base64.b64encode(bytes(16)).decode(), "whsec_not base64!", SECRET[6:]],
)
def test_a_webhook_secret_that_is_not_a_standard_webhooks_one_stops_at_start(secret: str) -> None:
    with pytest.raises(ConfigError) as stopped:
        load_settings(COUNTERSIGN_WEBHOOK_SECRET=secret, _env_file=None)
    assert str(stopped.value) == (
        "COUNTERSIGN_WEBHOOK_SECRET: must be whsec_ and the base64 of 24 to 64 random bytes "
        "(Standard Webhooks)"
    )
