"""The Slack sandbox over real HTTP: slack_sdk WebClient on the Web API, clicks into a signed receiver."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from countersign.sandbox import Sandbox, SandboxServer, serve
from countersign.sandbox.limits import (
    MAX_ACTION_ID,
    MAX_ACTIONS_ELEMENTS,
    MAX_BLOCK_ID,
    MAX_BLOCKS_PER_MESSAGE,
    MAX_BLOCKS_TOTAL_TEXT,
    MAX_BUTTON_TEXT,
    MAX_BUTTON_VALUE,
    MAX_HEADER_TEXT,
    MAX_MESSAGE_TEXT,
    MAX_SECTION_FIELD_TEXT,
    MAX_SECTION_FIELDS,
    MAX_SECTION_TEXT,
    MAX_UPDATE_TEXT,
)

SECRET = "sandbox-test-signing-secret"
CHANNEL = "C0APPROVALS"


class Receiver:
    """A stand-in bot: checks each request's Slack signature and records it. Answers 200, or 401 if unsigned.

    ``on_payload(payload)`` runs before answering a valid request, as a bot's ack path would.
    """

    def __init__(self, secret: str, on_payload: Callable[[dict], None] | None = None) -> None:
        self.verifier = SignatureVerifier(secret)
        self.requests: list[dict[str, Any]] = []
        self.on_payload = on_payload
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/slack/events"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = dict(self.headers.items())
                valid = receiver.verifier.is_valid_request(body, headers)
                payload = json.loads(urllib.parse.parse_qs(body.decode())["payload"][0])
                receiver.requests.append(
                    {"valid": valid, "headers": headers, "body": body, "payload": payload}
                )
                if valid and receiver.on_payload:
                    receiver.on_payload(payload)
                status, text = (200, "") if valid else (401, '{"error":"invalid request"}')
                self.send_response(status)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text.encode())

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def sb() -> Sandbox:
    return Sandbox(SECRET)


@pytest.fixture
def server(sb: Sandbox) -> Iterator[SandboxServer]:
    running = serve(sb)
    yield running
    running.shutdown()


@pytest.fixture
def client(server: SandboxServer) -> WebClient:
    return WebClient(token="xoxb-sandbox-test", base_url=server.url + "/api/")


@pytest.fixture
def receiver(sb: Sandbox) -> Iterator[Receiver]:
    bot = Receiver(SECRET)
    sb.interactivity_url = bot.url
    yield bot
    bot.close()


def section(text: str, **extra: Any) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}, **extra}


def button(action_id: str, label: str = "Go", **extra: Any) -> dict:
    return {"type": "button", "action_id": action_id, "text": {"type": "plain_text", "text": label}, **extra}


def card(request_id: str = "req-1") -> list[dict]:
    return [
        {"type": "header", "text": {"type": "plain_text", "text": "Approval needed"}},
        section("*deploy* to prod &amp; notify", block_id="summary"),
        {
            "type": "actions",
            "block_id": "decision",
            "elements": [
                button("approve", "Approve", value=request_id, style="primary"),
                button("deny", "Deny", value=request_id, style="danger"),
            ],
        },
    ]


def api_error(call: Callable[[], Any]) -> dict:
    """Run a WebClient call that must fail and return Slack's error body."""
    with pytest.raises(SlackApiError) as caught:
        call()
    return caught.value.response.data


def http(url: str, data: dict | None = None) -> tuple[int, str, bytes]:
    """GET ``url`` (or POST ``data`` as JSON); returns (status, Content-Type, body)."""
    body = None if data is None else json.dumps(data).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def test_auth_test_names_the_bot(client: WebClient, server: SandboxServer) -> None:
    answer = client.auth_test()
    assert answer["ok"] is True
    assert answer["user_id"] == "U0BOT"
    assert answer["bot_id"] == "B0BOT"
    assert answer["user"] == "countersign"
    assert answer["team"] == "Sandbox"
    assert answer["team_id"] == "T0SANDBOX"
    assert answer["url"] == server.url + "/"


def test_missing_or_non_bot_token_is_rejected(server: SandboxServer) -> None:
    base = server.url + "/api/"
    assert api_error(WebClient(base_url=base).auth_test)["error"] == "not_authed"
    assert api_error(WebClient(token="xoxp-user", base_url=base).auth_test)["error"] == "invalid_auth"


