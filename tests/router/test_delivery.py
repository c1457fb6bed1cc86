"""Slack saying no, through the sandbox's fault injection: rate limits and the per-channel pace
reschedule the job (no worker sleeps), server errors retry, a missing channel falls back to the
approvers directly, refused blocks fall back to a compact card, a vanished card gets a fresh
status message. Nothing is lost and nothing is posted twice."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pytest
from redis import Redis
from rq.registry import ScheduledJobRegistry
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from countersign.agent import ApprovalClient
from countersign.exceptions import RetryLater
from countersign.router import delivery
from countersign.router.delivery import post_card
from countersign.router.jobs import INTAKE_LANE_WIDTH, INTAKE_QUEUE, intake_job_id, json_queue
from countersign.router.pace import CLOCK_SLACK_SECONDS, PACE_MILLISECONDS
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.schema import payload_sha256
from countersign.store import Store
from countersign.workers import CountersignWorker
from tests.helpers import builders, drain, empty_resume, hold_channel, run_scheduled, wait_for
from tests.helpers.builders import refund
from tests.helpers.faults import ServedSandbox


def reserved(redis: Redis, request_id: str) -> int:
    """The posting time (unix ms) reserved for the card of `request_id` in C0FINANCE at level 0."""
    return int(redis.get(f"countersign:pace:C0FINANCE:{request_id}:0"))  # type: ignore[arg-type]


def card_count(sb: Sandbox, request_id: str) -> int:
    return len([m for m in sb.messages() if request_id in str(m["blocks"])])


def scheduled_at(redis: Redis, job_id: str) -> float | None:
    """The unix second at which RQ runs the scheduled job `job_id` again, or None if not scheduled."""
    registry = ScheduledJobRegistry(
        "countersign", connection=redis, serializer=json_queue("countersign", redis).serializer
    )
    return redis.zscore(registry.key, job_id)


def scheduled_in(redis: Redis, job_id: str) -> float | None:
    """Seconds from now until RQ runs the scheduled job `job_id` again, or None if not scheduled."""
    at = scheduled_at(redis, job_id)
    return None if at is None else at - time.time()


def test_rate_limit_reschedules_for_retry_after_and_posts_once_later(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    sb.inject("chat.postMessage", status=429, retry_after=7)
    request_id = client.request(refund())
    before = time.time()
    drain(redis)
    after = time.time()
    assert card_count(sb, request_id) == 0
    at = scheduled_at(redis, intake_job_id(request_id))
    # Retry-After honoured by rescheduling (whole seconds): 7 s after the 429, which came between
    # `before` and `after`, so the check holds however long the drain took
    assert at is not None and before + 6 < at <= after + 8
    assert redis.get(f"countersign:pace:C0FINANCE:{request_id}:0") is None  # it gives up its time
    redis.delete("countersign:pace:C0FINANCE")
    # not before then: the posting lease runs 7 s from the 429 (database clock), and this call comes
    # milliseconds after it
    assert post_card(runtime, store.get(request_id)) == "duplicate"  # type: ignore[arg-type]
    lease_runs_out(store, request_id)
    redis.delete("countersign:pace:C0FINANCE")
    assert post_card(runtime, store.get(request_id)) == "posted"  # type: ignore[arg-type]
    assert card_count(sb, request_id) == 1


def lease_runs_out(store: Store, request_id: str) -> None:
    """Time passes: the posting lease (or back-off) of the request runs out."""
    from sqlalchemy import update

    from countersign.store.models import ApprovalRequest, utcnow_plus

    with store.engine.begin() as connection:
        connection.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == request_id)
            .values(card_lease_until=utcnow_plus(-1))
        )


def test_a_busy_channel_waits_its_turn_without_holding_up_others(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    first = client.request(refund(run_id="a"))
    drain(redis)  # the channel is free: its card posts at once
    hold_channel(redis, "C0FINANCE")  # then busy for a minute, not just the pace's 1.1 s
    second = client.request(refund(run_id="b"))
    other = client.request(refund(run_id="c", action="send_email", payload={"to": "x"}))
    drain(redis)
    assert card_count(sb, first) == 1 and card_count(sb, other) == 1  # different channels: no wait
    assert card_count(sb, second) == 0 and scheduled_in(redis, intake_job_id(second)) is not None


def test_a_burst_of_one_action_does_not_queue_the_other_actions_behind_all_of_it(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    hold_channel(redis, "C0FINANCE")  # the burst's cards wait for their times
    burst = [client.request(refund(run_id=str(n))) for n in range(3 * INTAKE_LANE_WIDTH)]
    other = client.request(refund(run_id="other", action="send_email", payload={"to": "x"}))
    queue = json_queue(INTAKE_QUEUE, redis)
    # the burst takes its lane's places in the queue; the rest of it waits outside, the other behind the lane
    assert queue.get_job_ids() == [intake_job_id(i) for i in [*burst[:INTAKE_LANE_WIDTH], other]]
    worker = CountersignWorker([queue], connection=redis, serializer=JSONSerializer)
    worker.work(burst=True, max_jobs=INTAKE_LANE_WIDTH + 1)  # the jobs in the order the worker takes them
    assert card_count(sb, other) == 1  # its card is posted while most of the burst has not run yet
    assert [store.get(i) is not None for i in burst].count(True) == INTAKE_LANE_WIDTH
    drain(redis)  # each first run that ends lets the next of the burst in: all of it runs, in order
    slots = [reserved(redis, i) for i in burst]
    assert slots == [slots[0] + n * PACE_MILLISECONDS for n in range(len(burst))]
    assert all(scheduled_at(redis, intake_job_id(i)) is not None for i in burst)


def test_a_card_whose_time_has_come_is_not_queued_behind_its_lanes_first_runs(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    hold_channel(redis, "C0FINANCE")
    burst = [client.request(refund(run_id=str(n))) for n in range(3 * INTAKE_LANE_WIDTH)]
    queue = json_queue(INTAKE_QUEUE, redis)
    worker = CountersignWorker([queue], connection=redis, serializer=JSONSerializer)
    worker.work(burst=True, max_jobs=INTAKE_LANE_WIDTH)  # the lane's first runs: each card waits for its time
    job_id = intake_job_id(burst[0])
    redis.zadd(queue.scheduled_job_registry.key, {job_id: 0})  # its time has come
    scheduler = RQScheduler([INTAKE_QUEUE], connection=redis, serializer=JSONSerializer)
    scheduler.prepare_registries([INTAKE_QUEUE])
    scheduler.enqueue_scheduled_jobs()  # as the router's sweep does every second
    # straight onto the queue's tail, not into its lane behind the burst's waiting first runs
    assert queue.get_job_ids()[-1] == job_id
    assert queue.get_job_ids()[:-1] == [
        intake_job_id(i) for i in burst[INTAKE_LANE_WIDTH : 2 * INTAKE_LANE_WIDTH]
    ]


def test_an_intake_job_sent_again_while_queued_or_waiting_in_its_lane_runs_once(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    hold_channel(redis, "C0FINANCE")
    ids = [client.request(refund(run_id=str(n))) for n in range(INTAKE_LANE_WIDTH + 1)]
    queue = json_queue(INTAKE_QUEUE, redis)
    assert intake_job_id(ids[0]) in queue.get_job_ids()  # queued
    assert intake_job_id(ids[-1]) not in queue.get_job_ids()  # waiting in its lane
    # sent again by the agent (same key): RQ cannot refuse a rate-limited job as a duplicate
    assert [client.request(refund(run_id=n)) for n in ("0", str(INTAKE_LANE_WIDTH))] == [ids[0], ids[-1]]
    drain(redis)
    jobs = [queue.fetch_job(intake_job_id(i)) for i in ids]
    assert [job.number_of_retries if job else None for job in jobs] == [1] * len(ids)  # each ran once
    assert all(scheduled_at(redis, intake_job_id(i)) is not None for i in ids)  # waiting for its time


def test_cards_for_one_channel_reserve_their_times_in_turn_and_wait_for_them_once(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    ids = [client.request(refund(run_id=str(n))) for n in range(5)]
    hold_channel(redis, "C0FINANCE")
    drain(redis)  # every intake job runs once, reserves its time after the one before and waits for it
    slots = [reserved(redis, i) for i in ids]
    assert slots == [slots[0] + n * PACE_MILLISECONDS for n in range(5)]  # one card per pace, in order
    for request_id, slot in zip(ids, slots, strict=True):  # posted now, or rescheduled for its time
        rerun = scheduled_at(redis, intake_job_id(request_id))
        # the whole second at or after its time (give or take the clocks' slack), never a second late
        assert card_count(sb, request_id) == 1 or slot / 1000 - CLOCK_SLACK_SECONDS <= rerun < slot / 1000 + 1
    last = store.get(ids[-1])
    assert last is not None and last.card_attempts == 0  # nobody claimed it yet
    assert last.card_lease_until is not None and last.card_lease_until.timestamp() <= slots[-1] / 1000
    due = {row.id for row in store.due_for_card(grace_seconds=0)}
    assert not due & set(ids)  # the card sweep leaves alone the cards a second or more away (a minute)


def test_a_job_run_again_early_keeps_its_time(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    ids = [client.request(refund(run_id=str(n))) for n in range(5)]
    hold_channel(redis, "C0FINANCE")  # every card waits for its time, a minute or more away
    drain(redis)
    job_id = intake_job_id(ids[-1])
    slot = scheduled_at(redis, job_id)
    queue = json_queue("countersign", redis)
    redis.zrem(ScheduledJobRegistry(queue=queue).key, job_id)
    queue.enqueue_job(queue.fetch_job(job_id))  # e.g. a scheduler moved it back too soon
    drain(redis)
    again = scheduled_at(redis, job_id)
    # the same reserved time, not behind the rest; RQ keeps whole seconds, and this host's clock is
    # read a moment after Redis's, so under load the rounding may land on the next second
    assert slot is not None and again is not None and slot <= again <= slot + 1
    later = client.request(refund(run_id="later"))
    drain(redis)
    assert reserved(redis, later) == reserved(redis, ids[-1]) + PACE_MILLISECONDS  # the line did not move


def redis_ms(redis: Redis) -> int:
    """Redis's clock, unix milliseconds (the pace's clock)."""
    seconds, micros = redis.time()
    return seconds * 1000 + micros // 1000


def move_pace_back(redis: Redis, ids: list[str], ms: int) -> None:
    """Move the channel's next free time and the reservations of `ids` in C0FINANCE `ms` earlier, as
    `ms` of Redis's clock passing would (their times stay kept: they do not expire meanwhile)."""
    channel = "countersign:pace:C0FINANCE"
    for key in [channel, *(f"{channel}:{i}:0" for i in ids)]:
        redis.set(key, int(redis.get(key)) - ms)  # type: ignore[arg-type]


