"""Timeouts, escalation and reminders under the policy (`engine_policy`), end to end: the timeout
sweep expires, escalates and reminds once each, whatever clicks or other sweeps race it.

Time is controlled, not waited for: a test moves a request's deadline into the past (as if the
clock had run on), then runs the sweep the router worker runs every second.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from slack_sdk.errors import SlackApiError

from countersign import execute_approved
from countersign.agent import ApprovalClient
from countersign.decision import Decision
from countersign.router import delivery, timeouts
from countersign.router import runtime as runtime_module
from countersign.router.cards import APPROVE_ACTION, DETAILS_ACTION
from countersign.router.jobs import intake_job_id, json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import ApprovalRequest, Store
from tests.helpers import agent, drain, empty_resume, hold_channel, run_scheduled, wait_for
from tests.helpers.builders import age, buttons, events, post_card, refund, status


def test_timeout_escalates_twice_with_reminders_then_denies(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    age(store, request_id, next_reminder_at=-1)
    timeouts.sweep(runtime)
    [reminder] = [m for m in sb.messages("C0FINANCE") if m["thread_ts"] == card["ts"]]
    assert "Reminder for <@U0LEAD> or <@U0ALICE>" in reminder["text"]
    timeouts.sweep(runtime)  # the second reminder is not due yet
    assert len([m for m in sb.messages("C0FINANCE") if m["thread_ts"]]) == 1

    age(store, request_id, expires_at=-1)
    assert timeouts.sweep(runtime) == 1
    row = store.get(request_id)
    assert row is not None and (row.level, row.channel, row.approvers) == (1, "C0FINLEADS", ["U0LEAD"])
    assert "escalated to <#C0FINLEADS>" in str(sb.messages("C0FINANCE")[0]["blocks"])
    assert len(sb.messages("C0FINLEADS")) == 1

    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    assert store.get(request_id).channel == "C0CFO" and len(sb.messages("C0CFO")) == 1  # type: ignore[union-attr]
    age(store, request_id, expires_at=-1)
    with caplog.at_level("INFO", logger=timeouts.__name__):
        timeouts.sweep(runtime)
    assert "1 request expired: 1 deny" in caplog.messages  # the count's noun in its number
    row = store.get(request_id)
    assert row is not None and (row.status, row.timeout_result, row.decided_via) == (
        "expired",
        "deny",
        "timeout",
    )
    assert (
        events(store, request_id).count("escalated") == 2 and events(store, request_id).count("expired") == 1
    )
    assert "denied by the policy's timeout" in str(sb.messages("C0CFO")[0]["blocks"])
    drain(redis, agent.QUEUE)
    [decision] = agent.resumed(redis)
    assert (decision["outcome"], decision["timeout_result"], decision["grant"]) == ("expired", "deny", None)


def test_timeout_that_allows_lets_the_payload_run_once(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = post_card(
        client, redis, sandbox[0], channel="C0APPROVALS", action="send_email", payload={"to": "a@b.c"}
    )
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    expired = next(e for e in store.audit_trail(request_id) if e.event == "expired")
    assert expired.detail["auto_proceeded"] is True and expired.detail["result"] == "allow"
    decision = store.outbox_event(request_id).body  # type: ignore[union-attr]
    assert (decision["outcome"], decision["timeout_result"]) == ("expired", "allow")
    ran: list[Any] = []
    execute_approved(decision, ran.append, runtime)
    assert ran == [{"to": "a@b.c"}]


def test_click_racing_the_sweep_and_two_sweepers_end_in_one_terminal_state(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = post_card(
        client, redis, sandbox[0], channel="C0APPROVALS", action="send_email", payload={"to": "a@b.c"}
    )
    age(store, request_id, expires_at=-1)
    start = threading.Barrier(3)

    def sweeper() -> None:
        start.wait()
        timeouts.sweep(runtime)

    def click() -> None:
        start.wait()
        store.vote(request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", empty_resume)

    threads = [threading.Thread(target=f) for f in (sweeper, sweeper, click)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    terminal = [e for e in events(store, request_id) if e in ("approved", "expired")]
    assert len(terminal) == 1 and status(store, request_id) == terminal[0]
    assert store.outbox_event(request_id) is not None  # exactly one resume event (job_id is unique)
    assert len(store.unpublished()) + json_queue(agent.QUEUE, redis).count == 1


def test_three_sweepers_at_once_post_one_reminder_and_one_escalation_card(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """Several router workers each run the sweep: leases and conditional updates, not a lone
    process, keep each due reminder and escalation to one."""
    sb, _ = sandbox
    reminded, card = post_card(client, redis, sb)
    redis.delete("countersign:pace:C0FINANCE")  # as if the channel's pace had let a second card out
    escalated, _ = post_card(client, redis, sb, idempotency_key="second")
    age(store, reminded, next_reminder_at=-1)
    age(store, escalated, expires_at=-1)
    start = threading.Barrier(3)

    def sweeper() -> None:
        start.wait()
        timeouts.sweep(runtime)

    threads = [threading.Thread(target=sweeper) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len([m for m in sb.messages("C0FINANCE") if m["thread_ts"] == card["ts"]]) == 1
    assert events(store, escalated).count("escalated") == 1
    assert len([m for m in sb.messages("C0FINLEADS") if escalated in str(m["blocks"])]) == 1


def test_a_click_after_the_deadline_is_refused_even_before_the_sweep(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(
        client, redis, sb, channel="C0APPROVALS", action="send_email", payload={"to": "a@b.c"}
    )
    age(store, request_id, expires_at=-1)
    sb.click("C0APPROVALS", card["ts"], APPROVE_ACTION, "U0LEAD")
    wait_for(lambda: "timed_out" in [e.detail.get("why") for e in store.audit_trail(request_id)])
    assert status(store, request_id) == "pending"
    assert "timed out" in wait_for(lambda: sb.ephemerals("U0LEAD"))[0]["text"]  # told after the audit
    timeouts.sweep(runtime)
    assert status(store, request_id) == "expired"


def test_escalating_to_fewer_approvers_than_the_quorum_denies(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    request_id, _ = post_card(client, redis, sandbox[0], payload={"amount": "25000.00", "currency": "USD"})
    store.vote(request_id, {"slack_user_id": "U0ALICE", "name": "alice"}, "approved", empty_resume)
    age(store, request_id, expires_at=-1)
    with caplog.at_level("INFO", logger=timeouts.__name__):
        timeouts.sweep(runtime)
    denying = f"request {request_id}: the next level has 1 approver for a quorum of 2; denying"
    assert denying in caplog.messages
    row = store.get(request_id)  # S0FINLEADS has one member, fewer than the quorum of 2: fail closed
    assert row is not None and (row.status, row.timeout_result) == ("expired", "deny")
    assert "escalation_failed" in events(store, request_id) and sandbox[0].messages("C0FINLEADS") == []


def test_a_new_escalation_level_votes_afresh(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sandbox[0].usergroups["S0FINLEADS"] = ["U0LEAD", "U0BOB"]
    request_id, _ = post_card(client, redis, sandbox[0], payload={"amount": "25000.00", "currency": "USD"})
    store.vote(request_id, {"slack_user_id": "U0ALICE", "name": "alice"}, "approved", empty_resume)
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    row = store.get(request_id)
    assert row is not None and (row.level, row.approvers) == (1, ["U0LEAD", "U0BOB"])
    assert store.votes(request_id) == []
    assert "Needs 2 approvals from <@U0LEAD>, <@U0BOB>" in str(sandbox[0].messages("C0FINLEADS")[0]["blocks"])


def test_an_approver_of_an_earlier_level_is_refused_on_the_old_card(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)  # level 0: U0LEAD or U0ALICE
    stale_click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1: U0LEAD only; the old card loses its buttons
    assert sb.send_signed(stale_click)[0] == 200  # a click from a client that had not redrawn it yet
    refusal = wait_for(lambda: [e for e in store.audit_trail(request_id) if e.event == "refused"])[-1]
    assert (refusal.actor, refusal.detail) == ("U0ALICE", {"why": "earlier_level", "step": "approve"})
    assert "U0ALICE" not in [v.slack_user_id for v in store.votes(request_id)]
    assert status(store, request_id) == "pending"
    [told] = wait_for(lambda: sb.ephemerals("U0ALICE"))
    assert told["text"] == (  # where it went, not "you are not an approver"
        "This request was escalated to <@U0LEAD> in <#C0FINLEADS>, who decides it now: you were an "
        "approver of an earlier level, so your action changed nothing."
    )
    sb.click(
        sb.messages("C0FINLEADS")[0]["channel"],
        sb.messages("C0FINLEADS")[0]["ts"],
        APPROVE_ACTION,
        "U0MALLORY",
    )
    never = wait_for(lambda: [e for e in store.audit_trail(request_id) if e.actor == "U0MALLORY"])
    assert never[0].detail["why"] == "not_an_approver"  # never named at any level


def test_a_user_group_member_of_an_earlier_level_is_refused_as_a_named_user_is(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """Level 1's approvers come from a user group (S0FINLEADS); once the request has escalated on to
    level 2, a member of that group clicking level 1's card is told where it went, as a user named
    by level 0 is, not "you are not an approver"."""
    sb, _ = sandbox
    sb.usergroups["S0FINLEADS"] = ["U0LEAD", "U0MALLORY"]
    request_id, card = post_card(client, redis, sb)  # level 0: U0LEAD or U0ALICE
    named_click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1: S0FINLEADS, resolved to U0LEAD and U0MALLORY
    [leads_card] = sb.messages("C0FINLEADS")
    member_click = sb.click_payload(leads_card["channel"], leads_card["ts"], APPROVE_ACTION, "U0MALLORY")
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 2: U0BOB or U0LEAD
    row = store.get(request_id)
    assert row is not None and (row.level, row.approvers) == (2, ["U0BOB", "U0LEAD"])
    assert row.earlier_approvers == ["U0LEAD", "U0ALICE", "U0MALLORY"]

    for user, click in (("U0MALLORY", member_click), ("U0ALICE", named_click)):
        assert sb.send_signed(click)[0] == 200
        refusal = wait_for(lambda u=user: [e for e in store.audit_trail(request_id) if e.actor == u])[-1]
        assert (refusal.event, refusal.detail) == ("refused", {"why": "earlier_level", "step": "approve"})
        [told] = wait_for(lambda u=user: sb.ephemerals(u))
        assert told["text"] == (
            "This request was escalated to <@U0BOB> or <@U0LEAD> in <#C0CFO>, who decide it now: you were "
            "an approver of an earlier level, so your action changed nothing."
        )
    assert store.votes(request_id) == [] and status(store, request_id) == "pending"


def test_an_escalation_to_a_user_group_that_is_gone_denies(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    del sandbox[0].usergroups["S0FINLEADS"]
    request_id, card = post_card(client, redis, sandbox[0])
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    row = store.get(request_id)
    assert row is not None and (row.status, row.timeout_result) == ("expired", "deny")
    assert "escalation_failed" in events(store, request_id)
    [note] = [m for m in sandbox[0].messages("C0FINANCE") if m["thread_ts"] == card["ts"]]
    assert note["text"] == (  # the channel learns why it was denied, not only the log
        "⚠ No decision in time, and no escalation: the next level in <#C0FINLEADS> has 0 approvers, "
        "fewer than the 1 approval needed (a user group empty, gone or shrunk?), so the policy's "
        "timeout denied it."
    )


def vendor_requests(client: ApprovalClient, redis: Redis, store: Store, count: int) -> list[str]:
    """`count` pay_vendor requests (deny on timeout) with their cards posted (a card waiting its
    turn in the channel's pace has no clock yet), already past their deadline."""
    ids = []
    for n in range(count):
        redis.delete("countersign:pace:C0AP")
        ids.append(client.request(refund(action="pay_vendor", step=f"due-{n}")))
        drain(redis)
    for request_id in ids:
        age(store, request_id, expires_at=-1)
    return ids


def test_a_backlog_of_timeouts_drains_in_one_sweep(
    engine_policy: Path, client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime
) -> None:
    ids = vendor_requests(client, redis, store, 5)
    assert timeouts.sweep(runtime, limit=2) == 5  # three batches of at most 2, in one tick
    assert [status(store, i) for i in ids] == ["expired"] * 5
    assert all((event := store.outbox_event(i)) and event.published_at for i in ids)
    assert all(events(store, i).count("expired") == 1 for i in ids)


def test_expired_cards_are_rewritten_at_slacks_pace_after_every_resume_event_is_published(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """Expiring is not held up by Slack: the tick that expires a batch publishes all its resume
    events, and its cards follow, `rewrites` a tick (chat.update is Tier 3)."""
    sb, _ = sandbox
    ids = []
    for n in range(3):
        redis.delete("countersign:pace:C0AP")  # the next card may post at once (see hold_channel)
        ids.append(post_card(client, redis, sb, "C0AP", action="pay_vendor", step=f"due-{n}")[0])
    for request_id in ids:
        age(store, request_id, expires_at=-1)
    rewrites = len(sb.calls("chat.update"))
    assert timeouts.sweep(runtime, rewrites=1) == 3
    assert [status(store, i) for i in ids] == ["expired"] * 3
    assert all((event := store.outbox_event(i)) and event.published_at for i in ids)
    assert len(sb.calls("chat.update")) - rewrites == 1
    assert sum(1 for i in ids if (row := store.get(i)) and row.card_refresh_due_at) == 2
    timeouts.sweep(runtime, rewrites=1)
    timeouts.sweep(runtime, rewrites=1)
    assert len(sb.calls("chat.update")) - rewrites == 3
    for request_id in ids:
        row = store.get(request_id)
        assert row is not None and row.card_refresh_due_at is None
        card = next(m for m in sb.messages(row.channel) if m["ts"] == row.card_ts)
        assert buttons(card) == [DETAILS_ACTION]  # no Approve / Reject / Edit left


def test_a_request_that_cannot_expire_does_not_hold_up_the_others(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """send_email requests, whose timeout allows and whose cards are posted: their decisions are
    signed in Python on every backend (on PostgreSQL those that deny are built in SQL)."""
    ids = []
    for n in range(3):
        redis.delete("countersign:pace:C0APPROVALS")  # no wait between the cards
        ids.append(
            post_card(client, redis, sandbox[0], "C0APPROVALS", action="send_email", step=f"due-{n}")[0]
        )
    for request_id in ids:
        age(store, request_id, expires_at=-1)
    real = runtime_module.decision_of

    def broken(row: ApprovalRequest, secret: str) -> Decision:
        if row.id == ids[1]:
            raise ValueError("this request's decision cannot be built")
        return real(row, secret)

    monkeypatch.setattr(runtime_module, "decision_of", broken)
    assert timeouts.sweep(runtime) == 2
    assert [status(store, i) for i in ids] == ["expired", "pending", "expired"]
    assert "expired" not in events(store, ids[1]) and store.outbox_event(ids[1]) is None


def test_a_reminder_is_marked_sent_only_once_it_is_posted(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    age(store, request_id, next_reminder_at=-1)
    sb.inject("chat.postMessage", status=429, retry_after=3)
    timeouts.sweep(runtime)
    assert [m for m in sb.messages("C0FINANCE") if m["thread_ts"]] == []
    row = store.get(request_id)
    assert row is not None and row.reminders_sent == 0 and "reminded" not in events(store, request_id)
    timeouts.sweep(runtime)  # claimed for a minute: not taken again at once
    assert [m for m in sb.messages("C0FINANCE") if m["thread_ts"]] == []
    age(store, request_id, next_reminder_at=-1)  # the claim ran out
    timeouts.sweep(runtime)
    [reminder] = [m for m in sb.messages("C0FINANCE") if m["thread_ts"] == card["ts"]]
    assert "Reminder for" in reminder["text"] and events(store, request_id).count("reminded") == 1
    assert store.get(request_id).reminders_sent == 1  # type: ignore[union-attr]


def test_a_reminder_slack_refuses_for_good_is_marked_failed_not_retried(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    age(store, request_id, next_reminder_at=-1)
    sb.inject("chat.postMessage", error="is_archived")
    timeouts.sweep(runtime)
    assert "reminder_failed" in events(store, request_id)
    age(store, request_id, next_reminder_at=-1)
    timeouts.sweep(runtime)  # the next reminder is due and goes out: the failed one is not retried
    assert events(store, request_id).count("reminder_failed") == 1


def reserved_at(redis: Redis, channel: str, request_id: str, level: int = 0) -> float:
    """The unix second reserved for the card of `request_id` at `level` in `channel`'s pace."""
    return int(redis.get(f"countersign:pace:{channel}:{request_id}:{level}")) / 1000  # type: ignore[arg-type]


def its_time_comes(redis: Redis, store: Store, channel: str, request_id: str, level: int = 0) -> None:
    """The card's reserved time in `channel` is now (Redis's clock), as if the cards ahead had
    posted; so the posting lease that kept others away until then runs out."""
    seconds, micros = redis.time()
    redis.set(f"countersign:pace:{channel}:{request_id}:{level}", seconds * 1000 + micros // 1000)
    age(store, request_id, card_lease_until=-1)


def card_posted_at(store: Store, request_id: str) -> datetime:
    """When the request's latest card was stored (database clock)."""
    return [e.at for e in store.audit_trail(request_id) if e.event == "card_posted"][-1]


def test_a_flood_into_one_channel_cannot_let_allow_run_what_no_card_showed(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """A burst puts the channel's later cards minutes out (Slack's pace), while each has an hour
    with `on_timeout: allow`: a waiting card's deadline follows its time, a card's hour starts when
    it is posted, and a deadline that passes once Slack refused the card denies."""
    ids = [
        client.request(refund(action="send_email", payload={"to": f"{n}@b.c"}, step=f"flood-{n}"))
        for n in range(20)
    ]
    drain(redis)
    waiting = [row for i in ids if (row := store.get(i)) is not None and row.card_ts is None]
    assert len(waiting) >= 10  # one card per 1.1 s in C0APPROVALS: the later ones wait their turn
    last = waiting[-1]
    assert last.expires_at is not None  # its hour begins at its card's time, not at intake
    assert last.expires_at.timestamp() >= reserved_at(redis, "C0APPROVALS", last.id) + 3600 - 2

    its_time_comes(redis, store, "C0APPROVALS", last.id)
    sandbox[0].inject("chat.postMessage", error="restricted_action")  # Slack refuses its card
    with pytest.raises(SlackApiError):
        delivery.post_card(runtime, store.get(last.id))  # type: ignore[arg-type]
    age(store, last.id, expires_at=-1)  # the deadline passes and its card is still not posted
    timeouts.sweep(runtime, limit=0)  # the timeout step alone: nobody posts the card meanwhile
    row = store.get(last.id)
    assert row is not None and (row.status, row.timeout_result) == ("expired", "deny")
    decision = store.outbox_event(last.id).body  # type: ignore[union-attr]
    assert (decision["timeout_result"], decision["grant"]) == ("deny", None)
    expired = next(e for e in store.audit_trail(last.id) if e.event == "expired")
    assert (expired.detail["card_shown"], expired.detail["auto_proceeded"]) == (False, False)

    shown = waiting[-2]  # its card posts when its time comes: its hour starts then
    age(store, shown.id, expires_at=5)
    its_time_comes(redis, store, "C0APPROVALS", shown.id)
    run_scheduled(redis, intake_job_id(shown.id))
    row = store.get(shown.id)
    assert row is not None and row.card_ts is not None and row.expires_at is not None
    assert abs(row.expires_at - card_posted_at(store, shown.id) - timedelta(hours=1)) < timedelta(seconds=1)
    age(store, shown.id, expires_at=-1)
    timeouts.sweep(runtime)
    assert store.get(shown.id).timeout_result == "allow"  # type: ignore[union-attr]  # a card was shown


def test_each_escalation_level_counts_its_timeout_and_reminders_from_its_own_card(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    request_id, _ = post_card(client, redis, sandbox[0])
    hold_channel(redis, "C0FINLEADS", seconds=120)  # the leads' channel is busy with other cards
    age(store, request_id, expires_at=-1)
    timeouts.sweep(runtime)
    row = store.get(request_id)
    assert row is not None and (row.level, row.card_ts) == (1, None) and row.expires_at is not None
    assert row.expires_at.timestamp() >= reserved_at(redis, "C0FINLEADS", request_id, 1) + 24 * 3600 - 2

    age(store, request_id, expires_at=-1, card_lease_until=-1)  # the router down past both
    timeouts.sweep(runtime, limit=0)  # its card never posted nor refused: the level does not time out
    row = store.get(request_id)
    assert row is not None and (row.status, row.level, row.card_ts) == ("pending", 1, None)

    its_time_comes(redis, store, "C0FINLEADS", request_id, 1)
    age(store, request_id, level_started_at=-10)  # the card sweep's turn
    timeouts.sweep(runtime)
    row = store.get(request_id)
    assert row is not None and row.card_ts is not None and len(sandbox[0].messages("C0FINLEADS")) == 1
    posted = card_posted_at(store, request_id)
    assert abs(row.expires_at - posted - timedelta(hours=24)) < timedelta(seconds=1)  # type: ignore[operator]
    assert abs(row.next_reminder_at - posted - timedelta(hours=1)) < timedelta(seconds=1)  # type: ignore[operator]


def test_a_card_waiting_its_turn_does_not_time_out_while_the_router_is_down(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """Cards scheduled behind a busy channel, and the router stopped past their times and their
    deadlines: none times out before its card is posted (nobody was shown it, and Slack refused
    nothing); once the router is back, each card's timeout counts from its posting."""
    hold_channel(redis, "C0APPROVALS", seconds=120)  # a burst of earlier cards ahead of these
    ids = [
        client.request(refund(action="send_email", payload={"to": f"{n}@b.c"}, step=f"down-{n}"))
        for n in range(3)
    ]
    drain(redis)
    assert [store.get(i).card_ts for i in ids] == [None] * 3  # type: ignore[union-attr]
    for request_id in ids:  # the router is down: their times and their deadlines pass unserved
        age(store, request_id, card_lease_until=-120, expires_at=-60, level_started_at=-3700)
    timeouts.sweep(runtime, limit=0)  # the router is back: its timeout step runs before its posters
    assert [status(store, i) for i in ids] == ["pending"] * 3
    assert not any("expired" in events(store, i) for i in ids)

    for key in redis.scan_iter("countersign:pace:C0APPROVALS*"):  # the reserved times lapsed meanwhile
        redis.delete(key)
    timeouts.sweep(runtime)  # the card step posts the first card, and schedules the others anew
    posted = [i for i in ids if store.get(i).card_ts is not None]  # type: ignore[union-attr]
    assert len(posted) >= 1 and len(sandbox[0].messages("C0APPROVALS")) == len(posted)
    first = store.get(posted[0])
    assert first is not None and first.expires_at is not None and status(store, first.id) == "pending"
    assert abs(first.expires_at - card_posted_at(store, first.id) - timedelta(hours=1)) < timedelta(seconds=1)
    age(store, first.id, expires_at=-1)
    timeouts.sweep(runtime, limit=0)
    row = store.get(first.id)
    assert row is not None and (row.status, row.timeout_result) == ("expired", "allow")  # its card was shown
    assert [status(store, i) for i in ids if i != first.id] == ["pending"] * 2
