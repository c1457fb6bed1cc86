"""The intake job: a request becomes one stored request and one card, or a dead letter with its
reason; a repeat the client could not catch (Redis forgot the key) is resolved by the database; a
card posted before a crash is found, not posted again; Slack busy or unreachable while the
approvers' user groups are resolved reschedules the job (faults injected by the sandbox), and only
Slack's refusals for good dead-letter it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient, IdempotencyConflict, RequestDeadLettered
from countersign.router import directory, homedue
from countersign.router.intake import MAX_RESCHEDULES
from countersign.router.jobs import intake_job_id, json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import drain, hold_channel, run_scheduled, settled
from tests.helpers.builders import CONFLICTING, refund


@CONFLICTING
def test_conflict_found_by_the_database_when_redis_forgot_the_key(
    other: dict[str, Any],
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    first = client.request(refund())
    drain(redis)
    redis.flushall()
    second = client.request(refund(**other))
    drain(redis)
    assert store.get(second) is None
    state = client.get(second)
    assert state.status == "dead_letter" and "IdempotencyConflict" in (state.reason or "")
    assert len(sandbox[0].messages()) == 1
    assert store.get(first).payload["amount"] == "120.00"  # type: ignore[union-attr]
    with pytest.raises(IdempotencyConflict) as again:  # the key names the stored request again
        client.request(refund(**other))
    assert again.value.request_id == first


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
    assert letter is not None and letter.received == {"hello": 1} and "request_id: required" in letter.reason


def test_a_message_naming_the_routers_queue_as_its_resume_queue_is_dead_lettered_with_the_reason(
    redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    """A message that bypassed the client's validation (put on the queue by hand) and names the
    router's own queue for its resume job: no request, no card, no job; the dead letter says why."""
    request_id = "01J0000000000000000000000Q"
    planted = refund(resume={"queue": "countersign", "func": "builtins.print"})
    json_queue("countersign", redis).enqueue(
        "countersign.router.intake.intake", {"v": 1, "request_id": request_id, "request": planted}
    )
    drain(redis)
    letter = store.get_dead_letter(request_id)
    assert letter is not None and letter.reason.startswith(
        "request.resume.queue: 'countersign' is countersign's own queue, whose worker runs only "
        "countersign's jobs"
    )
    assert store.get(request_id) is None and sandbox[0].messages() == []
    assert json_queue("countersign", redis).count == 0


