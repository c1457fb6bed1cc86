"""Waiting in process (`ApprovalClient.wait`, `AsyncApprovalClient`): a request that names no resume
target, blocked on its bell, is woken by every way a decision is made (a click, an edit, a reject
with its reason, the policy, the timeout), reads the database a bounded number of times, survives a
Redis restart, and leaves the request pending when it times out."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from redis import Redis
from sqlalchemy import event

from countersign import connections
from countersign.agent import (
    ApprovalClient,
    AsyncApprovalClient,
    Decision,
    ExecutionRefused,
    RequestDeadLettered,
    WaitTimeout,
    execute_approved,
)
from countersign.router import relay, timeouts
from countersign.router.jobs import INTAKE_QUEUE, json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import anyone, drain, wait_for
from tests.helpers.builders import age, refund, status
from tests.helpers.redis_server import RedisServer
from tests.helpers.review import approve, edit, reject

TIMED_AND_AUTOMATIC = """\
    reject_reason: required
    auto_approve: {rule: "double(payload.amount) < 50.0", label: small refunds are automatic}
    timeout: 1h
    on_timeout: deny
"""
WAIT_SECONDS = 20.0
MAX_SELECTS = 3
"""A stored request's wait: two SELECTs before blocking (its resume event, then the request), one after
the ring."""


@pytest.fixture(autouse=True)
def waiting_policy(policy_file: Path) -> Path:
    """The tests' policy, its refunds under 50 approved by policy and timing out after an hour (deny);
    autouse, so it is written before the runtime reads it."""
    policy = policy_file.read_text()
    policy_file.write_text(policy.replace("    reject_reason: required\n", TIMED_AND_AUTOMATIC))
    return policy_file


class Selects:
    """How many SELECTs a store's engines have run since it was made (a SQLAlchemy event listener)."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        for engine in store.engines:
            event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.count += statement.lstrip().upper().startswith("SELECT")