def test_unknown_method_is_http_404(client: WebClient) -> None:
    with pytest.raises(SlackApiError) as caught:
        client.api_call("chat.frobnicate")
    assert caught.value.response.status_code == 404
    assert caught.value.response["error"] == "unknown_method"


def test_post_message_stores_the_card(client: WebClient, sb: Sandbox) -> None:
    metadata = {"event_type": "approval_requested", "event_payload": {"request_id": "req-1"}}
    answer = client.chat_postMessage(
        channel=CHANNEL, text="Approval needed", blocks=card(), metadata=metadata
    )
    assert answer["channel"] == CHANNEL
    assert answer["message"]["bot_id"] == "B0BOT"
    [stored] = sb.messages(CHANNEL)
    assert stored["ts"] == answer["ts"]
    assert stored["text"] == "Approval needed"
    assert stored["metadata"] == metadata
    assert stored["user"] == "U0BOT"
    assert stored["edited"] is False
    assert stored["thread_ts"] is None
    assert [b["block_id"] for b in stored["blocks"][1:]] == ["summary", "decision"]
    assert stored["blocks"][0]["block_id"], "Slack fills in missing block_ids"
    assert sb.messages("C0OTHER") == []


def test_ts_values_are_unique_and_increasing(client: WebClient) -> None:
    stamps = [client.chat_postMessage(channel=CHANNEL, text=f"m{i}")["ts"] for i in range(20)]
    assert stamps == sorted(stamps, key=float)
    assert len(set(stamps)) == len(stamps)
    assert all(len(ts.split(".")[1]) == 6 for ts in stamps)


def test_update_replaces_blocks_and_marks_edited(client: WebClient, sb: Sandbox) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    new_blocks = [section("Approved by <@U0ALICE>", block_id="done")]
    answer = client.chat_update(channel=CHANNEL, ts=ts, text="Approved", blocks=new_blocks)
    assert (answer["channel"], answer["ts"], answer["text"]) == (CHANNEL, ts, "Approved")
    [stored] = sb.messages(CHANNEL)
    assert stored["blocks"] == new_blocks
    assert stored["text"] == "Approved"
    assert stored["edited"] is True


def test_text_only_update_drops_the_blocks(client: WebClient, sb: Sandbox) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    client.chat_update(channel=CHANNEL, ts=ts, text="Expired")
    [stored] = sb.messages(CHANNEL)
    assert (stored["text"], stored["blocks"]) == ("Expired", [])


def test_update_errors(client: WebClient, sb: Sandbox) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="hello")["ts"]
    assert api_error(lambda: client.chat_update(channel=CHANNEL, ts="1.000001", text="x"))["error"] == (
        "message_not_found"
    )
    assert api_error(lambda: client.chat_update(channel="C0OTHER", ts=ts, text="x"))["error"] == (
        "message_not_found"
    )
    human_ts = sb.add_user_message(CHANNEL, "U0ALICE", "I typed this")
    assert api_error(lambda: client.chat_update(channel=CHANNEL, ts=human_ts, text="x"))["error"] == (
        "cant_update_message"
    )


def test_post_message_needs_channel_and_content(client: WebClient) -> None:
    assert api_error(lambda: client.chat_postMessage(channel="", text="x"))["error"] == "channel_not_found"
    assert (
        api_error(lambda: client.api_call("chat.postMessage", json={"channel": CHANNEL}))["error"]
        == "no_text"
    )


def test_fifty_blocks_pass_and_fifty_one_fail(client: WebClient) -> None:
    blocks = [section(f"line {i}") for i in range(MAX_BLOCKS_PER_MESSAGE)]
    client.chat_postMessage(channel=CHANNEL, text="long", blocks=blocks)
    error = api_error(
        lambda: client.chat_postMessage(channel=CHANNEL, text="x", blocks=[*blocks, section("x")])
    )
    assert error["error"] == "invalid_blocks"
    assert error["response_metadata"]["messages"] == [
        "[ERROR] must be less than 51 items [json-pointer:/blocks]"
    ]


def test_section_text_of_3000_passes_and_3001_fails(client: WebClient) -> None:
    client.chat_postMessage(channel=CHANNEL, text="x", blocks=[section("a" * MAX_SECTION_TEXT)])
    error = api_error(
        lambda: client.chat_postMessage(
            channel=CHANNEL, text="x", blocks=[section("a" * (MAX_SECTION_TEXT + 1))]
        )
    )
    assert error["error"] == "invalid_blocks"
    assert "[json-pointer:/blocks/0/text/text]" in error["response_metadata"]["messages"][0]