def test_cards_whose_times_passed_while_no_worker_ran_take_new_times_at_the_pace(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    ids = [client.request(refund(run_id=f"lapse-{n}")) for n in range(4)]
    hold_channel(redis, "C0FINANCE")  # each card reserves its time, a minute or more away, and waits
    drain(redis)
    # the router is down while all four times pass: the first was due 9 s ago, the last 5.7 s ago
    move_pace_back(redis, ids, reserved(redis, ids[0]) - redis_ms(redis) + 9_000)
    for request_id in ids:
        lease_runs_out(store, request_id)  # and so did their posting leases (database clock)
    started, ended = [], []
    for request_id in ids:  # the router is back: its scheduler finds every job's time come at once
        started.append(redis_ms(redis))
        run_scheduled(redis, intake_job_id(request_id))
        ended.append(redis_ms(redis))
    posted = posted_in_turn(sb, ids)
    slots = [reserved(redis, i) for i in ids]  # new times, in turn, from now on
    assert started[0] <= slots[0]
    for n in range(1, 4):  # one pace after the one before; later only on a machine so slow that its
        # run came after that time (then its time is when it ran)
        gap = slots[n] - slots[n - 1]
        assert gap == PACE_MILLISECONDS or (gap > PACE_MILLISECONDS and slots[n] >= started[n])
    # the first posts at once; each next one only if its new time had come when its job ran (on a
    # fast machine none has: 1.1 s apart), never four cards at once because their old times passed
    assert posted == ids[: len(posted)] and ids[0] in posted
    for n, request_id in enumerate(ids):
        assert slots[n] <= ended[n] if request_id in posted else slots[n] > started[n]
    waiting = ids[len(posted) :]
    if not waiting:  # every run came after the next card's time: nothing left to wait for
        return
    move_pace_back(redis, waiting, reserved(redis, waiting[0]) - redis_ms(redis))  # the next one's time comes
    lease_runs_out(store, waiting[0])
    for request_id in waiting:
        run_scheduled(redis, intake_job_id(request_id))
    assert posted_in_turn(sb, ids)[: len(posted) + 1] == ids[: len(posted) + 1]


def posted_in_turn(sb: Sandbox, ids: list[str]) -> list[str]:
    """Which of `ids` have a card in C0FINANCE, in the order Slack received them."""
    return [
        next(i for i in ids if i in str(m["blocks"]))
        for m in sb.messages("C0FINANCE")
        if any(i in str(m["blocks"]) for i in ids)
    ]


def test_a_card_scheduled_far_out_is_logged_with_the_channel_backlog(
    client: ApprovalClient, redis: Redis, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    hold_channel(redis, "C0FINANCE", seconds=120)  # earlier cards: two minutes of them
    ids = [client.request(refund(run_id=str(n))) for n in range(2)]
    with caplog.at_level(logging.WARNING, logger="countersign.router.delivery"):
        drain(redis)
    logged = [r.getMessage() for r in caplog.records if "card scheduled in" in r.getMessage()]
    found = [
        re.fullmatch(
            rf"request {request_id}: card scheduled in (\d+) s in C0FINANCE, (\d+) cards ahead "
            r"\((\d+) waiting in that channel\); its timeout counts from the card",
            line,
        )
        for request_id, line in zip(ids, logged, strict=True)
    ]
    (wait, ahead, backlog), (later_wait, later_ahead, later_backlog) = [
        [int(n) for n in match.groups()] for match in found if match
    ]
    assert 100 <= wait <= 120 and later_wait in (wait, wait + 1, wait + 2)
    assert later_ahead == ahead + 1 and later_backlog == later_ahead + 1 and backlog == ahead + 1


def test_server_error_is_retried_after_a_back_off(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    sb.inject("chat.postMessage", status=500, times=2)  # the client retries a 500 once itself
    request_id = client.request(refund())
    drain(redis)
    assert card_count(sb, request_id) == 0
    assert scheduled_in(redis, intake_job_id(request_id)) is not None  # the intake job's RQ Retry
    failed = next(e for e in store.audit_trail(request_id) if e.event == "delivery_failed")
    assert failed.detail == {"why": "internal_error", "retry_in": 30}  # backs off, and says so
    lease_runs_out(store, request_id)
    redis.delete("countersign:pace:C0FINANCE")
    assert post_card(runtime, store.get(request_id)) == "posted" and card_count(sb, request_id) == 1  # type: ignore[arg-type]


def test_a_post_slack_did_not_answer_is_tried_again_within_seconds_and_audited(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    """Slack unreachable (nothing listens): the card's posting lease is not held for its minute, the
    trail says why, and once Slack answers the next try posts it once."""
    import socket
    from datetime import UTC, datetime

    from countersign.slackhttp import PooledWebClient

    sb, _ = sandbox
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    runtime.__dict__["slack"] = PooledWebClient(
        token="xoxb-test", base_url=f"http://127.0.0.1:{port}/api/", timeout=1, retry_handlers=[]
    )
    request_id = client.request(refund())
    drain(redis)
    failed = next(e for e in store.audit_trail(request_id) if e.event == "delivery_failed")
    assert failed.detail is not None and failed.detail["retry_in"] == 5
    assert "Connection refused" in failed.detail["why"]
    row = store.get(request_id)
    assert row is not None and row.card_ts is None and row.card_lease_until is not None
    assert (row.card_lease_until.replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds() <= 5
    del runtime.__dict__["slack"]  # Slack answers again
    lease_runs_out(store, request_id)
    redis.delete("countersign:pace:C0FINANCE")
    assert post_card(runtime, store.get(request_id)) == "posted" and card_count(sb, request_id) == 1  # type: ignore[arg-type]


def test_missing_channel_falls_back_to_the_approvers_and_is_audited(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    sb.inject("chat.postMessage", error="channel_not_found")
    request_id = client.request(refund())
    drain(redis)
    row = store.get(request_id)
    assert row is not None and row.card_ts is not None and row.channel != "C0FINANCE"
    assert len(sb.messages(row.channel)) == 1 and sb.messages("C0FINANCE") == []
    failed = next(e for e in store.audit_trail(request_id) if e.event == "delivery_failed")
    assert failed.detail == {
        "why": "channel_not_found",
        "to_channel": row.channel,
        "from_channel": "C0FINANCE",
    }


def test_refused_blocks_fall_back_to_a_compact_card(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    sb.inject("chat.postMessage", error="msg_blocks_too_long")
    request_id = client.request(refund())
    drain(redis)
    [card] = sb.messages("C0FINANCE")
    assert card["blocks"][0]["block_id"] == "compact" and request_id in str(card["blocks"])


def test_a_vanished_card_gets_a_fresh_status_message(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    request_id = client.request(refund())
    drain(redis)
    request = store.get(request_id)
    assert request is not None
    store.vote(request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", empty_resume)
    sb.inject("chat.update", error="message_not_found")
    delivery.update_card(runtime, runtime.slack, store.get(request_id))  # type: ignore[arg-type]
    messages: list[dict[str, Any]] = sb.messages("C0FINANCE")
    assert len(messages) == 2 and "Approved by <@U0LEAD>" in str(messages[1]["blocks"])


def test_a_post_slower_than_the_client_timeout_is_found_not_posted_twice(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    from sqlalchemy import update

    from countersign.slackhttp import PooledWebClient
    from countersign.store.models import ApprovalRequest, utcnow_plus

    sb, url = sandbox
    runtime.__dict__["slack"] = PooledWebClient(
        token="xoxb-test", base_url=url + "/api/", timeout=1, retry_handlers=[]
    )
    # Slack posts it, but after the client gave up: the client waits 1 s, Slack answers after 5 s, so
    # the client has given up even if its thread gets no CPU for a few seconds
    sb.inject("chat.postMessage", delay_seconds=5)
    request_id = client.request(refund())
    drain(redis)
    wait_for(lambda: card_count(sb, request_id) == 1, timeout=20, what="the slow post to land")
    row = store.get(request_id)
    assert row is not None and row.card_ts is None  # the worker never learnt the ts
    with store.engine.begin() as connection:  # the posting lease runs out
        connection.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == request_id)
            .values(card_lease_until=utcnow_plus(-1))
        )
    redis.delete("countersign:pace:C0FINANCE")
    assert post_card(runtime, store.get(request_id)) == "found"  # type: ignore[arg-type]
    assert card_count(sb, request_id) == 1


def test_a_refused_fallback_is_not_retried_in_a_loop(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    sb.inject("chat.postMessage", error="channel_not_found", times=2)  # the channel, then the group DM
    request_id = client.request(refund())
    drain(redis)
    assert len(sb.calls("chat.postMessage")) == 2 and len(sb.calls("conversations.open")) == 1
    events = [e.event for e in store.audit_trail(request_id)]
    assert events.count("delivery_failed") == 2  # rerouted once, then refused and backed off
    assert store.get(request_id).card_ts is None  # type: ignore[union-attr]


def test_a_failing_lookup_for_an_earlier_card_never_posts_blind(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    request_id = client.request(refund())
    drain(redis)
    with store.engine.begin() as connection:  # the ts was never stored, and the lease ran out
        from sqlalchemy import update

        from countersign.store.models import ApprovalRequest

        connection.execute(
            update(ApprovalRequest).where(ApprovalRequest.id == request_id).values(card_ts=None)
        )
    lease_runs_out(store, request_id)
    redis.delete("countersign:pace:C0FINANCE")
    sb.inject("conversations.history", status=429, retry_after=9)
    try:
        post_card(runtime, store.get(request_id))  # type: ignore[arg-type]
    except RetryLater as later:
        assert later.seconds == 9
    else:
        raise AssertionError("posted without knowing whether the card exists")
    assert card_count(sb, request_id) == 1


def test_a_rate_limited_dm_fallback_waits_as_slack_asks(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    sb, _ = sandbox
    sb.inject("chat.postMessage", error="channel_not_found")
    sb.inject("conversations.open", status=429, retry_after=13)
    request_id = client.request(refund())
    drain(redis)
    wait = scheduled_in(redis, intake_job_id(request_id))
    assert wait is not None and 12 <= wait <= 14  # Slack's Retry-After, not the 30 s back-off
    assert "delivery_failed" not in [e.event for e in store.audit_trail(request_id)]
    row = store.get(request_id)
    assert row is not None and row.card_ts is None and row.channel == "C0FINANCE"


def test_the_audit_trail_keeps_what_the_posted_card_showed_reviewers(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], store: Store
) -> None:
    sb, _ = sandbox
    request_id, card = builders.post_card(client, redis, sb)
    [posted] = [e.detail for e in store.audit_trail(request_id) if e.event == "card_posted"]
    assert posted == {
        "ts": card["ts"],
        "text": card["text"],
        "blocks_sha256": payload_sha256({"blocks": card["blocks"]}),  # the chain seals it with the decision
    }


def test_an_answer_slack_cannot_be_reached_for_is_logged_not_raised(
    runtime: Runtime, sandbox_server: ServedSandbox, caplog: pytest.LogCaptureFixture
) -> None:
    """`delivery.tell` follows an action already recorded: a refused connection (an `OSError`)
    must not reach the listener, which would tell the reviewer nothing changed."""
    with sandbox_server.down(), caplog.at_level(logging.WARNING, logger="countersign.router.delivery"):
        delivery.tell(runtime.slack, "C0FINANCE", "U0LEAD", "recorded")
        delivery.tell(runtime.slack, None, "U0LEAD", "recorded")
    assert len([m for m in caplog.messages if "answer to U0LEAD not delivered" in m]) == 2
    assert sandbox_server.sb.ephemerals("U0LEAD") == []
