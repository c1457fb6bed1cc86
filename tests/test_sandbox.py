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

from countersign.sandbox import Sandbox, SandboxServer, SubmissionRefused, serve
from countersign.sandbox.limits import (
    MAX_ACTION_ID,
    MAX_ACTIONS_ELEMENTS,
    MAX_BLOCK_ID,
    MAX_BLOCKS_PER_MESSAGE,
    MAX_BLOCKS_PER_VIEW,
    MAX_BLOCKS_TOTAL_TEXT,
    MAX_BUTTON_TEXT,
    MAX_BUTTON_VALUE,
    MAX_CALLBACK_ID,
    MAX_HEADER_TEXT,
    MAX_INPUT_LABEL,
    MAX_MESSAGE_TEXT,
    MAX_PRIVATE_METADATA,
    MAX_SECTION_FIELD_TEXT,
    MAX_SECTION_FIELDS,
    MAX_SECTION_TEXT,
    MAX_TEXT_INPUT_LENGTH,
    MAX_UPDATE_TEXT,
    MAX_VIEW_CLOSE,
    MAX_VIEW_STACK,
    MAX_VIEW_SUBMIT,
    MAX_VIEW_TITLE,
    TRIGGER_TTL_SECONDS,
    check_view,
)

SECRET = "sandbox-test-signing-secret"
CHANNEL = "C0APPROVALS"


class Receiver:
    """A stand-in bot: checks each request's Slack signature and records it. Answers 200, or 401 if unsigned.

    ``on_payload(payload)`` runs before answering a valid request, as a bot's ack path would. ``reply``
    (settable) turns a valid payload into the ``(status, body)`` answered instead of ``(200, "")``.
    """

    def __init__(self, secret: str, on_payload: Callable[[dict], None] | None = None) -> None:
        self.verifier = SignatureVerifier(secret)
        self.requests: list[dict[str, Any]] = []
        self.on_payload = on_payload
        self.reply: Callable[[dict], tuple[int, str]] | None = None
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/slack/events"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
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
                if valid and receiver.reply:
                    status, text = receiver.reply(payload)
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if text else "text/plain")
                self.send_header("Content-Length", str(len(text.encode())))
                self.end_headers()
                self.wfile.write(text.encode())

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


