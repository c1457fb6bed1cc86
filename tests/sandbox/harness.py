"""The harness around a served sandbox: a stand-in bot that checks signatures, a fake clock, and
helpers that return a failed Web API call's error body or a raw HTTP answer.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier


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
                form = dict(urllib.parse.parse_qsl(body.decode()))  # a slash command's fields, or `payload`
                payload = json.loads(form["payload"]) if "payload" in form else form
                if headers.get("Content-Type") == "application/json":  # an event
                    payload = json.loads(body)
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