def _fields(n: int) -> list[dict]:
    return [{"type": "section", "fields": [{"type": "plain_text", "text": "f"}] * n}]


def _field_text(n: int) -> list[dict]:
    return [{"type": "section", "fields": [{"type": "mrkdwn", "text": "f" * n}]}]


def _header(n: int) -> list[dict]:
    return [{"type": "header", "text": {"type": "plain_text", "text": "h" * n}}]


def _actions(*elements: dict) -> list[dict]:
    return [{"type": "actions", "elements": list(elements)}]


# (rule, builder(n) -> blocks, the limit n): blocks(limit) must pass and blocks(limit + 1) must fail.
BOUNDARIES: list[tuple[str, Callable[[int], list[dict]], int]] = [
    ("section fields", _fields, MAX_SECTION_FIELDS),
    ("section field text", _field_text, MAX_SECTION_FIELD_TEXT),
    ("header text", _header, MAX_HEADER_TEXT),
    ("button text", lambda n: _actions(button("a", "b" * n)), MAX_BUTTON_TEXT),
    ("button value", lambda n: _actions(button("a", value="v" * n)), MAX_BUTTON_VALUE),
    ("action_id", lambda n: _actions(button("a" * n)), MAX_ACTION_ID),
    ("block_id", lambda n: [section("x", block_id="b" * n)], MAX_BLOCK_ID),
    ("actions elements", lambda n: _actions(*(button(f"a{i}") for i in range(n))), MAX_ACTIONS_ELEMENTS),
]


@pytest.mark.parametrize(("rule", "build", "limit"), BOUNDARIES, ids=[b[0] for b in BOUNDARIES])
def test_block_kit_limits(
    client: WebClient, rule: str, build: Callable[[int], list[dict]], limit: int
) -> None:
    client.chat_postMessage(channel=CHANNEL, text="at the limit", blocks=build(limit))
    error = api_error(lambda: client.chat_postMessage(channel=CHANNEL, text="over", blocks=build(limit + 1)))
    assert error["error"] == "invalid_blocks", rule
    assert error["response_metadata"]["messages"], rule


@pytest.mark.parametrize(
    "blocks",
    [
        [section("a", block_id="same"), section("b", block_id="same")],
        [{"type": "carousel"}],
        _actions(button("same"), button("same")),
        [{"type": "header", "text": {"type": "mrkdwn", "text": "*bold*"}}],
        _actions(button("a", style="warning")),
        [section("")],
    ],
    ids=["duplicate block_id", "unknown type", "duplicate action_id", "mrkdwn header", "bad style", "empty"],
)
def test_malformed_blocks_are_invalid(client: WebClient, blocks: list[dict]) -> None:
    assert api_error(lambda: client.chat_postMessage(channel=CHANNEL, text="x", blocks=blocks))["error"] == (
        "invalid_blocks"
    )