class FakeClock:
    """A clock for ``Sandbox(clock=...)`` that moves only when told (unix seconds)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sb(clock: FakeClock) -> Sandbox:
    return Sandbox(SECRET, clock=clock)


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


# --- modals ----------------------------------------------------------------------------------------------


def plain(text: str) -> dict:
    return {"type": "plain_text", "text": text}


def modal(
    *blocks: dict, title: str = "Approve payment", submit: str | None = "Approve", **extra: Any
) -> dict:
    view = {"type": "modal", "callback_id": "approve_payment", "title": plain(title), "blocks": list(blocks)}
    if submit is not None:
        view["submit"] = plain(submit)
    return {**view, **extra}


def number_input(block_id: str = "amount", **element: Any) -> dict:
    return {
        "type": "input",
        "block_id": block_id,
        "label": plain("Amount"),
        "element": {
            "type": "number_input",
            "action_id": f"{block_id}_input",
            "is_decimal_allowed": True,
            **element,
        },
    }


def text_input(block_id: str = "reason", *, optional: bool = False, **element: Any) -> dict:
    return {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": plain("Reason"),
        "element": {"type": "plain_text_input", "action_id": f"{block_id}_input", **element},
    }


def payment_modal(**extra: Any) -> dict:
    return modal(
        section("Pay *$120* to ACME?", block_id="intro"),
        number_input(min_value="0", max_value="1000", initial_value="120"),
        text_input(optional=True, multiline=True),
        private_metadata='{"request_id":"req-1"}',
        **extra,
    )


@pytest.fixture
def trigger(client: WebClient, sb: Sandbox) -> Callable[..., str]:
    """Issue a fresh trigger_id for a user, as a click on a card would (no bot needed: build only)."""
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    return lambda user="U0ALICE": sb.click_payload(CHANNEL, ts, "approve", user)["trigger_id"]


def open_modal(client: WebClient, trigger: Callable[..., str], view: dict | None = None) -> dict:
    return client.views_open(trigger_id=trigger(), view=view or payment_modal())["view"]


def test_click_then_views_open_shows_the_modal_to_the_clicker(
    client: WebClient, sb: Sandbox, receiver: Receiver
) -> None:
    opened: list[dict] = []
    receiver.on_payload = lambda payload: opened.append(
        client.views_open(trigger_id=payload["trigger_id"], view=payment_modal())["view"]
    )
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    assert sb.click(CHANNEL, ts, "approve", "U0ALICE") == (200, "")

    [view] = opened
    assert re.fullmatch(r"V[A-Z0-9]{10}", view["id"])
    assert view["hash"]
    assert view["state"] == {"values": {}}
    assert (view["team_id"], view["app_id"], view["type"]) == ("T0SANDBOX", "A0SANDBOX", "modal")
    assert view["callback_id"] == "approve_payment"
    assert view["private_metadata"] == '{"request_id":"req-1"}'
    assert view["root_view_id"] == view["id"]
    assert view["previous_view_id"] is None
    assert [b["block_id"] for b in view["blocks"]] == ["intro", "amount", "reason"]
    [record] = sb.views("U0ALICE")
    assert (record["id"], record["user"], record["view"], record["errors"]) == (
        view["id"],
        "U0ALICE",
        view,
        {},
    )
    assert sb.views("U0BOB") == []


def test_views_open_takes_a_json_string_and_fills_in_ids(
    client: WebClient, trigger: Callable[..., str]
) -> None:
    view = modal({"type": "input", "label": plain("Why?"), "element": {"type": "plain_text_input"}})
    answer = client.api_call("views.open", params={"trigger_id": trigger(), "view": json.dumps(view)})
    [block] = answer["view"]["blocks"]
    assert block["block_id"] and block["element"]["action_id"], "Slack fills in missing ids"


def test_trigger_ids_are_single_use_and_expire(
    client: WebClient, sb: Sandbox, clock: FakeClock, trigger: Callable[..., str]
) -> None:
    def error(trigger_id: str) -> str:
        return api_error(lambda: client.views_open(trigger_id=trigger_id, view=payment_modal()))["error"]

    assert error("1.2.never-issued") == "invalid_trigger_id"

    used = trigger()
    client.views_open(trigger_id=used, view=payment_modal())
    assert error(used) == "exchanged_trigger_id"

    late = trigger()
    clock.advance(TRIGGER_TTL_SECONDS + 0.001)
    assert error(late) == "expired_trigger_id"

    just_in_time = trigger()
    clock.advance(TRIGGER_TTL_SECONDS)
    client.views_open(trigger_id=just_in_time, view=payment_modal())

    sb.trigger_ttl_seconds = 60.0
    patient = trigger()
    clock.advance(30)
    client.views_open(trigger_id=patient, view=payment_modal())


def test_a_refused_view_leaves_the_trigger_usable(client: WebClient, trigger: Callable[..., str]) -> None:
    trigger_id = trigger()
    bad = api_error(lambda: client.views_open(trigger_id=trigger_id, view=modal(title="x" * 25)))
    assert bad["error"] == "invalid_arguments"
    client.views_open(trigger_id=trigger_id, view=payment_modal())


def test_views_update_replaces_the_view_and_checks_the_hash(
    client: WebClient, sb: Sandbox, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger, payment_modal(external_id="pay-req-1"))
    updated = client.views_update(
        view_id=opened["id"], hash=opened["hash"], view=modal(section("Checking…"), title="Please wait")
    )["view"]
    assert updated["id"] == opened["id"]
    assert updated["hash"] != opened["hash"]
    assert updated["title"]["text"] == "Please wait"
    assert sb.views("U0ALICE")[0]["view"] == updated

    stale = api_error(
        lambda: client.views_update(view_id=opened["id"], hash=opened["hash"], view=payment_modal())
    )
    assert stale["error"] == "hash_conflict"
    by_external_id = client.views_update(external_id="pay-req-1", view=payment_modal(external_id="pay-req-1"))
    assert by_external_id["view"]["id"] == opened["id"]
    assert api_error(lambda: client.views_update(view_id="VNOSUCHVIEW", view=payment_modal()))["error"] == (
        "not_found"
    )


def test_views_update_keeps_typed_input_with_the_same_ids(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)
    receiver.reply = lambda payload: (
        200,
        json.dumps({"response_action": "errors", "errors": {"amount": "No"}}),
    )
    sb.submit_view(opened["id"], "U0ALICE", {"amount": "7"})
    view = payment_modal()
    view["blocks"][2]["element"]["action_id"] = "renamed"
    updated = client.views_update(view_id=opened["id"], view=view)["view"]
    assert updated["state"]["values"] == {"amount": {"amount_input": {"type": "number_input", "value": "7"}}}
    assert sb.views("U0ALICE")[0]["errors"] == {}, "an update clears the errors"


def test_views_push_stacks_up_to_root_plus_two(
    client: WebClient, sb: Sandbox, trigger: Callable[..., str]
) -> None:
    assert (
        api_error(lambda: client.views_push(trigger_id=trigger(), view=payment_modal()))["error"]
        == "not_found"
    )
    root = open_modal(client, trigger)
    pushed = [
        client.views_push(trigger_id=trigger(), view=payment_modal())["view"]
        for _ in range(MAX_VIEW_STACK - 1)
    ]
    assert pushed[0]["previous_view_id"] == root["id"]
    assert pushed[1]["root_view_id"] == root["id"]
    assert [v["id"] for v in sb.views("U0ALICE")] == [root["id"], pushed[0]["id"], pushed[1]["id"]]
    error = api_error(lambda: client.views_push(trigger_id=trigger(), view=payment_modal()))
    assert error["error"] == "push_limit_reached"


def _sections(n: int) -> list[dict]:
    return [section(f"line {i}") for i in range(n)]


# (rule, build(n) -> view, limit): build(limit) opens and build(limit + 1) is invalid_arguments.
VIEW_BOUNDARIES: list[tuple[str, Callable[[int], dict], int]] = [
    ("title", lambda n: modal(title="t" * n), MAX_VIEW_TITLE),
    ("submit", lambda n: modal(submit="s" * n), MAX_VIEW_SUBMIT),
    ("close", lambda n: modal(close=plain("c" * n)), MAX_VIEW_CLOSE),
    ("blocks", lambda n: modal(*_sections(n)), MAX_BLOCKS_PER_VIEW),
    ("private_metadata", lambda n: modal(private_metadata="m" * n), MAX_PRIVATE_METADATA),
    ("callback_id", lambda n: modal(callback_id="c" * n), MAX_CALLBACK_ID),
    ("input label", lambda n: modal({**text_input(), "label": plain("l" * n)}), MAX_INPUT_LABEL),
    ("max_length", lambda n: modal(text_input(max_length=n)), MAX_TEXT_INPUT_LENGTH),
    ("min_length", lambda n: modal(text_input(min_length=n)), MAX_TEXT_INPUT_LENGTH),
]


@pytest.mark.parametrize(("rule", "build", "limit"), VIEW_BOUNDARIES, ids=[b[0] for b in VIEW_BOUNDARIES])
def test_modal_limits(
    client: WebClient, trigger: Callable[..., str], rule: str, build: Callable[[int], dict], limit: int
) -> None:
    client.views_open(trigger_id=trigger(), view=build(limit))
    error = api_error(lambda: client.views_open(trigger_id=trigger(), view=build(limit + 1)))
    assert error["error"] == "invalid_arguments", rule
    assert error["response_metadata"]["messages"], rule


@pytest.mark.parametrize(
    ("view", "pointer"),
    [
        (modal(title="x" * 25), "/view/title/text"),
        (modal(*_sections(101)), "/view/blocks"),
        (modal(number_input(min_value=0)), "/view/blocks/0/element/min_value"),
        (modal(number_input(initial_value=5.5)), "/view/blocks/0/element/initial_value"),
        (modal(number_input(min_value="10", max_value="1")), "/view/blocks/0/element/min_value"),
        (modal(number_input(min_value="ten")), "/view/blocks/0/element/min_value"),
        (
            modal({**number_input(), "element": {"type": "number_input", "action_id": "a"}}),
            "/view/blocks/0/element",
        ),
        (modal(number_input(is_decimal_allowed="yes")), "/view/blocks/0/element/is_decimal_allowed"),
        (modal(text_input(), submit=None), "/view"),
        (modal({"type": "input", "element": {"type": "plain_text_input"}}), "/view/blocks/0"),
        (modal({"type": "input", "label": plain("Why?")}), "/view/blocks/0"),
        (modal(text_input(max_length=0)), "/view/blocks/0/element/max_length"),
        (modal(text_input(min_length=-1)), "/view/blocks/0/element/min_length"),
        (modal(text_input(min_length=10, max_length=5)), "/view/blocks/0/element/min_length"),
        ({**modal(), "type": "home"}, "/view/type"),
        ({**modal(), "title": {"type": "mrkdwn", "text": "*Pay*"}}, "/view/title/type"),
        ({k: v for k, v in modal().items() if k != "title"}, "/view"),
    ],
    ids=[
        "title 25",
        "101 blocks",
        "integer min_value",
        "float initial_value",
        "min above max",
        "non-numeric min_value",
        "missing is_decimal_allowed",
        "non-boolean is_decimal_allowed",
        "input without submit",
        "input without label",
        "input without element",
        "max_length 0",
        "negative min_length",
        "min_length above max_length",
        "home view",
        "mrkdwn title",
        "no title",
    ],
)
def test_invalid_modals_are_refused_like_slack(
    client: WebClient, sb: Sandbox, trigger: Callable[..., str], view: dict, pointer: str
) -> None:
    error = api_error(lambda: client.views_open(trigger_id=trigger(), view=view))
    assert error["error"] == "invalid_arguments"
    assert any(f"[json-pointer:{pointer}]" in m for m in error["response_metadata"]["messages"]), error
    assert sb.views() == []


def test_missing_submit_and_integer_bounds_have_clear_messages() -> None:
    [message] = check_view(modal(text_input(), submit=None))
    assert message == "[ERROR] missing required field: submit [json-pointer:/view]"
    [message] = check_view(modal(number_input(min_value=1)))
    assert message == "[ERROR] must be a string [json-pointer:/view/blocks/0/element/min_value]"
    assert check_view(modal(number_input(min_value="-1.5", max_value="-1.5", initial_value="-1.5"))) == []


def test_oversized_view_is_view_too_large(client: WebClient, trigger: Callable[..., str]) -> None:
    huge = modal(*(section("x" * MAX_SECTION_TEXT) for _ in range(MAX_BLOCKS_PER_VIEW)))
    assert api_error(lambda: client.views_open(trigger_id=trigger(), view=huge))["error"] == "view_too_large"


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


# --- conversations.history, fault injection, call log, pacing -------------------------------------------


def test_conversations_history_newest_first_with_optional_metadata(client: WebClient, sb: Sandbox) -> None:
    metadata = {"event_type": "approval_requested", "event_payload": {"request_id": "req-1"}}
    first = client.chat_postMessage(channel=CHANNEL, text="first", metadata=metadata)["ts"]
    client.chat_postMessage(channel=CHANNEL, text="reply", thread_ts=first)
    human = sb.add_user_message(CHANNEL, "U0ALICE", "second")
    third = client.chat_postMessage(channel=CHANNEL, text="third")["ts"]
    client.chat_postMessage(channel="C0OTHER", text="elsewhere")

    history = client.conversations_history(channel=CHANNEL)
    assert [m["text"] for m in history["messages"]] == ["third", "second", "first"]
    assert all("metadata" not in m for m in history["messages"])
    assert history["has_more"] is False
    with_metadata = client.conversations_history(channel=CHANNEL, include_all_metadata=True)["messages"]
    assert with_metadata[2]["metadata"] == metadata
    assert with_metadata[1]["user"] == "U0ALICE"

    page = client.conversations_history(channel=CHANNEL, limit=2)
    assert ([m["ts"] for m in page["messages"]], page["has_more"]) == ([third, human], True)
    rest = client.conversations_history(
        channel=CHANNEL, limit=2, cursor=page["response_metadata"]["next_cursor"]
    )
    assert ([m["ts"] for m in rest["messages"]], rest["has_more"]) == ([first], False)
    between = client.conversations_history(channel=CHANNEL, oldest=first, latest=third)["messages"]
    assert [m["ts"] for m in between] == [human]
    inclusive = client.conversations_history(channel=CHANNEL, oldest=first, latest=third, inclusive=True)
    assert len(inclusive["messages"]) == 3
    assert client.conversations_history(channel="C0EMPTY")["messages"] == []


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
    impatient = WebClient(token="xoxb-1", base_url=server.url + "/api/", timeout=0.15, retry_handlers=[])
    sb.inject("chat.postMessage", delay_seconds=0.4)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        impatient.chat_postMessage(channel=CHANNEL, text="slow")
    deadline = time.monotonic() + 5
    while not sb.messages() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [m["text"] for m in sb.messages()] == ["slow"]


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


def test_optional_per_channel_pacing(server: SandboxServer, clock: FakeClock) -> None:
    paced = Sandbox(SECRET, clock=clock, post_rate_per_channel=1.0, post_burst=2)
    with serve(paced) as other:
        client = WebClient(token="xoxb-1", base_url=other.url + "/api/")
        client.chat_postMessage(channel=CHANNEL, text="1")
        client.chat_postMessage(channel=CHANNEL, text="2")
        with pytest.raises(SlackApiError) as caught:
            client.chat_postMessage(channel=CHANNEL, text="3")
        assert (caught.value.response.status_code, caught.value.response.headers["Retry-After"]) == (429, "1")
        client.chat_postMessage(channel="C0OTHER", text="other channels have their own budget")
        clock.advance(1.0)
        client.chat_postMessage(channel=CHANNEL, text="3")
    assert [m["text"] for m in paced.messages(CHANNEL)] == ["1", "2", "3"]


def test_page_modal_endpoints(
    client: WebClient, sb: Sandbox, server: SandboxServer, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    body = http(server.url + "/")[2]
    assert b"/_sandbox/submit" in body and b"/_sandbox/close" in body
    assert b"innerHTML" not in body

    opened = open_modal(client, trigger)
    assert json.loads(http(server.url + "/_sandbox/views?user=U0ALICE")[2]) == sb.views("U0ALICE")
    assert json.loads(http(server.url + "/_sandbox/state")[2])["views"] == sb.views()

    submit = {"view_id": opened["id"], "user": "U0ALICE", "values": {"amount": None}}
    status, _, answer = http(server.url + "/_sandbox/submit", submit)
    assert (status, json.loads(answer)["refused"]) == (
        200,
        {"amount": "Please complete this required field."},
    )
    assert http(server.url + "/_sandbox/submit", {**submit, "user": "U0BOB"})[0] == 404
    assert http(server.url + "/_sandbox/submit", {**submit, "values": {"nope": "1"}})[0] == 400

    status, _, answer = http(server.url + "/_sandbox/submit", {**submit, "values": {"amount": "10"}})
    assert (status, json.loads(answer)["status"]) == (200, 200)
    assert (
        receiver.requests[-1]["payload"]["view"]["state"]["values"]["amount"]["amount_input"]["value"] == "10"
    )
    assert sb.views() == []

    again = open_modal(client, trigger)
    status, _, answer = http(server.url + "/_sandbox/close", {"view_id": again["id"], "user": "U0ALICE"})
    assert (status, json.loads(answer)) == (200, {"status": None, "body": None})
    assert sb.views() == []