def test_money_sent_as_a_json_number_is_dead_lettered_and_the_key_freed(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    """`amount` is an editable decimal of issue_refund: as the JSON number 120.00 it would be the
    double 120.0 on the card, and an edit would send a float on."""
    number = client.request(refund(payload={"amount": 120.00, "currency": "USD"}))  # no policy here
    drain(redis)
    state = client.get(number)
    assert (state.status, state.reason) == (
        "dead_letter",
        "payload.amount: a decimal field of issue_refund, sent as the JSON number 120.0; send it as a "
        'string like "120.00", so that money never passes through a float',
    )
    assert store.get(number) is None and sandbox[0].messages() == []
    text = client.request(refund())  # the same key, as the README sends it
    drain(redis)
    assert text != number and store.get(text) is not None and len(sandbox[0].messages("C0FINANCE")) == 1


def test_an_action_class_the_policy_does_not_name_is_dead_lettered_unless_it_routes_unknown_ones(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
    policy_file: Path,
) -> None:
    typo = client.request(refund(action="issue_refnd"))  # the client has no policy: intake refuses it
    drain(redis)
    state = client.get(typo)
    assert (state.status, state.reason) == (
        "dead_letter",
        f"action class 'issue_refnd' is not named in policy v3 ({policy_file.resolve()}), which refuses "
        "unknown action classes; known: issue_refund, send_email",
    )
    assert store.get(typo) is None and sandbox[0].messages() == []
    fixed = client.request(refund())  # same key: the refusal freed it, so the corrected request runs
    drain(redis)
    assert fixed != typo and store.get(fixed) is not None and len(sandbox[0].messages("C0FINANCE")) == 1
    assert client.get(typo).status == "dead_letter"  # the refused one keeps its reason

    policy_file.write_text(
        policy_file.read_text().replace("version: 3\n", "version: 4\nunknown_actions: route\n")
    )
    settled(policy_file)
    routed = client.request(refund(action="issue_refnd", run_id="r2"))
    drain(redis)
    assert store.get(routed).channel == "C0APPROVALS"  # type: ignore[union-attr]
    assert len(sandbox[0].messages("C0APPROVALS")) == 1


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


def scheduled_at(redis: Redis, request_id: str) -> float | None:
    """The unix second at which RQ runs the request's intake job again, or None if not scheduled."""
    return redis.zscore(
        json_queue("countersign", redis).scheduled_job_registry.key, intake_job_id(request_id)
    )


@pytest.mark.parametrize(
    ("fault", "wait"),
    [
        pytest.param({"status": 429, "retry_after": 7}, 7, id="429"),
        pytest.param({"status": 503, "times": 2}, 1, id="two-503s"),  # the Web API client retries one itself
    ],
)
def test_slack_busy_while_resolving_user_groups_reschedules_intake(
    engine_policy: Path,
    fault: dict[str, Any],
    wait: int,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    """pay_vendor's approvers are the user group S0FINANCE. Slack rate-limits (or fails) the lookup:
    the intake job is rescheduled (for Retry-After), not dead-lettered; its next run stores the
    request and posts its card, and the same idempotency key finds that live request."""
    sb, _ = sandbox
    sb.inject("usergroups.users.list", **fault)
    request_id = client.request(refund(action="pay_vendor"))
    before = time.time()
    drain(redis)
    assert store.get(request_id) is None and store.get_dead_letter(request_id) is None
    at = scheduled_at(redis, request_id)
    assert at is not None and at >= before + wait - 0.01
    run_scheduled(redis, intake_job_id(request_id))
    row = store.get(request_id)
    assert row is not None and row.status == "pending" and row.card_ts is not None
    assert row.approvers == ["U0ALICE", "U0BOB"] and len(sb.messages("C0AP")) == 1
    assert store.get_dead_letter(request_id) is None
    assert client.request(refund(action="pay_vendor")) == request_id
    assert client.get(request_id).status == "pending"


def test_a_user_group_lookup_that_times_out_reschedules_intake(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    from countersign.slackhttp import PooledWebClient

    sb, url = sandbox
    runtime.__dict__["slack"] = PooledWebClient(
        token="xoxb-test", base_url=url + "/api/", timeout=1, retry_handlers=[]
    )
    sb.inject("usergroups.users.list", delay_seconds=5)  # Slack answers after the client gave up
    request_id = client.request(refund(action="pay_vendor"))
    drain(redis)
    assert store.get(request_id) is None and store.get_dead_letter(request_id) is None
    run_scheduled(redis, intake_job_id(request_id))
    row = store.get(request_id)
    assert row is not None and row.card_ts is not None and row.approvers == ["U0ALICE", "U0BOB"]


@pytest.mark.parametrize("error", ["no_such_subteam", "missing_scope"])
def test_slack_refusing_a_user_group_for_good_dead_letters_with_the_reason(
    engine_policy: Path,
    error: str,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    sandbox[0].inject("usergroups.users.list", error=error)
    request_id = client.request(refund(action="pay_vendor"))
    drain(redis)
    state = client.get(request_id)
    assert state.status == "dead_letter" and f"usergroups.users.list failed ({error})" in (state.reason or "")
    assert scheduled_at(redis, request_id) is None and sandbox[0].messages("C0AP") == []


def test_slack_busy_for_every_run_dead_letters_with_the_reason_at_last(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    """The request still ends in one state: after the last reschedule RQ allows, a dead letter that
    says Slack was busy, rather than a failed job and a request forever `queued`."""
    sb, _ = sandbox
    sb.inject("usergroups.users.list", status=429, retry_after=1, times=MAX_RESCHEDULES + 1)
    request_id = client.request(refund(action="pay_vendor"))
    drain(redis)
    for _ in range(MAX_RESCHEDULES):
        run_scheduled(redis, intake_job_id(request_id))
    state = client.get(request_id)
    assert state.status == "dead_letter" and "(ratelimited)" in (state.reason or "")
    assert f"after {MAX_RESCHEDULES + 1} attempts" in (state.reason or "")
    assert scheduled_at(redis, request_id) is None


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"status": 429, "retry_after": 1}, id="rescheduled"),  # the job returns RQ's Retry
        pytest.param({"status": 500, "times": 2}, id="raised"),  # the job raises; the intake job's Retry
    ],
)
def test_a_run_again_keeps_the_approvers_the_first_run_stored(
    engine_policy: Path,
    fault: dict[str, Any],
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
) -> None:
    """The card's first post fails after the request was stored. The job's next run asks Slack for
    no user group, so a group deleted meanwhile cannot dead-letter a request that is pending."""
    sb, _ = sandbox
    sb.inject("chat.postMessage", **fault)
    request_id = client.request(refund(action="pay_vendor"))
    drain(redis)
    assert store.get(request_id) is not None
    del sb.usergroups["S0FINANCE"]  # Slack now answers no_such_subteam
    directory.clear_cache()
    run_scheduled(redis, intake_job_id(request_id))
    assert store.get_dead_letter(request_id) is None and client.get(request_id).status == "pending"
    assert len(sb.calls("usergroups.users.list")) == 1


def test_the_approvers_home_is_due_a_few_seconds_after_the_cards_time(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    """Intake's one script before the store reserves the card's time in its channel and marks its
    approvers' Home tabs due `DEBOUNCE_SECONDS` after that time: now for a card posted at once, a
    minute on for one waiting behind a busy channel (its Home refresh comes with its card)."""
    posted = client.request(refund(run_id="now"))
    drain(redis)
    row = store.get(posted)
    assert row is not None and row.card_ts is not None and row.approvers
    slot = int(redis.get(f"countersign:pace:C0FINANCE:{posted}:0"))  # type: ignore[arg-type]
    due = {user: redis.zscore(homedue.DUE_KEY, user) for user in row.approvers}
    assert due == dict.fromkeys(row.approvers, slot // 1000 + homedue.DEBOUNCE_SECONDS)
    redis.delete(homedue.DUE_KEY)
    hold_channel(redis, "C0FINANCE")
    waiting = client.request(refund(run_id="later"))
    drain(redis)
    row = store.get(waiting)
    assert row is not None and row.card_ts is None  # waits for its time, a minute on
    slot = int(redis.get(f"countersign:pace:C0FINANCE:{waiting}:0"))  # type: ignore[arg-type]
    due = {user: redis.zscore(homedue.DUE_KEY, user) for user in row.approvers}
    assert due == dict.fromkeys(row.approvers, slot // 1000 + homedue.DEBOUNCE_SECONDS)


def test_a_payload_breaking_a_declared_field_is_dead_lettered_with_its_reason_and_the_key_freed(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], runtime: Runtime
) -> None:
    """The agent's client does not read the policy, so the refund of -5.00 (under `min: "0.01"`)
    reaches the queue; intake refuses it before any card or approval, and `wait` says why."""
    negative = client.request(refund(payload={"amount": "-5.00", "currency": "USD"}))
    drain(redis)
    reason = (
        'payload.amount: "-5.00" breaks the policy\'s editable.amount of issue_refund (decimal, places 2, '
        "min 0.01): must be at least 0.01"
    )
    assert (client.get(negative).status, client.get(negative).reason) == ("dead_letter", reason)
    with pytest.raises(RequestDeadLettered) as refused:
        client.wait(negative, timeout=5)
    assert refused.value.reason == reason
    assert store.get(negative) is None and sandbox[0].messages() == []
    fixed = client.request(refund(payload={"amount": "5.00", "currency": "USD"}))  # same key, freed
    drain(redis)
    assert fixed != negative and store.get(fixed) is not None
