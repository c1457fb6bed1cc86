"""The App Home tab over real HTTP: `app_home_opened` publishes the reviewer's queue through the
sandbox's views.publish, its buttons decide through the card's code path (audited `where: home`),
and changes reach it through the sweep, debounced and paced (`router/homedue.py`)."""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import delivery, home, homedue, refreshes
from countersign.router.cards import APPROVE_ACTION, EDIT_ACTION, REASON_BLOCK, REJECT_ACTION
from countersign.router.jobs import request_refresh
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Outcome
from tests.helpers import wait_for
from tests.helpers.builders import age, audited, edited_card, new_request, post_card, status
from tests.helpers.modals import opened_home
from tests.helpers.signed import post_signed

LEAD = {"slack_user_id": "U0LEAD", "name": "lee"}


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def test_opening_home_publishes_the_queue_oldest_deadline_first(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    both = ["U0LEAD", "U0ALICE"]
    later, sooner = (new_request(runtime.store, approvers=both).id for _ in range(2))
    decided = new_request(runtime.store, approvers=both, summary="Refund *BETA* <!here>").id
    own = new_request(runtime.store, approvers=both, on_behalf_of="U0ALICE").id
    runtime.store.vote(decided, LEAD, Outcome.APPROVED, runtime.resume_event)
    age(runtime.store, later, expires_at=7200)
    age(runtime.store, sooner, expires_at=600)

    view = opened_home(sb, "U0ALICE", later, sooner)
    shown = _text(view)
    assert view["type"] == "home" and own not in shown and decided not in shown
    assert shown.index(sooner) < shown.index(later)
    assert "Waiting for you: 2 · Decided by you recently: 0" in shown
    buttons = next(b for b in view["blocks"] if b["block_id"] == f"decide-{sooner}")["elements"]
    assert [b["action_id"] for b in buttons][:2] == [APPROVE_ACTION, REJECT_ACTION]
    lead = opened_home(sb, "U0LEAD", own)
    assert "Decided by you recently: 1" in _text(lead)
    line = next(b for b in lead["blocks"] if b["block_id"] == f"recent-{decided}")
    summary, said = line["elements"]
    assert summary == {"type": "plain_text", "text": "Refund *BETA* <!here>", "emoji": False}
    assert said["type"] == "mrkdwn" and said["text"].startswith("Approved by <@U0LEAD> at <!date^")


def test_approve_from_home_is_the_cards_decision_audited_where_it_was_made(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    opened_home(sb, "U0ALICE", request_id)

    assert sb.click_home("U0ALICE", f"decide-{request_id}", APPROVE_ACTION) == (200, "")

    assert audited(runtime.store, request_id, "approved")["where"] == "home"
    assert audited(runtime.store, request_id, "vote")["where"] == "home"
    assert wait_for(lambda: edited_card(sb, card["ts"]), what="the card rewritten")
    assert status(runtime.store, request_id) == "approved"
    assert runtime.redis.zscore(homedue.DUE_KEY, "U0ALICE") is not None  # their Home is due a refresh


def test_a_click_on_a_stale_home_is_answered_in_the_reviewers_dm(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """The Home tab shows no ephemeral message, and the reviewer may not be in the card's channel:
    a click there that changes nothing (already decided on the card) is told in the app's DM."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    opened_home(sb, "U0ALICE", request_id)
    assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")[0] == 200
    wait_for(lambda: status(runtime.store, request_id) == "approved", what="the card's decision")

    assert sb.click_home("U0ALICE", f"decide-{request_id}", APPROVE_ACTION) == (200, "")

    dm = wait_for(lambda: sb.messages("D0ALICE"), what="the answer in U0ALICE's DM with the app")
    assert "already approved by <@U0LEAD>" in dm[0]["text"]
    assert audited(runtime.store, request_id, "refused")["why"] == "already_decided"
    assert sb.ephemerals("U0ALICE") == []


def test_reject_and_edit_from_home_go_through_the_modals(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    rejected, _ = post_card(client, redis, sb, run_id="rejected")
    edited = new_request(runtime.store, approvers=["U0ALICE"], rules=runtime.store.get(rejected).rules).id  # type: ignore[union-attr]
    opened_home(sb, "U0ALICE", rejected, edited)

    assert sb.click_home("U0ALICE", f"decide-{rejected}", REJECT_ACTION)[0] == 200
    modal = wait_for(lambda: next((v for v in sb.views("U0ALICE") if REASON_BLOCK in _text(v["view"])), None))
    carried = json.loads(modal["view"]["private_metadata"])
    assert (carried["id"], carried["where"], carried["shown"]["view"]) == (rejected, "home", "home")
    assert sb.submit_view(modal["id"], "U0ALICE", {REASON_BLOCK: "wrong customer"})[0] == 200
    assert audited(runtime.store, rejected, "rejected")["where"] == "home"

    assert sb.click_home("U0ALICE", f"decide-{edited}", EDIT_ACTION)[0] == 200
    form = wait_for(
        lambda: next((v for v in sb.views("U0ALICE") if "amount" in _text(v["view"]["blocks"])), None)
    )
    block = next(b["block_id"] for b in form["view"]["blocks"] if b["type"] == "input")
    assert sb.submit_view(form["id"], "U0ALICE", {block: "4.00"})[0] == 200
    decided = audited(runtime.store, edited, "approved")
    assert decided["where"] == "home" and decided["edits"] == [
        {"field": "amount", "from": "5.00", "to": "4.00"}
    ]


def test_a_change_reaches_the_home_through_the_sweep(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    opened_home(sb, "U0ALICE")
    request_id, _ = post_card(client, redis, sb)  # its card marks the approvers' Home tabs due

    wait_for(lambda: home.publish_due(runtime) and request_id in _text(sb.home("U0ALICE")), what="the sweep")
    assert request_id in _text(sb.home("U0LEAD"))


def test_the_agents_news_on_a_decided_card_leaves_the_home_as_it_is(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """The Home shows the queue and the verdicts: a decision marks the approvers' Home due, the
    agent's news under the decided card (a refresh it asks for) rewrites the card and not the Home."""
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    runtime.store.vote(request_id, LEAD, Outcome.APPROVED, runtime.resume_event)
    redis.delete(homedue.DUE_KEY)
    delivery.refresh(runtime, request_id)  # the card sweep's rewrite of a decided card (e.g. expired)
    assert redis.zscore(homedue.DUE_KEY, "U0ALICE") is not None
    redis.delete(homedue.DUE_KEY)
    updates = len(sb.calls("chat.update"))
    request_refresh(redis, request_id)  # as the agent's worker asks, with an execution's outcome

    assert refreshes.refresh_requested(runtime) == 1
    assert len(sb.calls("chat.update")) == updates + 1  # the card was rewritten
    assert redis.zcard(homedue.DUE_KEY) == 0


def test_a_burst_of_changes_costs_one_publish_per_reviewer_and_the_pace_holds(redis: Redis) -> None:
    for _ in range(300):
        homedue.mark_due(redis, ["U0LEAD", "U0ALICE"], seconds=0)
    assert sorted(homedue.take_due(redis, limit=100)) == ["U0ALICE", "U0LEAD"]
    assert homedue.take_due(redis, limit=100) == []

    homedue.mark_due(redis, ["U0LEAD"], seconds=0)
    minute = int(redis.time()[0]) // 60
    for spent in (minute, minute + 1):  # this minute's budget spent (and the next, should it start now)
        redis.set(homedue.SPENT_PREFIX + str(spent), homedue.PUBLISHES_PER_MINUTE, ex=120)
    assert homedue.take_due(redis, limit=100) == []
    assert not homedue.spend(redis)
    assert redis.zscore(homedue.DUE_KEY, "U0LEAD") is not None  # still due, for the next minute


def test_events_meant_elsewhere_are_refused_and_the_challenge_answered(
    sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    url, secret = bot + "/slack/events", sb.signing_secret
    body = {"type": "event_callback", "team_id": "T0SANDBOX", "api_app_id": "A0OTHER"}
    event = {"type": "app_home_opened", "user": "U0ALICE", "tab": "home"}
    assert (
        post_signed(url, json.dumps({**body, "event": event}).encode(), secret, "application/json")[0] == 403
    )
    assert post_signed(url, json.dumps(body).encode(), secret, "application/json")[0] == 400  # no event
    challenge = json.dumps({"type": "url_verification", "challenge": "c0ffee", "token": "t"}).encode()
    assert post_signed(url, challenge, secret, "application/json") == (200, '{"challenge": "c0ffee"}')
    assert sb.home("U0ALICE") is None


def test_a_repeat_click_is_told_in_the_same_words_on_the_card_and_on_home(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """U0ALICE approved on the card; a client that had not redrawn the card, and her Home tab not yet
    refreshed, both still offer Approve: each repeat is told she had approved it already."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    opened_home(sb, "U0ALICE", request_id)
    stale_card_click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")[0] == 200
    wait_for(lambda: status(runtime.store, request_id) == "approved", what="her decision")

    assert sb.send_signed(stale_card_click)[0] == 200
    [on_card] = wait_for(lambda: sb.ephemerals("U0ALICE"), what="the answer on the card")
    assert sb.click_home("U0ALICE", f"decide-{request_id}", APPROVE_ACTION) == (200, "")
    [on_home] = wait_for(lambda: sb.messages("D0ALICE"), what="the answer in her DM")

    assert on_home["text"] == on_card["text"]
    assert on_card["text"].startswith("You had already approved this request (approved by <@U0ALICE> at")
