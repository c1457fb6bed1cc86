"""Slash commands in the sandbox (``Sandbox.run_command``): the signed form Slack posts, its
``response_url``, an answer in the ack itself, and the page's ``/_sandbox/command`` endpoint."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from countersign.sandbox import Sandbox, SandboxServer

from .harness import FakeClock, Receiver


def test_a_command_is_a_signed_form_of_slacks_fields(
    sb: Sandbox, server: SandboxServer, receiver: Receiver
) -> None:
    assert sb.run_command("U0ALICE", "C0GENERAL", "pending") == (200, "")

    [request] = receiver.requests
    assert request["valid"] is True
    assert request["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert abs(int(request["headers"]["X-Slack-Request-Timestamp"]) - time.time()) < 60
    fields = request["payload"]
    assert "payload" not in fields
    assert fields["command"] == "/countersign"
    assert fields["text"] == "pending"
    assert (fields["user_id"], fields["user_name"], fields["channel_id"]) == ("U0ALICE", "alice", "C0GENERAL")
    assert (fields["team_id"], fields["api_app_id"], fields["is_enterprise_install"]) == (
        "T0SANDBOX",
        "A0SANDBOX",
        "false",
    )
    assert fields["response_url"].startswith(server.url + "/_sandbox/response/")
    assert fields["trigger_id"]
    assert sb.ephemerals("U0ALICE") == []  # an empty ack shows nothing


def test_the_response_url_answers_the_user_ephemerally(
    sb: Sandbox, server: SandboxServer, receiver: Receiver
) -> None:
    sb.run_command("U0ALICE", "C0GENERAL", "help")
    url = receiver.requests[0]["payload"]["response_url"]
    body = json.dumps({"response_type": "ephemeral", "text": "Your queue is empty"}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.loads(response.read())["ok"] is True

    [answer] = sb.ephemerals("U0ALICE")
    assert (answer["channel"], answer["text"]) == ("C0GENERAL", "Your queue is empty")
    assert sb.ephemerals("U0LEAD") == []


def _post(url: str, text: str) -> int:
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        assert json.loads(refused.read())["error"] == "expired_url"
        return refused.code


def test_a_response_url_takes_five_posts(sb: Sandbox, server: SandboxServer, receiver: Receiver) -> None:
    sb.run_command("U0ALICE", "C0GENERAL", "help")
    url = receiver.requests[0]["payload"]["response_url"]
    assert [_post(url, f"answer {n}") for n in range(1, 7)] == [200] * 5 + [404]
    assert [e["text"] for e in sb.ephemerals("U0ALICE")] == [f"answer {n}" for n in range(1, 6)]


def test_a_response_url_expires_thirty_minutes_after_the_command(
    sb: Sandbox, server: SandboxServer, receiver: Receiver, clock: FakeClock
) -> None:
    sb.run_command("U0ALICE", "C0GENERAL", "help")
    url = receiver.requests[0]["payload"]["response_url"]
    clock.advance(30 * 60)
    assert _post(url, "just in time") == 200
    clock.advance(1)
    assert _post(url, "too late") == 404
    assert [e["text"] for e in sb.ephemerals("U0ALICE")] == ["just in time"]


def test_an_answer_in_the_ack_is_shown_at_once(
    sb: Sandbox, server: SandboxServer, receiver: Receiver
) -> None:
    receiver.reply = lambda fields: (200, json.dumps({"text": "pong"}))
    sb.run_command("U0ALICE", "C0GENERAL", "ping")
    assert [e["text"] for e in sb.ephemerals("U0ALICE")] == ["pong"]


def test_the_page_sends_commands(sb: Sandbox, server: SandboxServer, receiver: Receiver) -> None:
    data = json.dumps({"user": "U0ALICE", "channel": "C0GENERAL", "text": "stats issue_refund"}).encode()
    request = urllib.request.Request(server.url + "/_sandbox/command", data=data)
    with urllib.request.urlopen(request, timeout=5) as response:
        answer = json.loads(response.read())
    assert (answer["status"], answer["body"]) == (200, "")
    assert receiver.requests[0]["payload"]["text"] == "stats issue_refund"

    bad = urllib.request.Request(server.url + "/_sandbox/command", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bad, timeout=5)
    assert refused.value.code == 400


def test_the_page_has_a_command_box(server: SandboxServer) -> None:
    with urllib.request.urlopen(server.url + "/", timeout=5) as response:
        page = response.read().decode()
    assert 'id="command-form"' in page and "/_sandbox/command" in page
