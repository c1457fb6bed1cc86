"""Modals from the user's side (``Sandbox.submit_view`` / ``close_view``, ``modals``): the payloads
sent, Slack's client checks, and how the bot's answer is applied.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from slack_sdk import WebClient

from countersign.sandbox import Sandbox, SubmissionRefused

from .builders import modal, open_modal, payment_modal, section, text_input
from .harness import Receiver


def test_submit_view_sends_the_view_submission_payload(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)

    assert sb.submit_view(opened["id"], "U0ALICE", {"amount": "99.5", "reason": ""}) == (200, "")

    [request] = receiver.requests
    assert request["valid"] is True
    payload = request["payload"]
    assert payload["type"] == "view_submission"
    assert payload["team"] == {"id": "T0SANDBOX", "domain": "sandbox"}
    assert payload["user"] == {"id": "U0ALICE", "username": "alice", "name": "alice", "team_id": "T0SANDBOX"}
    assert (payload["api_app_id"], payload["token"]) == ("A0SANDBOX", "sandboxverificationtoken")
    view = payload["view"]
    for key in ("id", "callback_id", "private_metadata", "hash", "blocks", "title", "submit"):
        assert view[key] == opened[key], key
    assert view["state"]["values"] == {
        "amount": {"amount_input": {"type": "number_input", "value": "99.5"}},
        "reason": {"reason_input": {"type": "plain_text_input", "value": None}},
    }
    assert sb.views() == [], "an empty 200 closes the view"
    reopened = client.views_open(trigger_id=payload["trigger_id"], view=payment_modal())
    assert reopened["ok"], "the submission's trigger_id is recorded like a click's"


def test_submit_payload_builds_without_sending(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)
    payload = sb.submit_payload(opened["id"], "U0ALICE", {"amount": "5000"})
    assert payload["view"]["state"]["values"]["amount"]["amount_input"]["value"] == "5000"
    assert receiver.requests == []
    assert len(sb.views("U0ALICE")) == 1
    with pytest.raises(ValueError):
        sb.submit_payload(opened["id"], "U0ALICE", {"no_such_block": "1"})
    with pytest.raises(LookupError):
        sb.submit_payload(opened["id"], "U0BOB", {})


def test_response_action_errors_keeps_the_view_open_until_a_clean_answer(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)
    answer = {"response_action": "errors", "errors": {"amount": "Over your approval limit"}}
    receiver.reply = lambda payload: (200, json.dumps(answer))

    assert sb.submit_view(opened["id"], "U0ALICE", {"amount": "900"}) == (200, json.dumps(answer))
    [record] = sb.views("U0ALICE")
    assert record["errors"] == {"amount": "Over your approval limit"}
    assert record["view"]["state"]["values"]["amount"]["amount_input"]["value"] == "900"

    receiver.reply = lambda payload: (200, "{}")
    sb.submit_view(opened["id"], "U0ALICE", {"amount": "90"})
    assert sb.views() == []


def test_response_action_update_replaces_the_view(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)
    done = modal(section("Approved. Thanks!"), title="Done", submit=None)
    receiver.reply = lambda payload: (200, json.dumps({"response_action": "update", "view": done}))
    sb.submit_view(opened["id"], "U0ALICE", {"amount": "120"})
    [record] = sb.views("U0ALICE")
    assert record["id"] == opened["id"]
    assert record["view"]["title"]["text"] == "Done"
    assert record["view"]["hash"] != opened["hash"]


def test_response_action_push_then_clear_closes_every_view(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)
    confirm = modal(text_input("why"), title="Confirm")
    receiver.reply = lambda payload: (200, json.dumps({"response_action": "push", "view": confirm}))
    sb.submit_view(opened["id"], "U0ALICE", {"amount": "120"})
    root, top = sb.views("U0ALICE")
    assert (root["id"], top["view"]["previous_view_id"]) == (opened["id"], opened["id"])

    receiver.reply = lambda payload: (200, json.dumps({"response_action": "clear"}))
    sb.submit_view(top["id"], "U0ALICE", {"why": "policy"})
    assert sb.views() == []


def test_slack_client_refuses_empty_required_and_out_of_range_inputs(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)
    with pytest.raises(SubmissionRefused) as refused:
        sb.submit_view(opened["id"], "U0ALICE", {"reason": "no amount"})
    assert set(refused.value.errors) == {"amount"}
    with pytest.raises(SubmissionRefused):
        sb.submit_view(opened["id"], "U0ALICE", {"amount": "1000.01"})
    assert receiver.requests == []
    [record] = sb.views("U0ALICE")
    assert "between 0 and 1000" in record["errors"]["amount"]


def test_bad_or_late_answers_keep_the_view_open(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)
    answers = [
        (500, ""),
        (200, json.dumps({"response_action": "errors", "errors": {"intro": "not an input"}})),
        (200, json.dumps({"response_action": "update", "view": modal(title="x" * 25)})),
        (200, "ok"),
    ]
    for status, body in answers:
        receiver.reply = lambda payload, answer=(status, body): answer
        assert sb.submit_view(opened["id"], "U0ALICE", {"amount": "1"}) == (status, body)
        [record] = sb.views("U0ALICE")
        assert record["response_error"], (status, body)
        assert record["view"]["title"]["text"] == "Approve payment"

    # Any real round trip takes longer than 0 s, so the bot's answer is late without waiting on the clock.
    sb.ack_timeout_seconds = 0.0
    receiver.reply = None
    sb.submit_view(opened["id"], "U0ALICE", {"amount": "1"})
    [record] = sb.views("U0ALICE")
    assert "Slack waits" in record["response_error"], "an answer after the ack timeout is ignored"


def test_close_view_notifies_only_when_asked(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    quiet = open_modal(client, trigger)
    assert sb.close_view(quiet["id"], "U0ALICE") is None
    assert (sb.views(), receiver.requests) == ([], [])

    noisy = open_modal(client, trigger, payment_modal(notify_on_close=True))
    assert sb.close_view(noisy["id"], "U0ALICE") == (200, "")
    [request] = receiver.requests
    assert request["valid"] is True
    payload = request["payload"]
    assert (payload["type"], payload["view"]["id"], payload["is_cleared"]) == (
        "view_closed",
        noisy["id"],
        False,
    )
    assert payload["user"]["id"] == "U0ALICE"
    assert sb.views() == []
    with pytest.raises(LookupError):
        sb.close_view(noisy["id"], "U0ALICE")