class DecisionCommits:
    """When the transactions that moved a request out of `pending` committed (`time.monotonic()`, at the
    engines' `commit` event, just before COMMIT is sent: a latency from it is a little long)."""

    def __init__(self, store: Store) -> None:
        self.times: list[float] = []
        for engine in store.engines:
            event.listen(engine, "before_cursor_execute", self._statement)
            event.listen(engine, "commit", self._commit)

    def _statement(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        _, update, rest = statement.partition("UPDATE approval_requests SET")  # also inside a WITH
        if update and "status=" in rest.split("WHERE")[0]:
            conn.info["deciding"] = True

    def _commit(self, conn: Any) -> None:
        if conn.info.pop("deciding", False):
            self.times.append(time.monotonic())


class Waiter:
    """`client.wait(request_id)` in a thread: the decision or the error, and when it returned."""

    def __init__(self, client: ApprovalClient, request_id: str, timeout: float = WAIT_SECONDS) -> None:
        self.result: Decision | BaseException | None = None
        self.returned_at = 0.0
        self._thread = threading.Thread(target=self._wait, args=(client, request_id, timeout), daemon=True)
        self._thread.start()

    def _wait(self, client: ApprovalClient, request_id: str, timeout: float) -> None:
        try:
            self.result = client.wait(request_id, timeout=timeout)
        except Exception as exc:
            self.result = exc
        self.returned_at = time.monotonic()

    def finished(self) -> Decision | BaseException | None:
        """What the wait gave, a decision or an error, once it has returned."""
        self._thread.join(WAIT_SECONDS + 5)
        return self.result

    def decision(self) -> Decision:
        result = self.finished()
        assert isinstance(result, Decision), result
        return result


@pytest.fixture
def agent(runtime: Runtime) -> Iterator[connections.Connections]:
    """The waiting agent's connections as `ApprovalClient.from_env` makes them: a Redis client and a
    store of its own (its own engine, so its SELECTs are counted apart from the router's)."""
    made = connections.Connections(runtime.settings)
    yield made
    made.redis.close()
    made.store.engine.dispose()


@pytest.fixture
def waiting(agent: connections.Connections) -> ApprovalClient:
    return ApprovalClient(agent.redis, agent.store)


def waited_refund(**overrides: Any) -> dict[str, Any]:
    """The README's refund with no resume target: the agent waits for its decision in process."""
    return {name: value for name, value in refund(**overrides).items() if name != "resume"}


def blocked(redis: Redis, at_least: int = 1) -> None:
    """Wait until `at_least` clients are blocked in Redis (the waiters are on their bells)."""

    def count() -> int:
        return int(cast("dict[str, Any]", redis.info("clients"))["blocked_clients"])

    wait_for(lambda: count() >= at_least, what=f"{at_least} waiter(s) blocked on the bell")


def carded(client: ApprovalClient, redis: Redis, sb: Sandbox, **overrides: Any) -> tuple[str, dict[str, Any]]:
    """A waited refund (with `overrides`) taken by intake: its id and its card."""
    request_id = client.request(waited_refund(**overrides))
    drain(redis)
    [card] = [m for m in sb.messages("C0FINANCE") if request_id in str(m["blocks"])]
    return request_id, card


def report_wake(how: str, waiter: Waiter, commits: DecisionCommits) -> float:
    """The decision-commit → waiter-returned latency in seconds, printed (`pytest -rP` shows it)."""
    [committed] = commits.times
    latency = waiter.returned_at - committed
    print(f"wait woken by {how}: {latency * 1000:.1f} ms after the decision's commit")
    return latency


@pytest.mark.parametrize(
    ("review", "expected"),
    [
        (approve, ("approved", "512.40", False, None)),
        (edit, ("approved", "400.00", True, None)),
        (reject, ("rejected", "512.40", False, "wrong customer")),
    ],
    ids=["approve", "edit", "reject"],
)
def test_a_reviewers_decision_wakes_the_wait_at_once_with_the_typed_decision(
    waiting: ApprovalClient,
    agent: connections.Connections,
    runtime: Runtime,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    review: Callable[[Sandbox, dict[str, Any]], None],
    expected: tuple[str, str, bool, str | None],
) -> None:
    sb, _ = sandbox
    request_id, card = carded(waiting, redis, sb, payload={"amount": "512.40", "currency": "USD"})
    selects, commits = Selects(agent.store), DecisionCommits(runtime.store)
    waiter = Waiter(waiting, request_id)
    blocked(redis)
    review(sb, card)
    decision = waiter.decision()

    outcome, amount, edited, reason = expected
    assert (decision.request_id, decision.outcome, decision.edited, decision.reason) == (
        request_id,
        outcome,
        edited,
        reason,
    )
    assert decision.payload["amount"] == amount and decision.original_payload["amount"] == "512.40"
    assert (decision.grant is not None) == (outcome == "approved") == decision.may_run
    assert selects.count <= MAX_SELECTS
    assert report_wake(review.__name__, waiter, commits) < 2.0  # ~ms on an idle machine: BENCHMARKS.md


def test_a_policy_approval_at_intake_wakes_a_wait_begun_before_intake(
    waiting: ApprovalClient, agent: connections.Connections, runtime: Runtime, redis: Redis
) -> None:
    request_id = waiting.request(waited_refund(payload={"amount": "20.00", "currency": "USD"}))
    selects, commits = Selects(agent.store), DecisionCommits(runtime.store)
    waiter = Waiter(waiting, request_id)
    blocked(redis)  # queued: intake has not run
    drain(redis)
    decision = waiter.decision()
    assert (decision.outcome, decision.decided_via, decision.reason) == (
        "approved",
        "policy",
        "auto_approve: double(payload.amount) < 50.0",
    )
    assert decision.grant is not None
    assert selects.count <= 8  # queued: looked up in full once (request, audit, dead letters, intake outbox)
    assert report_wake("policy", waiter, commits) < 2.0


def test_expiry_wakes_the_wait_with_the_timeout_result(
    waiting: ApprovalClient,
    agent: connections.Connections,
    runtime: Runtime,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = carded(waiting, redis, sandbox[0])
    selects, commits = Selects(agent.store), DecisionCommits(runtime.store)
    waiter = Waiter(waiting, request_id)
    blocked(redis)
    age(store, request_id, expires_at=-1)
    assert timeouts.sweep(runtime) == 1
    decision = waiter.decision()
    assert (decision.outcome, decision.timeout_result, decision.decided_via, decision.may_run) == (
        "expired",
        "deny",
        "timeout",
        False,
    )
    assert selects.count <= MAX_SELECTS
    assert report_wake("expiry", waiter, commits) < 2.0


def test_a_request_intake_refuses_ends_the_wait_with_its_reason(
    waiting: ApprovalClient, redis: Redis
) -> None:
    request_id = waiting.request(waited_refund(action="wire_money"))
    started = time.monotonic()
    waiter = Waiter(waiting, request_id)
    blocked(redis)
    drain(redis)
    refused = waiter.finished()
    assert isinstance(refused, RequestDeadLettered)
    assert refused.request_id == request_id and "wire_money" in refused.reason
    assert waiter.returned_at - started < WAIT_SECONDS / 2  # woken by intake's ring, not its deadline


def test_a_wait_on_a_repeat_that_intake_resolves_to_the_original_gets_the_originals_decision(
    waiting: ApprovalClient, runtime: Runtime, redis: Redis, sandbox: tuple[Sandbox, str]
) -> None:
    first, _ = carded(waiting, redis, sandbox[0])
    redis.flushall()  # Redis forgets the key: the repeat gets an id of its own, until intake
    second = waiting.request(waited_refund())
    started = time.monotonic()
    waiter = Waiter(waiting, second)
    blocked(redis)  # on the repeat's own bell
    drain(redis)  # intake finds the original, and rings the repeat's bell
    lead = {"slack_user_id": "U0LEAD", "name": "lee"}
    decided = runtime.store.vote(first, lead, "approved", runtime.resume_event, refuse=anyone)
    relay.try_publish(redis, decided.event)  # type: ignore[union-attr]
    assert (second != first, waiter.decision().request_id) == (True, first)
    assert waiter.returned_at - started < WAIT_SECONDS / 2  # woken by the original's ring, not its deadline


def test_a_timed_out_wait_leaves_the_request_pending_and_a_second_wait_gets_the_decision(
    waiting: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = carded(waiting, redis, sb)
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as timed_out:
        waiting.wait(request_id, timeout=0.3)
    assert time.monotonic() - started >= 0.3
    assert isinstance(timed_out.value, TimeoutError) and timed_out.value.request_id == request_id
    assert status(store, request_id) == "pending"

    approve(sb, card)
    assert waiting.wait(request_id, timeout=WAIT_SECONDS).outcome == "approved"


def test_a_timeout_that_is_not_a_finite_number_of_seconds_is_refused_at_once(
    waiting: ApprovalClient, runtime: Runtime
) -> None:
    """NaN compares false with every deadline, so a wait given it never ended."""
    request_id = waiting.request(waited_refund())
    bad: list[tuple[Any, type[Exception]]] = [(-1, ValueError), ("5", TypeError), (None, TypeError)]
    bad += [(True, TypeError), (float("nan"), ValueError), (float("inf"), ValueError)]
    for timeout, error in bad:
        with pytest.raises(error, match=r"^timeout: a finite number of seconds, 0 or more, not "):
            waiting.wait(request_id, timeout=timeout)

    async def async_wait() -> None:
        client = AsyncApprovalClient.from_env(runtime.settings)
        try:
            await client.wait(request_id, timeout=float("nan"))
        finally:
            await client.aclose()

    with pytest.raises(ValueError, match="not nan"):
        asyncio.run(async_wait())
    with pytest.raises(WaitTimeout, match="after 0 s"):
        waiting.wait(request_id, timeout=-0.0)


def test_a_wait_survives_a_redis_restart_and_reads_a_decision_whose_ring_was_lost(
    waiting: ApprovalClient,
    runtime: Runtime,
    redis: Redis,
    redis_server: RedisServer,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    rung_after, card = carded(waiting, redis, sb, run_id="after")
    lost_ring = waiting.request(waited_refund(run_id="lost"))
    drain(redis)  # stored; its card waits for the channel's pace, which this test does not need
    first, second = Waiter(waiting, lost_ring), Waiter(waiting, rung_after)
    blocked(redis, 2)

    redis_server.stop()
    lead = {"slack_user_id": "U0LEAD", "name": "lee"}
    runtime.store.vote(lost_ring, lead, "approved", runtime.resume_event, refuse=anyone)  # nothing rings
    redis_server.start()
    restarted = time.monotonic()
    assert first.decision().outcome == "approved"  # read again once Redis answered
    assert first.returned_at - restarted < WAIT_SECONDS / 2  # at the reconnect, not at its deadline

    blocked(redis)  # the second waiter is back on its bell, on the new server
    approve(sb, card)
    assert second.decision().outcome == "approved"


def test_the_async_client_waits_times_out_and_requests_and_waits(
    runtime: Runtime, redis: Redis, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox

    async def scenario(client: AsyncApprovalClient) -> tuple[Decision, Decision]:
        request_id = await client.request(waited_refund())
        drain(redis)  # on the loop's thread, the main one: RQ's worker sets signal handlers
        with pytest.raises(WaitTimeout):
            await client.wait(request_id, timeout=0.2)
        assert (await client.get(request_id)).status == "pending"
        waited = asyncio.create_task(client.wait(request_id, timeout=WAIT_SECONDS))
        await asyncio.to_thread(blocked, redis)
        [card] = [m for m in sb.messages("C0FINANCE") if request_id in str(m["blocks"])]
        await asyncio.to_thread(approve, sb, card)
        small = waited_refund(run_id="small", payload={"amount": "5.00", "currency": "USD"})
        auto = asyncio.create_task(client.request_and_wait(small, timeout=WAIT_SECONDS))
        await asyncio.to_thread(wait_for, lambda: json_queue(INTAKE_QUEUE, redis).count, what="intake job")
        drain(redis)
        return await waited, await auto

    async def run() -> tuple[Decision, Decision]:
        client = AsyncApprovalClient.from_env(runtime.settings)
        try:
            return await scenario(client)
        finally:
            await client.aclose()

    clicked, auto = asyncio.run(run())
    assert clicked.outcome == "approved" and clicked.decided_by[0]["slack_user_id"] == "U0LEAD"
    assert (auto.outcome, auto.decided_via) == ("approved", "policy")


def test_the_async_client_survives_a_redis_restart_and_reads_the_decision_made_meanwhile(
    waiting: ApprovalClient,
    runtime: Runtime,
    redis: Redis,
    redis_server: RedisServer,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = carded(waiting, redis, sandbox[0])

    async def scenario(client: AsyncApprovalClient) -> Decision:
        waited = asyncio.create_task(client.wait(request_id, timeout=WAIT_SECONDS))
        await asyncio.to_thread(blocked, redis)
        redis_server.stop()
        lead = {"slack_user_id": "U0LEAD", "name": "lee"}
        await asyncio.to_thread(runtime.store.vote, request_id, lead, "approved", runtime.resume_event)
        redis_server.start()
        return await asyncio.wait_for(waited, WAIT_SECONDS / 2)  # at the reconnect, not at its deadline

    async def run() -> Decision:
        client = AsyncApprovalClient.from_env(runtime.settings)
        try:
            return await scenario(client)
        finally:
            await client.aclose()

    assert asyncio.run(run()).outcome == "approved"


def test_a_waited_approval_runs_once_through_execute_approved(
    waiting: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = carded(waiting, redis, sb)
    waiter = Waiter(waiting, request_id)
    blocked(redis)
    approve(sb, card)
    decision = waiter.decision()
    runs: list[dict[str, Any]] = []
    assert execute_approved(decision, lambda payload: runs.append(payload) or "done") == "done"
    with pytest.raises(ExecutionRefused) as refused:
        execute_approved(decision, runs.append)
    assert refused.value.why == "already_executed"
    assert runs == [{"amount": "120.00", "currency": "USD"}]
    row = store.get(request_id)
    assert row is not None and row.execution == "executed"


def test_a_decision_without_a_resume_target_enqueues_no_job_and_the_sweep_marks_it_published(
    waiting: ApprovalClient, runtime: Runtime, redis: Redis, store: Store, sandbox: tuple[Sandbox, str]
) -> None:
    request_id, _ = carded(waiting, redis, sandbox[0])
    assert waiting.get(request_id).request["resume"] is None  # type: ignore[index]
    lead = {"slack_user_id": "U0LEAD", "name": "lee"}
    decided = runtime.store.vote(request_id, lead, "approved", runtime.resume_event, refuse=anyone)
    assert relay.try_publish(redis, decided.event)  # type: ignore[union-attr]
    assert relay.sweep(store, redis) == 0  # no job waiting
    event = store.outbox_event(request_id)
    assert event is not None and event.published_at is not None and event.queue is None
    # nothing was published for an agent to resume, and the audit trail does not say there was
    assert [e.event for e in store.audit_trail(request_id)][-2:] == ["vote", "approved"]
    assert relay.heal(store, redis, window_seconds=3600) == 0  # no job was lost: there was none
    assert [key for key in redis.keys("rq:queue:*") if key != b"rq:queue:countersign"] == []
    assert waiting.wait(request_id, timeout=1).outcome == "approved"
