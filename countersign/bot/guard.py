"""What `/slack/events` refuses before Bolt sees it, so bad input gets a 4xx and never a 500.

- a body over `MAX_BODY_BYTES`: 413;
- a missing or malformed `X-Slack-Request-Timestamp`, a timestamp more than 5 minutes off, or a
  signature that is not Slack's: 401 (https://docs.slack.dev/authentication/verifying-requests-from-slack/,
  checked with slack_sdk's `SignatureVerifier`; Bolt checks it again);
- a signed interactivity payload without the shape Slack always sends (a `type`, a `user` with an
  id, a non-empty `actions` list for `block_actions`, a `view` with a `type` and a `callback_id`
  for view payloads): 400. Bolt would fail on it with a 500;
- a payload from another workspace than the bot token's: 403.
"""

from __future__ import annotations

import io
import json
import urllib.parse
from typing import Any

from slack_sdk.signature import SignatureVerifier

MAX_BODY_BYTES = 1024 * 1024  # interactivity payloads are a few kB; a full modal stays far below this
UNAUTHORIZED = "401 Unauthorized"
BAD_REQUEST = "400 Bad Request"


def refuse(environ: dict[str, Any], signing_secret: str, team_id: str | None = None) -> str | None:
    """The HTTP status line to answer instead of Bolt, or None to let Bolt handle the request.

    With `team_id` (the workspace the bot token belongs to), a payload from another workspace gets
    403. Reads the body and puts it back in `environ["wsgi.input"]` for Bolt.
    """
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return BAD_REQUEST
    if length > MAX_BODY_BYTES:
        return "413 Request Entity Too Large"
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    timestamp = str(environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", ""))
    signature = str(environ.get("HTTP_X_SLACK_SIGNATURE", ""))
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return UNAUTHORIZED
    if not SignatureVerifier(signing_secret).is_valid(body, timestamp, signature):
        return UNAUTHORIZED
    form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    if "payload" not in form:
        return None  # not an interactivity payload: Bolt answers it (or 404s it)
    try:
        payload = json.loads(form["payload"][0])
    except ValueError:
        return BAD_REQUEST
    if not isinstance(payload, dict) or not _shape_ok(payload):
        return BAD_REQUEST
    sender = (payload.get("team") or {}).get("id")
    return "403 Forbidden" if team_id and sender and sender != team_id else None


def _is_dict_with_str(value: Any, key: str) -> bool:
    return isinstance(value, dict) and isinstance(value.get(key), str)


def _shape_ok(payload: dict[str, Any]) -> bool:
    kind = payload.get("type")
    if not isinstance(kind, str) or not _is_dict_with_str(payload.get("user"), "id"):
        return False
    if any(
        payload.get(k) is not None and not isinstance(payload[k], dict)
        for k in ("team", "channel", "container")
    ):
        return False
    if kind == "block_actions":
        actions = payload.get("actions")
        return (
            isinstance(actions, list)
            and bool(actions)
            and all(_is_dict_with_str(a, "action_id") for a in actions)
        )
    if kind in ("view_submission", "view_closed"):
        view = payload.get("view")
        return _is_dict_with_str(view, "callback_id") and _is_dict_with_str(view, "type")
    return True
