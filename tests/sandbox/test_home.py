"""The App Home tab in the sandbox: views.publish per user, the `app_home_opened` event a user
opening it sends, and the signed `block_actions` of a button on it."""

from __future__ import annotations

import json
import urllib.request

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from countersign.sandbox import Sandbox, SandboxServer

from .harness import Receiver

HOME = {
    "type": "home",
    "blocks": [
        {"type": "section", "block_id": "s", "text": {"type": "mrkdwn", "text": "Waiting for you"}},
        {
            "type": "actions",
            "block_id": "decide-r1",
            "elements": [
                {
                    "type": "button",
                    "action_id": "approve",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "value": "r1",
                }
            ],
        },
    ],
}


def test_views_publish_keeps_one_home_per_user(client: WebClient, sb: Sandbox) -> None:
    first = client.views_publish(user_id="U0ALICE", view=HOME)["view"]
    again = client.views_publish(user_id="U0ALICE", view=HOME, hash=first["hash"])["view"]
    assert again["id"] == first["id"] and again["type"] == "home"
    assert sb.home("U0ALICE") == again and sb.home("U0LEAD") is None
    assert sb.snapshot()["homes"]["U0ALICE"]["blocks"][1]["block_id"] == "decide-r1"

    with pytest.raises(SlackApiError) as stale:
        client.views_publish(user_id="U0ALICE", view=HOME, hash="0.stale")
    assert stale.value.response["error"] == "hash_conflict"
    with pytest.raises(SlackApiError) as modal:
        client.views_publish(user_id="U0ALICE", view={**HOME, "type": "modal"})
    assert modal.value.response["error"] == "invalid_arguments"
    with pytest.raises(SlackApiError) as nobody:
        client.views_publish(user_id="U0NOBODY", view=HOME)
    assert nobody.value.response["error"] == "user_not_found"


def test_opening_home_sends_a_signed_app_home_opened_event(
    client: WebClient, sb: Sandbox, receiver: Receiver
) -> None:
    client.views_publish(user_id="U0ALICE", view=HOME)
    assert sb.open_home("U0ALICE") == (200, "")

    [request] = receiver.requests
    assert request["valid"] is True and request["headers"]["Content-Type"] == "application/json"
    body = json.loads(request["body"])
    assert (body["type"], body["team_id"], body["api_app_id"]) == ("event_callback", "T0SANDBOX", "A0SANDBOX")
    event = body["event"]
    assert (event["type"], event["user"], event["tab"]) == ("app_home_opened", "U0ALICE", "home")
    assert event["channel"].startswith("D") and event["view"]["id"] == sb.home("U0ALICE")["id"]


def test_a_home_button_sends_block_actions_from_the_view(
    client: WebClient, sb: Sandbox, receiver: Receiver
) -> None:
    view_id = client.views_publish(user_id="U0ALICE", view=HOME)["view"]["id"]
    assert sb.click_home("U0ALICE", "decide-r1", "approve") == (200, "")

    payload = receiver.requests[0]["payload"]
    assert payload["type"] == "block_actions" and payload["container"] == {"type": "view", "view_id": view_id}
    assert "channel" not in payload and "response_url" not in payload and payload["trigger_id"]
    assert payload["actions"][0]["value"] == "r1" and payload["actions"][0]["block_id"] == "decide-r1"
    with pytest.raises(LookupError):
        sb.click_home("U0LEAD", "decide-r1", "approve")  # nothing published to them


def test_the_page_opens_home_and_clicks_on_it(
    client: WebClient, sb: Sandbox, server: SandboxServer, receiver: Receiver
) -> None:
    client.views_publish(user_id="U0ALICE", view=HOME)

    def post(path: str, data: dict[str, str]) -> dict[str, object]:
        request = urllib.request.Request(server.url + path, data=json.dumps(data).encode())
        with urllib.request.urlopen(request, timeout=5) as response:
            return dict(json.loads(response.read()))

    assert post("/_sandbox/home_opened", {"user": "U0ALICE"})["status"] == 200
    pressed = {"user": "U0ALICE", "block_id": "decide-r1", "action_id": "approve"}
    assert post("/_sandbox/click_home", pressed)["status"] == 200
    assert [r["payload"].get("type") for r in receiver.requests] == ["event_callback", "block_actions"]
    with urllib.request.urlopen(server.url + "/", timeout=5) as response:
        assert 'id="tab-home"' in response.read().decode()
