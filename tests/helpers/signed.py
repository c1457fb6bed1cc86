"""Any bytes to the bot's `/slack/events`, signed the way Slack signs a request, for tests of what the
bot does with a hostile body: `post_signed`. The sandbox (`Sandbox.send_signed`) sends only the form
Slack sends; an attacker holding a valid signature (another installation of the app, a replayed
capture within the 5 minutes) sends whatever they like.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import time
import urllib.parse
from typing import Any

FORM = "application/x-www-form-urlencoded"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """Slack's v0 signature of `body` sent at `timestamp` (unix seconds): `"v0=" + hex(HMAC-SHA256(
    secret, "v0:<timestamp>:" + body))`, over the body's bytes
    (https://docs.slack.dev/authentication/verifying-requests-from-slack/)."""
    base = f"v0:{timestamp}:".encode() + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def form(*payloads: Any) -> bytes:
    """A form body with one `payload=<JSON>` field per value in `payloads`, in order."""
    fields = [urllib.parse.urlencode({"payload": json.dumps(payload)}) for payload in payloads]
    return "&".join(fields).encode()


def post_signed(
    url: str,
    body: bytes,
    secret: str,
    content_type: str | None = FORM,
    headers: dict[str, str] | None = None,
) -> tuple[int, str]:
    """POST `body` to `url` (the bot's `/slack/events`) signed with `secret` now, as `content_type`
    (None: no Content-Type header) with the extra `headers`; returns `(HTTP status, body text)`."""
    timestamp = int(time.time())
    sent = {
        "X-Slack-Request-Timestamp": str(timestamp),
        "X-Slack-Signature": signature(secret, timestamp, body),
        **({"Content-Type": content_type} if content_type is not None else {}),
        **(headers or {}),
    }
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=10)
    try:
        # the server may answer (a 413 for a body over its limit) and close before all is sent
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.request("POST", parsed.path, body=body, headers=sent)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()
