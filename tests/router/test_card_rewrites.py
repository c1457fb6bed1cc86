"""A decided card never keeps its Approve / Reject / Edit buttons (only Details): when Slack will not
rewrite it (429, 5xx), the card sweep tries again until the card tells the truth; a vanished card
gets one status message, which later rewrites edit instead of posting another."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from redis import Redis
from sqlalchemy import update

from countersign.agent import ApprovalClient, report_outcome
from countersign.router import cards, delivery, review, timeouts
from countersign.router.cards import APPROVE_ACTION
from countersign.router.jobs import json_queue, request_refresh
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import ApprovalRequest, Store
from tests.helpers import drain, empty_resume, run_scheduled, wait_for
from tests.helpers.builders import age, audited, card_at, decidable, post_card, refresh_due, refund, status
from tests.helpers.redis_server import RedisServer


def scheduled(redis: Redis) -> list[str]:
    """The ids of the jobs RQ has scheduled on the router's queue."""
    return json_queue("countersign", redis).scheduled_job_registry.get_job_ids()


def scheduled_at(redis: Redis, job_id: str) -> float:
    """The unix time at which RQ runs the scheduled job `job_id`."""
    return float(redis.zscore(json_queue("countersign", redis).scheduled_job_registry.key, job_id))


def test_a_card_slack_rate_limits_after_an_approval_is_rewritten_by_the_sweep(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    sb.inject("chat.update", status=429, retry_after=7)
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    wait_for(lambda: refresh_due(store, request_id), what="the rewrite to be deferred")
    assert status(store, request_id) == "approved" and decidable(card_at(sb, card["ts"]))
    timeouts.sweep(runtime)
    assert decidable(card_at(sb, card["ts"]))  # Slack said wait 7 s: not yet
    age(store, request_id, card_refresh_due_at=-1)
    timeouts.sweep(runtime)
    assert not decidable(card_at(sb, card["ts"])) and not refresh_due(store, request_id)
    assert "Approved by <@U0LEAD>" in json.dumps(card_at(sb, card["ts"])["blocks"])


def test_a_decision_while_chat_update_is_held_off_after_a_429_goes_to_the_sweep_without_a_call(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """Issue 14: Slack asked to wait 7 s before the next chat.update (a 429); a card decided meanwhile
    is not sent to Slack (it would only draw another 429) but stored for the card sweep, like the
    card that drew the 429, due within those seconds; the sweep rewrites both once due."""
    sb, _ = sandbox
    first, first_card = post_card(client, redis, sb, run_id="held-1")
    second, second_card = post_card(client, redis, sb, "C0APPROVALS", run_id="held-2", action="send_email")
    lee = {"slack_user_id": "U0LEAD", "name": "lee"}
    sb.inject("chat.update", status=429, retry_after=7)
    assert review.approve(runtime, runtime.slack, first, lee, "C0FINANCE") == "decided"
    updates = len(sb.calls("chat.update"))
    assert review.approve(runtime, runtime.slack, second, lee, "C0APPROVALS") == "decided"
    assert len(sb.calls("chat.update")) == updates  # held off: no call
    for request_id, card in ((first, first_card), (second, second_card)):
        assert status(store, request_id) == "approved" and decidable(card_at(sb, card["ts"], card["channel"]))
        row = store.get(request_id)
        assert row is not None and row.card_refresh_due_at is not None
        assert 0 < (row.card_refresh_due_at - datetime.now(UTC)).total_seconds() <= 7
        age(store, request_id, card_refresh_due_at=-1)
    timeouts.sweep(runtime, rewrites=2)  # due: the sweep calls chat.update for each
    for request_id, card in ((first, first_card), (second, second_card)):
        assert not decidable(card_at(sb, card["ts"], card["channel"])) and not refresh_due(store, request_id)


def test_news_while_slack_puts_a_rewrite_off_waits_for_the_stored_retry_and_is_on_the_card_then(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """Issue 14: the outcome's refresh does not call chat.update for a card whose rewrite Slack put
    off, before or after its `Retry-After` (Slack's bucket would answer 429 again, and a second retry
    would be stored): the card sweep, which holds that rewrite, shows the decision and the outcome."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    sb.inject("chat.update", status=429, retry_after=7)
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    wait_for(lambda: refresh_due(store, request_id), what="the rewrite to be deferred")
    due = store.get(request_id).card_refresh_due_at  # type: ignore[union-attr]
    updates = len(sb.calls("chat.update"))
    report_outcome(request_id, True, "refunded", runtime)
    drain(redis)  # the refresh the outcome asked for
    assert len(sb.calls("chat.update")) == updates and decidable(card_at(sb, card["ts"]))
    assert store.get(request_id).card_refresh_due_at == due  # type: ignore[union-attr]
    age(store, request_id, card_refresh_due_at=-1)
    request_refresh(redis, request_id)  # due now: still the sweep's
    drain(redis)
    assert len(sb.calls("chat.update")) == updates and decidable(card_at(sb, card["ts"]))
    timeouts.sweep(runtime)
    shown = json.dumps(card_at(sb, card["ts"])["blocks"], ensure_ascii=False)
    assert "Approved by <@U0LEAD>" in shown and "Executed ✓" in shown and not refresh_due(store, request_id)


def test_a_card_slack_fails_to_rewrite_after_an_expiry_is_rewritten_by_the_sweep(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    age(store, request_id, expires_at=-1)
    sb.inject("chat.update", status=503, times=2)  # the client's own retry meets the second one
    timeouts.sweep(runtime)
    assert status(store, request_id) == "expired" and decidable(card_at(sb, card["ts"]))
    assert refresh_due(store, request_id)
    age(store, request_id, card_refresh_due_at=-1)
    timeouts.sweep(runtime)
    assert not decidable(card_at(sb, card["ts"])) and not refresh_due(store, request_id)


def test_a_card_expired_while_redis_is_down_is_rewritten_all_the_same(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    redis_server: RedisServer,
    sandbox: tuple[Sandbox, str],
) -> None:
    """The card sweep rewrites an expired card (`delivery.update_card`) although it cannot mark the
    approvers' Home tabs due: Redis refusing that is logged, never the end of the rewrite."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    age(store, request_id, expires_at=-1)
    with redis_server.down():
        timeouts.sweep(runtime)
        assert status(store, request_id) == "expired"
        assert not decidable(card_at(sb, card["ts"])) and not refresh_due(store, request_id)
    assert "Expired" in json.dumps(card_at(sb, card["ts"])["blocks"])


def test_a_vanished_card_gets_one_status_message_which_later_rewrites_edit(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    store.vote(request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", empty_resume)
    sb.inject("chat.update", error="message_not_found")
    delivery.refresh(runtime, request_id)
    messages = sb.messages("C0FINANCE")
    assert len(messages) == 2 and "Approved by <@U0LEAD>" in json.dumps(messages[1]["blocks"])
    row = store.get(request_id)
    assert row is not None and row.card_ts == messages[1]["ts"]
    report_outcome(request_id, True, "refunded", runtime)
    drain(redis)  # the card refresh the report queued (and its note in the status message's thread)
    messages = [m for m in sb.messages("C0FINANCE") if m["thread_ts"] is None]
    assert len(messages) == 2 and "Executed ✓" in json.dumps(messages[1]["blocks"], ensure_ascii=False)


def test_an_escalated_card_slack_rate_limits_is_rewritten_by_a_job_at_slacks_pace(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    sb.inject("chat.update", status=429, retry_after=9)
    age(store, request_id, expires_at=-1)
    before = time.time()
    timeouts.sweep(runtime)
    after = time.time()
    assert store.get(request_id).channel == "C0FINLEADS"  # type: ignore[union-attr]
    assert decidable(card_at(sb, card["ts"]))  # the old card is not rewritten yet
    [job_id] = scheduled(redis)
    at = scheduled_at(redis, job_id)
    assert before + 8 <= at <= after + 10  # Slack's Retry-After (9 s; RQ keeps whole seconds)
    sb.inject("chat.update", status=503, times=2)  # busy again: the job tries again later
    run_scheduled(redis, job_id)
    assert decidable(card_at(sb, card["ts"])) and scheduled(redis) == [job_id]
    run_scheduled(redis, job_id)
    old = card_at(sb, card["ts"])
    assert not decidable(old) and "escalated to <#C0FINLEADS>" in json.dumps(old["blocks"])
    assert scheduled(redis) == []


def test_a_card_whose_poster_died_before_storing_it_is_found_and_rewritten_once_decided(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """The worker posted the card and was killed before it stored the card's `ts`; a reviewer
    approves on that card before the posting lease runs out, so no worker posts it again."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    with store.engine.begin() as connection:  # the state the killed worker left: card in Slack, no ts
        connection.execute(
            update(ApprovalRequest).where(ApprovalRequest.id == request_id).values(card_ts=None)
        )
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    wait_for(lambda: not decidable(card_at(sb, card["ts"])), what="the adopted card to be rewritten")
    row = store.get(request_id)
    assert row is not None and (row.status, row.card_ts) == ("approved", card["ts"])
    assert "Approved by <@U0LEAD>" in json.dumps(card_at(sb, card["ts"])["blocks"])
    assert len(sb.messages("C0FINANCE")) == 1  # adopted, not posted again
    posted = [e.detail for e in store.audit_trail(request_id) if e.event == "card_posted"]
    assert len(posted) == 2  # the worker's own, and the adoption's, both of the card as Slack keeps it
    seen = cards.shown(card["text"], card["blocks"])
    assert all((d["ts"], d["text"], d["blocks_sha256"]) == (card["ts"], *seen.values()) for d in posted)
    assert audited(store, request_id, "approved")["shown"] == seen


def test_a_request_decided_while_its_card_was_being_posted_gets_its_card_rewritten(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    sb.inject("chat.postMessage", delay_seconds=1.0)  # posts, slowly: the decision lands meanwhile
    request_id = client.request(refund())

    def reviewer() -> None:  # approves once the card's posting has been claimed
        wait_for(lambda: (row := store.get(request_id)) is not None and row.card_attempts == 1)
        store.vote(request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", runtime.resume_event)

    deciding = threading.Thread(target=reviewer)
    deciding.start()
    drain(redis)  # intake posts the card, for a second
    deciding.join()
    assert status(store, request_id) == "approved"
    [card] = sb.messages("C0FINANCE")
    row = store.get(request_id)
    assert row is not None and (row.status, row.card_ts) == ("approved", card["ts"])
    assert not decidable(card) and "Approved by <@U0LEAD>" in json.dumps(card["blocks"])


def test_every_version_of_a_pending_card_is_in_the_trail_and_matches_the_votes_made_on_it(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """A quorum's first vote rewrites the card (`card_updated`, `counted`), and the second vote,
    made on that version, says so; the escalated card's rewrite is a version too."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, payload={"amount": "25000.00", "currency": "USD"})
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    counted = audited(store, request_id, "card_updated")
    now = card_at(sb, card["ts"])
    assert "1 of 2 approvals" in json.dumps(now["blocks"]) and counted["why"] == "counted"
    assert {"text": counted["text"], "blocks_sha256": counted["blocks_sha256"]} == cards.shown(
        now["text"], now["blocks"]
    )
    assert audited(store, request_id, "vote")["shown"] == cards.shown(card["text"], card["blocks"])

    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")  # a repeat: nothing new is shown
    wait_for(lambda: "You had already approved" in str(sb.ephemerals("U0LEAD")))
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    second = audited(store, request_id, "vote", nth=1)["shown"]
    assert second == {"text": counted["text"], "blocks_sha256": counted["blocks_sha256"]}
    assert [e.event for e in store.audit_trail(request_id)].count("card_updated") == 1


def test_an_escalated_cards_rewrite_is_a_version_in_the_trail(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    old = card_at(sb, card["ts"])
    assert not decidable(old)
    escalated = audited(store, request_id, "card_updated")
    assert (escalated["ts"], escalated["why"]) == (card["ts"], "escalated")
    assert escalated["blocks_sha256"] == cards.shown(old["text"], old["blocks"])["blocks_sha256"]
