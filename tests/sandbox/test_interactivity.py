"""Clicks on cards (``Sandbox.click``, ``interactivity``): the signed block_actions payload, its
signature, trigger_ids, and a bot acting on the click through chat.update and the response_url.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from countersign.sandbox import Sandbox, SandboxServer

from .builders import CHANNEL, SECRET, card, section
from .harness import Receiver


def test_click_sends_a_signed_block_actions_payload(
    client: WebClient, sb: Sandbox, receiver: Receiver
) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card("req-42"))["ts"]

    assert sb.click(CHANNEL, ts, "approve", "U0ALICE") == (200, "")

    [request] = receiver.requests
    assert request["valid"] is True
    assert request["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert abs(int(request["headers"]["X-Slack-Request-Timestamp"]) - time.time()) < 60
    payload = request["payload"]
    assert payload["type"] == "block_actions"
    assert payload["team"] == {"id": "T0SANDBOX", "domain": "sandbox"}
    assert payload["user"] == {"id": "U0ALICE", "username": "alice", "name": "alice", "team_id": "T0SANDBOX"}
    assert payload["api_app_id"] == "A0SANDBOX"
    assert payload["container"] == {
        "type": "message",
        "message_ts": ts,
        "channel_id": CHANNEL,
        "is_ephemeral": False,
    }
    assert payload["channel"]["id"] == CHANNEL
    assert payload["message"]["ts"] == ts
    assert payload["message"]["blocks"] == sb.messages(CHANNEL)[0]["blocks"]
    assert payload["response_url"].startswith(sb.base_url + "/")
    [action] = payload["actions"]
    assert action["action_id"] == "approve"
    assert action["block_id"] == "decision"
    assert action["value"] == "req-42"
    assert action["style"] == "primary"
    assert action["type"] == "button"
    assert action["text"] == {"type": "plain_text", "text": "Approve"}
    assert float(action["action_ts"]) > 0


def test_each_click_gets_a_fresh_trigger_id(client: WebClient, sb: Sandbox, receiver: Receiver) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    sb.click(CHANNEL, ts, "approve", "U0ALICE")
    sb.click(CHANNEL, ts, "deny", "U0MALLORY")
    first, second = (r["payload"] for r in receiver.requests)
    assert first["trigger_id"] != second["trigger_id"]
    assert second["actions"][0]["action_id"] == "deny"
    assert second["user"]["name"] == "mallory"


def test_wrong_secret_or_stale_timestamp_fails_verification(sb: Sandbox, receiver: Receiver) -> None:
    payload = {"type": "block_actions", "actions": []}
    assert sb.send_signed(payload)[0] == 200
    assert sb.send_signed(payload, secret="not-the-secret")[0] == 401
    assert sb.send_signed(payload, timestamp=int(time.time()) - 600)[0] == 401
    assert [r["valid"] for r in receiver.requests] == [True, False, False]
    forged = receiver.requests[1]
    verifier = SignatureVerifier(SECRET)
    assert not verifier.is_valid_request(forged["body"], forged["headers"])
    resigned = SignatureVerifier("not-the-secret").generate_signature(
        timestamp=forged["headers"]["X-Slack-Request-Timestamp"], body=forged["body"]
    )
    assert forged["headers"]["X-Slack-Signature"] == resigned


def test_click_on_unknown_message_or_button_raises(
    client: WebClient, sb: Sandbox, receiver: Receiver
) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    with pytest.raises(LookupError):
        sb.click(CHANNEL, "1.000001", "approve", "U0ALICE")
    with pytest.raises(LookupError):
        sb.click(CHANNEL, ts, "no_such_button", "U0ALICE")
    client.chat_update(channel=CHANNEL, ts=ts, text="Decided")
    with pytest.raises(LookupError):
        sb.click(CHANNEL, ts, "approve", "U0ALICE")
    assert receiver.requests == []


def test_bot_can_update_the_card_and_use_response_url_while_acking(
    client: WebClient, sb: Sandbox, server: SandboxServer
) -> None:
    def handle(payload: dict) -> None:
        channel, ts = payload["container"]["channel_id"], payload["container"]["message_ts"]
        client.chat_update(
            channel=channel, ts=ts, text="Approved", blocks=[section("Approved", block_id="v2")]
        )
        note = json.dumps({"text": "Recorded your approval"}).encode()
        request = urllib.request.Request(
            payload["response_url"], data=note, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response) == {"ok": True}

    bot = Receiver(SECRET, on_payload=handle)
    sb.interactivity_url = bot.url
    try:
        ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
        assert sb.click(CHANNEL, ts, "approve", "U0ALICE")[0] == 200
    finally:
        bot.close()
    [stored] = sb.messages(CHANNEL)
    assert stored["text"] == "Approved"
    assert stored["edited"] is True
    assert [e["text"] for e in sb.ephemerals("U0ALICE")] == ["Recorded your approval"]


def test_a_click_carries_what_the_clicker_was_shown_as_slack_does(
    client: WebClient, sb: Sandbox, receiver: Receiver
) -> None:
    """Slack sends the clicked message (its `text` and `blocks`, as stored) with a card's
    block_actions, and the Home view with a Home click: countersign audits what the reviewer was
    shown from them (https://docs.slack.dev/reference/interaction-payloads/block_actions-payload)."""
    blocks = [{**block, "block_id": f"b{n}"} for n, block in enumerate(card("req-7"))]
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed: deploy", blocks=blocks)["ts"]
    home = {"type": "home", "blocks": [blocks[2] | {"block_id": "decide-req-7"}]}
    client.views_publish(user_id="U0ALICE", view=home)

    assert sb.click(CHANNEL, ts, "approve", "U0ALICE") == (200, "")
    assert sb.click_home("U0ALICE", "decide-req-7", "approve") == (200, "")

    on_card, on_home = (request["payload"] for request in receiver.requests)
    assert (on_card["message"]["text"], on_card["message"]["blocks"]) == ("Approval needed: deploy", blocks)
    assert on_home["view"]["blocks"] == home["blocks"] and on_home["view"]["type"] == "home"
