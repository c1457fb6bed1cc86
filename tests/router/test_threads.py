"""Threads, not noise: after the card, what happens to a request is said in the card's thread
(reminders naming the approvers still missing, the escalation notice, the execution's outcome, why
the agent has not run it), each once, and never as a new top-level message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient, report_outcome
from countersign.router import threads, timeouts
from countersign.router.jobs import mark_resumed, resumed_key
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Outcome, Store
from tests.helpers import drain
from tests.helpers.builders import age, post_card

LEAD = {"slack_user_id": "U0LEAD", "name": "lee"}


def replies(sb: Sandbox, channel: str, card: dict[str, Any]) -> list[str]:
    return [m["text"] for m in sb.messages(channel) if m["thread_ts"] == card["ts"]]


def top_level(sb: Sandbox, channel: str) -> int:
    return len([m for m in sb.messages(channel) if m["thread_ts"] is None])


def test_a_quorum_reminder_names_the_approvers_still_missing(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, payload={"amount": "20000.00", "currency": "USD"})
    store.vote(request_id, LEAD, Outcome.APPROVED, runtime.resume_event)  # 1 of 2
    age(store, request_id, next_reminder_at=-1)

    timeouts.sweep(runtime)

    [reminder] = replies(sb, "C0FINANCE", card)
    assert reminder.startswith("⏰ Reminder for <@U0ALICE>: this request still needs 1 more approval;")
    assert "U0LEAD" not in reminder and top_level(sb, "C0FINANCE") == 1


def test_the_escalation_notice_is_a_reply_under_the_card_left_behind(
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

    assert timeouts.sweep(runtime) == 1
    timeouts.sweep(runtime)  # nothing more to say

    [notice] = replies(sb, "C0FINANCE", card)
    assert notice.startswith("⤴ No decision in time: escalated to <#C0FINLEADS>, where <@U0LEAD> decides it.")
    assert top_level(sb, "C0FINANCE") == 1 and len(sb.messages("C0FINLEADS")) == 1


def test_the_outcome_is_told_in_the_thread_once_and_the_card_rewritten(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    store.vote(request_id, LEAD, Outcome.APPROVED, runtime.resume_event)
    report_outcome(request_id, True, "refunded", runtime)
    drain(redis)  # the card refresh the report asked for
    threads.refresh(runtime, request_id)  # a second rewrite: the note is not posted again

    [note] = replies(sb, "C0FINANCE", card)
    assert note.startswith("Executed ✓")
    rewritten = next(m for m in sb.messages("C0FINANCE") if m["ts"] == card["ts"])
    assert "Executed ✓" in json.dumps(rewritten["blocks"], ensure_ascii=False)
    assert top_level(sb, "C0FINANCE") == 1


def test_a_note_slack_refused_is_posted_by_a_later_rewrite(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    store.vote(request_id, LEAD, Outcome.APPROVED, runtime.resume_event)
    report_outcome(request_id, False, "refund API down", runtime)
    sb.inject("chat.postMessage", error="internal_error")
    threads.refresh(runtime, request_id)
    assert replies(sb, "C0FINANCE", card) == []

    threads.refresh(runtime, request_id)
    [note] = replies(sb, "C0FINANCE", card)
    assert note.startswith("Failed ✗ refund API down")


@pytest.mark.parametrize("job_ends", ["before the note", "after the note"])
def test_the_executed_note_is_kept_on_the_resumed_marker_and_posted_once(
    job_ends: str,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """Issue 14: the `executed` note is taken on the request's resumed marker, not a key of its own;
    the resume job's end (`mark_resumed`) before or after it neither loses the note nor posts it
    twice, and a note Slack refused leaves the marker (the payload ran) and is posted later."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    store.vote(request_id, LEAD, Outcome.APPROVED, runtime.resume_event)
    report_outcome(request_id, True, "refunded", runtime)
    if job_ends == "before the note":
        mark_resumed(redis, request_id)
    sb.inject("chat.postMessage", error="internal_error")
    threads.refresh(runtime, request_id)
    assert replies(sb, "C0FINANCE", card) == [] and redis.exists(resumed_key(request_id))

    threads.refresh(runtime, request_id)
    mark_resumed(redis, request_id)
    threads.refresh(runtime, request_id)

    [note] = replies(sb, "C0FINANCE", card)
    assert note.startswith("Executed ✓")
    assert list(redis.scan_iter(f"{threads.NOTES_PREFIX}*")) == []
    marker = resumed_key(request_id)
    assert redis.ttl(marker) > 0 and (redis.memory_usage(marker) or 0) <= 104
