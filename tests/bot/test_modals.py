"""Edit, Reject and Details modals over real HTTP: trigger_id used at once, inline errors in the
view_submission ack, and what the agent finally runs."""

from __future__ import annotations

import json

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.cards import APPROVE_ACTION, DETAILS_ACTION, EDIT_ACTION, REASON_BLOCK, REJECT_ACTION
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, drain, wait_for
from tests.helpers.builders import edited_card, post_card, status
from tests.helpers.modals import open_view, raw_submit

FORMAT = (
    "Enter a number like 1234.56 or 0.5: digits, with at most one point between them; no commas or exponents."
)


def test_edit_approves_the_edited_amount_and_the_agent_runs_exactly_that_once(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(
        client,
        redis,
        sb,
        payload={"amount": "512.40", "currency": "USD"},
        resume={"queue": agent.QUEUE, "func": agent.EXECUTE_FUNC},
    )
    view = open_view(sb, card, EDIT_ACTION, "U0LEAD", "edit-amount")
    [amount] = [b for b in view["view"]["blocks"] if b.get("block_id") == "edit-amount"]
    assert amount["element"]["type"] == "number_input" and amount["element"]["initial_value"] == "512.40"
    assert amount["element"]["min_value"] == "0.01"

    assert sb.submit_view(view["id"], "U0LEAD", {"edit-amount": "400"})[0] == 200
    wait_for(lambda: status(store, request_id) == "approved")
    assert sb.views("U0LEAD") == []  # the modal closed
    updated = wait_for(lambda: edited_card(sb, card["ts"]))
    assert "amount 512.40 → 400.00, edited by <@U0LEAD>" in json.dumps(updated["blocks"], ensure_ascii=False)

    wait_for(lambda: redis.exists(f"rq:job:resume-{request_id}"), what="the resume job")
    drain(redis, agent.QUEUE)
    drain(redis, agent.QUEUE)  # a second run of the queue finds nothing more to do
    assert agent.executed(redis) == [{"amount": "400.00", "currency": "USD"}]
    row = store.get(request_id)
    assert (
        row is not None
        and row.execution == "executed"
        and row.edits == [{"field": "amount", "from": "512.40", "to": "400.00"}]
    )
    approved = next(e for e in store.audit_trail(request_id) if e.event == "approved")
    assert approved.detail["edits"] == row.edits

    drain(redis)  # the router worker rewrites the card with the outcome
    assert "Executed ✓" in json.dumps(sb.messages("C0FINANCE")[0]["blocks"], ensure_ascii=False)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("abc", FORMAT),
        ("1,000", FORMAT),
        (".5", FORMAT),  # Slack's number input sends these on; the error must not describe them
        ("100.", FORMAT),
        ("12.345", "Use at most 2 decimal places."),
        ("-5", "Must be at least 0.01."),
        ("", "Enter a value."),
        ("600.00", "The policy's edit rule does not allow this edit."),  # unlabelled: no CEL shown
    ],
)
def test_bad_edit_gets_the_exact_errors_ack_and_changes_nothing(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
    value: str,
    error: str,
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, payload={"amount": "512.40", "currency": "USD"})
    view = open_view(sb, card, EDIT_ACTION, "U0LEAD", "edit-amount")
    assert raw_submit(sb, view, "U0LEAD", {"edit-amount": value}) == {
        "response_action": "errors",
        "errors": {"edit-amount": error},
    }
    assert status(store, request_id) == "pending"