def test_total_block_text_limit(client: WebClient) -> None:
    full = [section("a" * MAX_SECTION_TEXT) for _ in range(MAX_BLOCKS_TOTAL_TEXT // MAX_SECTION_TEXT)]
    client.chat_postMessage(channel=CHANNEL, text="x", blocks=full)
    error = api_error(
        lambda: client.chat_postMessage(channel=CHANNEL, text="x", blocks=[*full, section("a")])
    )
    assert error["error"] == "msg_blocks_too_long"


def test_text_length_limits(client: WebClient) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="a" * MAX_MESSAGE_TEXT)["ts"]
    too_long = "a" * (MAX_MESSAGE_TEXT + 1)
    assert (
        api_error(lambda: client.chat_postMessage(channel=CHANNEL, text=too_long))["error"] == "msg_too_long"
    )
    client.chat_update(channel=CHANNEL, ts=ts, text="a" * MAX_UPDATE_TEXT)
    too_long = "a" * (MAX_UPDATE_TEXT + 1)
    assert (
        api_error(lambda: client.chat_update(channel=CHANNEL, ts=ts, text=too_long))["error"]
        == "msg_too_long"
    )


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


def test_users_info(client: WebClient) -> None:
    user = client.users_info(user="U0ALICE")["user"]
    assert user["id"] == "U0ALICE"
    assert user["name"] == "alice"
    assert user["team_id"] == "T0SANDBOX"
    assert user["profile"]["display_name"] == "alice"
    assert api_error(lambda: client.users_info(user="U0NOBODY")) == {"ok": False, "error": "user_not_found"}


def test_custom_user_directory(server: SandboxServer) -> None:
    sb = Sandbox(SECRET, users={"U1": "zed"})
    with serve(sb) as other:
        client = WebClient(token="xoxb-1", base_url=other.url + "/api/")
        assert client.users_info(user="U1")["user"]["name"] == "zed"
        assert api_error(lambda: client.users_info(user="U0ALICE"))["error"] == "user_not_found"


def test_post_ephemeral(client: WebClient, sb: Sandbox) -> None:
    answer = client.chat_postEphemeral(channel=CHANNEL, user="U0BOB", text="Only approvers can decide")
    assert answer["message_ts"]
    assert sb.ephemerals("U0BOB") == [
        {
            "channel": CHANNEL,
            "user": "U0BOB",
            "text": "Only approvers can decide",
            "blocks": [],
            "ts": answer["message_ts"],
        }
    ]
    assert sb.ephemerals("U0ALICE") == []
    assert sb.messages() == []
    error = api_error(lambda: client.chat_postEphemeral(channel=CHANNEL, user="U0NOBODY", text="x"))
    assert error["error"] == "user_not_found"


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


def test_messages_returns_copies(client: WebClient, sb: Sandbox) -> None:
    client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())
    sb.messages()[0]["blocks"].clear()
    assert len(sb.messages()[0]["blocks"]) == 3


def test_page_and_json_endpoints(
    client: WebClient, sb: Sandbox, server: SandboxServer, receiver: Receiver
) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    client.chat_postEphemeral(channel=CHANNEL, user="U0BOB", text="psst")

    status, content_type, body = http(server.url + "/")
    assert status == 200
    assert content_type.startswith("text/html")
    assert b"<html" in body
    assert b"/_sandbox/state" in body

    status, content_type, body = http(server.url + "/_sandbox/state")
    state = json.loads(body)
    assert (status, content_type.split(";")[0]) == (200, "application/json")
    assert {"id": "U0LEAD", "name": "lee.lead"} in state["users"]
    assert [c["id"] for c in state["channels"]] == [CHANNEL]
    assert state["channels"][0]["messages"] == sb.messages(CHANNEL)
    assert state["ephemerals"] == sb.ephemerals()

    assert json.loads(http(f"{server.url}/_sandbox/messages?channel={CHANNEL}")[2]) == sb.messages(CHANNEL)
    assert json.loads(http(f"{server.url}/_sandbox/ephemerals?user=U0BOB")[2]) == sb.ephemerals("U0BOB")

    click = {"channel": CHANNEL, "ts": ts, "action_id": "deny", "user": "U0LEAD"}
    status, _, body = http(server.url + "/_sandbox/click", click)
    answer = json.loads(body)
    assert (status, answer["status"], answer["body"]) == (200, 200, "")
    assert receiver.requests[0]["payload"]["user"]["id"] == "U0LEAD"
    assert http(server.url + "/_sandbox/click", {**click, "action_id": "nope"})[0] == 404


def test_page_click_reports_an_unreachable_bot(client: WebClient, sb: Sandbox, server: SandboxServer) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    status, _, body = http(
        server.url + "/_sandbox/click",
        {"channel": CHANNEL, "ts": ts, "action_id": "approve", "user": "U0BOB"},
    )
    assert status == 200
    assert json.loads(body)["status"] == 0


def test_command_line_prints_one_line_and_serves_until_interrupted() -> None:
    command = [sys.executable, "-m", "countersign.sandbox", "--port", "0", "--signing-secret", SECRET]
    repo = Path(__file__).resolve().parents[1]
    with subprocess.Popen(
        command, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            line = proc.stdout.readline().strip()
            assert re.fullmatch(r"sandbox: http://127\.0\.0\.1:\d+", line)
            url = line.removeprefix("sandbox: ")
            auth = WebClient(token="xoxb-1", base_url=url + "/api/").auth_test()
            assert auth["user_id"] == "U0BOT"
        finally:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    assert (proc.returncode, out, err) == (0, "", "")
