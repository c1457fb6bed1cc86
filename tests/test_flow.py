"""End to end in one process, on real parts: enqueue → intake (RQ) → card in the sandbox →
signed click over HTTP to the Bolt app → decision, audit, resume job → the agent's resume runs."""

from __future__ import annotations

import threading
from typing import Any

from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import relay
from countersign.router.cards import APPROVE_ACTION, DETAILS_ACTION, EDIT_ACTION, REJECT_ACTION
from countersign.router.jobs import json_queue, resume_job_id
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, drain, wait_for
from tests.helpers.builders import buttons, edited_card, post_card, status


def test_approve_click_decides_audits_updates_card_and_resumes_agent(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    assert buttons(card) == [APPROVE_ACTION, REJECT_ACTION, EDIT_ACTION, DETAILS_ACTION]
    assert "Refund ACME" in str(card["blocks"]) and "amount: 120.00" in str(card["blocks"])

    http_status, _ = sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    assert http_status == 200

    wait_for(lambda: status(store, request_id) == "approved", what="request approved")
    events = [e.event for e in resumed_and_swept(store, redis, request_id)]
    assert events == ["requested", "card_posted", "vote", "approved", "resume_published"]

    updated = wait_for(lambda: edited_card(sb, card["ts"]))
    assert buttons(updated) == [DETAILS_ACTION]  # the record stays viewable
    assert "Approved by <@U0LEAD>" in str(updated["blocks"])

    job = json_queue(agent.QUEUE, redis).fetch_job(resume_job_id(request_id))
    assert job is not None and job.func_name == agent.FUNC
    drain(redis, agent.QUEUE)
    [decision] = agent.resumed(redis)
    assert decision["request_id"] == request_id
    assert decision["outcome"] == "approved"
    assert decision["payload"] == decision["original_payload"] == {"amount": "120.00", "currency": "USD"}
    assert decision["edits"] == []
    assert decision["decided_by"] == [{"slack_user_id": "U0LEAD", "name": "lee.lead"}]
    assert decision["decided_via"] == "slack"
    assert decision["idempotency_key"] == "refund-agent:r1:s1"
    assert decision["action"] == "issue_refund"
    assert decision["decided_at"].endswith("Z")
    assert decision["policy_version"] == 3
    assert set(decision["grant"]) == {"payload_sha256", "expires_at", "signature"}


def resumed_and_swept(store: Store, redis: Redis, request_id: str) -> list[Any]:
    """Wait until the decision has enqueued the resume job on the agent's queue, run the relay
    sweep once (the router worker runs it every second: it marks the event published), and return
    the request's audit trail."""
    wait_for(lambda: json_queue(agent.QUEUE, redis).fetch_job(resume_job_id(request_id)))
    assert relay.sweep(store, redis) == 1
    return store.audit_trail(request_id)


def _trail_with(store: Store, request_id: str, event: str) -> list[Any]:
    trail = store.audit_trail(request_id)
    return trail if any(e.event == event for e in trail) else []


def test_click_by_non_approver_changes_nothing_and_is_audited(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0MALLORY")[0] == 200

    refusal = wait_for(lambda: _trail_with(store, request_id, "refused"))[-1]
    assert refusal.actor == "U0MALLORY" and refusal.detail["why"] == "not_an_approver"
    assert status(store, request_id) == "pending"
    assert wait_for(lambda: sb.ephemerals("U0MALLORY"))[0]["text"] == (
        "You are not an approver for issue_refund requests, so your action changed nothing."
    )  # no code span: the sandbox page, like Slack's notifications, shows it as plain text
    assert json_queue(agent.QUEUE, redis).count == 0
    assert not sb.messages("C0FINANCE")[0]["edited"]


def test_requesting_human_cannot_approve_unless_an_approver(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, on_behalf_of="U0BOB")
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0BOB")
    refusal = wait_for(lambda: _trail_with(store, request_id, "refused"))[-1]
    assert (refusal.actor, refusal.detail["why"]) == ("U0BOB", "not_an_approver")
    assert status(store, request_id) == "pending"


def test_double_click_decides_once_and_tells_the_second_click(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    assert sb.send_signed(click)[0] == 200
    wait_for(lambda: status(store, request_id) == "approved")
    assert sb.send_signed(click)[0] == 200  # the same button on the card as it was, pressed again
    refusal = wait_for(lambda: _trail_with(store, request_id, "refused"))[-1]
    assert refusal.detail == {"why": "already_decided", "step": "approve", "status": "approved"}
    told = wait_for(lambda: sb.ephemerals("U0LEAD"))[0]["text"]
    assert told.startswith("You had already approved this request (approved by <@U0LEAD> at ")
    assert [e.event for e in store.audit_trail(request_id)].count("approved") == 1
    assert json_queue(agent.QUEUE, redis).count == 1


def test_two_approvers_clicking_at_once_give_one_decision_and_one_resume(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    start = threading.Barrier(2)
    results: list[int] = []

    def click(action_id: str, user: str) -> None:
        start.wait()
        results.append(sb.click("C0FINANCE", card["ts"], action_id, user)[0])

    threads = [
        threading.Thread(target=click, args=args)
        for args in [(APPROVE_ACTION, "U0LEAD"), (APPROVE_ACTION, "U0ALICE")]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200, 200]

    trail = wait_for(lambda: _trail_with(store, request_id, "refused"))
    assert "resume_published" in [e.event for e in resumed_and_swept(store, redis, request_id)]
    decisions = [e for e in store.audit_trail(request_id) if e.event == "approved"]
    assert len(decisions) == 1
    assert [e.event for e in trail].count("refused") == 1
    assert status(store, request_id) == decisions[0].event
    assert json_queue(agent.QUEUE, redis).count == 1


def test_the_human_an_agent_acts_for_cannot_approve_it_but_another_approver_can(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """U0LEAD, on whose behalf the agent asks, is refused (`self_approval`) and told so; the final wait
    checks that U0ALICE, another approver, then approves it."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, on_behalf_of="U0LEAD")
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    refusal = wait_for(lambda: _trail_with(store, request_id, "refused"))[-1]
    assert (refusal.actor, refusal.detail["why"]) == ("U0LEAD", "self_approval")
    assert "acting on your behalf" in wait_for(lambda: sb.ephemerals("U0LEAD"))[0]["text"]
    assert status(store, request_id) == "pending"
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    wait_for(lambda: status(store, request_id) == "approved")


def test_a_resume_job_lost_from_redis_is_enqueued_again_and_runs_once(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, resume={"queue": agent.QUEUE, "func": agent.EXECUTE_FUNC})
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    resumed_and_swept(store, redis, request_id)
    assert relay.heal(store, redis) == 0  # nothing lost yet
    redis.flushall()  # Redis restarted without persistence
    assert relay.heal(store, redis) == 1
    assert relay.heal(store, redis) == 0
    assert "resume_republished" in [e.event for e in store.audit_trail(request_id)]
    drain(redis, agent.QUEUE)
    assert agent.executed(redis) == [{"amount": "120.00", "currency": "USD"}]