def test_edit_submitted_after_someone_else_decided_is_refused(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    view = open_view(sb, card, EDIT_ACTION, "U0LEAD", "edit-amount")
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    wait_for(lambda: status(store, request_id) == "approved")

    answer = raw_submit(sb, view, "U0LEAD", {"edit-amount": "100.00"})
    assert answer["response_action"] == "errors"
    assert "This request was already approved by alice at " in answer["errors"]["edit-amount"]
    assert "<" not in answer["errors"]["edit-amount"]  # modal errors are plain text in Slack
    row = store.get(request_id)
    assert (
        row is not None
        and row.approved_payload == {"amount": "120.00", "currency": "USD"}
        and row.edits == []
    )
    assert [e.detail.get("step") for e in store.audit_trail(request_id) if e.event == "refused"] == ["edit"]


def test_clicks_on_a_decided_card_are_audited_with_the_same_step_words(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """New-user trial, finding 13: a `refused` event's `step` is approve / reject / edit, whichever
    button, modal or submit was refused, never the button's `action_id`."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    reject_form = open_view(sb, card, REJECT_ACTION, "U0LEAD", REASON_BLOCK)
    stale = [  # clicks on the card as it was before it was decided (not refreshed yet on that screen)
        sb.click_payload("C0FINANCE", card["ts"], action, "U0LEAD")
        for action in (REJECT_ACTION, EDIT_ACTION, APPROVE_ACTION)
    ]
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0ALICE")
    wait_for(lambda: status(store, request_id) == "approved")

    def steps() -> list[str]:
        return [e.detail["step"] for e in store.audit_trail(request_id) if e.event == "refused"]

    raw_submit(sb, reject_form, "U0LEAD", {REASON_BLOCK: "too late"})
    for payload in stale:  # one at a time: each refusal opens a notice modal in place of the last
        seen = len(steps())
        assert sb.send_signed(payload)[0] == 200
        wait_for(lambda seen=seen: len(steps()) > seen, what="the refusal audited")
    assert steps() == ["reject", "reject", "edit", "approve"]


def test_non_approver_cannot_open_the_edit_form(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    view = open_view(sb, card, EDIT_ACTION, "U0MALLORY", None)
    assert "not an approver" in json.dumps(view["view"]["blocks"])
    assert not any(b["type"] == "input" for b in view["view"]["blocks"])
    assert [e.detail["why"] for e in store.audit_trail(request_id) if e.event == "refused"] == [
        "not_an_approver"
    ]


def test_reject_with_a_reason_reaches_the_agent_the_audit_and_the_card(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    view = open_view(sb, card, REJECT_ACTION, "U0ALICE", REASON_BLOCK)
    assert raw_submit(sb, view, "U0ALICE", {REASON_BLOCK: "  "}) == {
        "response_action": "errors",
        "errors": {REASON_BLOCK: "A reason is required to reject this action class."},
    }
    assert sb.submit_view(view["id"], "U0ALICE", {REASON_BLOCK: "wrong customer <!here>"})[0] == 200
    wait_for(lambda: status(store, request_id) == "rejected")

    rejected = next(e for e in store.audit_trail(request_id) if e.event == "rejected")
    assert (rejected.actor, rejected.detail["reason"]) == ("U0ALICE", "wrong customer <!here>")
    updated = wait_for(lambda: edited_card(sb, card["ts"]))
    assert "Reviewer's reason: wrong customer <!here>" in _texts(updated["blocks"], "plain_text")
    wait_for(lambda: redis.exists(f"rq:job:resume-{request_id}"))
    drain(redis, agent.QUEUE)
    [decision] = agent.resumed(redis)
    assert (decision["outcome"], decision["reason"], decision["grant"]) == (
        "rejected",
        "wrong customer <!here>",
        None,
    )


def _texts(blocks: object, kind: str) -> list[str]:
    """The `text` of every text object of `kind` (`plain_text` or `mrkdwn`) anywhere in `blocks`."""
    if isinstance(blocks, dict):
        own = [blocks["text"]] if blocks.get("type") == kind and isinstance(blocks.get("text"), str) else []
        return own + [t for value in blocks.values() for t in _texts(value, kind)]
    if isinstance(blocks, list):
        return [t for value in blocks for t in _texts(value, kind)]
    return []


def test_a_reviewers_reason_is_shown_as_typed_never_read_as_mrkdwn(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """What a reviewer types in the Reject modal is shown as plain text: its asterisks are not bold,
    and a broadcast, a link or a mention in it is not one (a DM card is the same card)."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, payload={"amount": "75.00", "currency": "EUR"})
    typed = "duplicate of *claim 4471* — ask <!channel> & see <http://evil.example|the ledger> <@U0LEAD>"
    view = open_view(sb, card, REJECT_ACTION, "U0ALICE", REASON_BLOCK)
    assert sb.submit_view(view["id"], "U0ALICE", {REASON_BLOCK: typed})[0] == 200
    wait_for(lambda: status(store, request_id) == "rejected")

    updated = wait_for(lambda: edited_card(sb, card["ts"]))
    assert f"Reviewer's reason: {typed}" in _texts(updated["blocks"], "plain_text")
    assert not any("claim 4471" in text for text in _texts(updated["blocks"], "mrkdwn"))
    assert "claim 4471" not in updated["text"]


def test_reason_is_optional_where_the_policy_does_not_require_it(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, channel="C0APPROVALS", action="send_email")
    assert EDIT_ACTION not in json.dumps(card["blocks"])  # nothing editable for this action class
    view = open_view(sb, card, REJECT_ACTION, "U0LEAD", REASON_BLOCK)
    assert sb.submit_view(view["id"], "U0LEAD", {REASON_BLOCK: None})[0] == 200
    wait_for(lambda: status(store, request_id) == "rejected")
    assert store.get(request_id).decision_reason is None  # type: ignore[union-attr]


def test_details_show_the_whole_payload_and_context_to_anyone(
    client: ApprovalClient, redis: Redis, sandbox: tuple[Sandbox, str], bot: str, store: Store
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, context={"ticket": "T-1", "history": ["a"] * 50})
    view = open_view(sb, card, DETAILS_ACTION, "U0MALLORY", None)
    text = json.dumps(view["view"]["blocks"])
    assert "T-1" in text and '\\"currency\\": \\"USD\\"' in text
    assert view["view"]["close"]["text"] == "Close" and view["view"]["submit"] is None  # read-only
    opened = [e.actor for e in store.audit_trail(request_id) if e.event == "details_opened"]
    assert opened == ["U0MALLORY"]  # `countersign stats`: that approval, if any, was read first
