"""The Web API as a whole (``webapi.dispatch``, ``webapi.arguments``): tokens, unknown methods,
form-encoded arguments, the call log and injected faults.
"""

from __future__ import annotations

import json
import urllib.error

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from countersign.sandbox import Sandbox, SandboxServer

from ..helpers import wait_for
from .builders import CHANNEL, card
from .harness import FakeClock, api_error


def test_missing_or_non_bot_token_is_rejected(server: SandboxServer) -> None:
    base = server.url + "/api/"
    assert api_error(WebClient(base_url=base).auth_test)["error"] == "not_authed"
    assert api_error(WebClient(token="xoxp-user", base_url=base).auth_test)["error"] == "invalid_auth"


def test_a_bot_token_other_than_the_workspaces_is_invalid_auth(server: SandboxServer, sb: Sandbox) -> None:
    base = server.url + "/api/"
    assert WebClient(token="xoxb-anything", base_url=base).auth_test()["ok"]  # no bot_token: any bot token
    sb.bot_token = "xoxb-ours"
    assert api_error(WebClient(token="xoxb-revoked", base_url=base).auth_test)["error"] == "invalid_auth"
    assert WebClient(token="xoxb-ours", base_url=base).auth_test()["user_id"] == "U0BOT"


def test_unknown_method_is_http_404(client: WebClient) -> None:
    with pytest.raises(SlackApiError) as caught:
        client.api_call("chat.frobnicate")
    assert caught.value.response.status_code == 404
    assert caught.value.response["error"] == "unknown_method"


def test_form_encoded_call_with_json_string_fields(client: WebClient, sb: Sandbox) -> None:
    metadata = {"event_type": "approval_requested", "event_payload": {"id": 1}}
    params = {
        "channel": CHANNEL,
        "text": "form",
        "blocks": json.dumps(card()),
        "metadata": json.dumps(metadata),
    }
    client.api_call("chat.postMessage", params=params)
    [stored] = sb.messages(CHANNEL)
    assert stored["blocks"][1]["text"]["text"] == "*deploy* to prod &amp; notify"
    assert stored["metadata"] == metadata
    bad = {"channel": CHANNEL, "text": "x", "blocks": "[not json"}
    assert (
        api_error(lambda: client.api_call("chat.postMessage", params=bad))["error"] == "invalid_blocks_format"
    )


def test_calls_are_recorded_and_counted(client: WebClient, sb: Sandbox, clock: FakeClock) -> None:
    sb.inject("chat.postMessage", status=429)
    with pytest.raises(SlackApiError):
        client.chat_postMessage(channel=CHANNEL, text="one")
    client.chat_postMessage(channel=CHANNEL, text="one")
    client.auth_test()
    with pytest.raises(SlackApiError):
        client.api_call("chat.frobnicate")

    posts = sb.calls("chat.postMessage")
    assert [(c["status"], c["error"]) for c in posts] == [(429, "ratelimited"), (200, None)]
    assert posts[1]["params"] == {"channel": CHANNEL, "text": "one"}
    assert posts[1]["time"] == clock.now
    assert [c["method"] for c in sb.calls()] == [
        "chat.postMessage",
        "chat.postMessage",
        "auth.test",
        "chat.frobnicate",
    ]


def test_injected_429_reaches_slack_sdk_with_retry_after(client: WebClient, sb: Sandbox) -> None:
    sb.inject("chat.postMessage", status=429, retry_after=7)
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel=CHANNEL, text="hello")
    response = caught.value.response
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "7"
    assert response.data == {"ok": False, "error": "ratelimited"}
    assert sb.messages() == []
    client.chat_postMessage(channel=CHANNEL, text="hello")
    assert len(sb.messages()) == 1


def test_injected_errors_statuses_and_counts(client: WebClient, sb: Sandbox) -> None:
    sb.inject("chat.update", error="channel_not_found", times=2)
    sb.inject("chat.update", status=503, retry_after=2)
    ts = client.chat_postMessage(channel=CHANNEL, text="hello")["ts"]
    for _ in range(2):
        failed = api_error(lambda: client.chat_update(channel=CHANNEL, ts=ts, text="x"))
        assert failed == {"ok": False, "error": "channel_not_found"}
    with pytest.raises(SlackApiError) as caught:
        client.chat_update(channel=CHANNEL, ts=ts, text="x")
    assert (caught.value.response.status_code, caught.value.response.headers["Retry-After"]) == (503, "2")
    client.chat_update(channel=CHANNEL, ts=ts, text="finally")
    assert sb.messages()[0]["text"] == "finally"
    with pytest.raises(ValueError):
        sb.inject("chat.frobnicate", status=500)


def test_injected_delay_times_out_the_client_but_the_call_still_runs(
    server: SandboxServer, sb: Sandbox
) -> None:
    # The client gives up after 0.2 s and the sandbox answers after 1.5 s: the 1.3 s between them keeps
    # the timeout ahead of the answer even when a loaded machine is slow to schedule either side.
    impatient = WebClient(token="xoxb-1", base_url=server.url + "/api/", timeout=0.2, retry_handlers=[])
    sb.inject("chat.postMessage", delay_seconds=1.5)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        impatient.chat_postMessage(channel=CHANNEL, text="slow")
    wait_for(sb.messages, what="the delayed chat.postMessage to run")
    assert [m["text"] for m in sb.messages()] == ["slow"]
