"""The Slack Web API methods the sandbox serves, as a dispatch table of small functions.

Every method answers as Slack does (https://docs.slack.dev/apis/web-api/): HTTP 200 with
``{"ok": true, ...}`` or ``{"ok": false, "error": "<code>"}``. An unknown method gets HTTP 404 with
``unknown_method``. To add a method, write ``def handler(sb, params) -> ApiResponse`` and register it in
``METHODS``. Handlers run while holding ``sb.state.lock`` and signal errors by raising ``ApiError``.
``ApiResponse`` carries a status and headers so handlers can also answer like fault injection would
(e.g. 429 with ``Retry-After``).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from countersign.sandbox.core import (
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    TEAM_NAME,
    UNSERVED_BASE_URL,
    fill_ids,
    slack_message,
)
from countersign.sandbox.limits import (
    MAX_BLOCKS_TOTAL_TEXT,
    MAX_MESSAGE_TEXT,
    MAX_UPDATE_TEXT,
    blocks_text_length,
    check_blocks,
)

if TYPE_CHECKING:
    from countersign.sandbox.core import Sandbox

Params = dict[str, Any]


@dataclass(frozen=True)
class ApiResponse:
    """One HTTP answer: JSON ``body``, ``status`` (default 200) and extra ``headers``."""

    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


class ApiError(Exception):
    """Raised by a handler to answer ``{"ok": false, "error": error, **extra}``."""

    def __init__(self, error: str, status: int = 200, **extra: Any) -> None:
        super().__init__(error)
        self.response = ApiResponse({"ok": False, "error": error, **extra}, status)


Method = Callable[["Sandbox", Params], ApiResponse]


def ok(**fields: Any) -> ApiResponse:
    """A successful answer ``{"ok": true, **fields}``."""
    return ApiResponse({"ok": True, **fields})


def _json_field(params: Params, name: str, error: str) -> Any:
    """``params[name]``, decoded when it arrived as a JSON string (form bodies carry JSON that way)."""
    value = params.get(name)
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value else None
    except ValueError:
        raise ApiError(error) from None


def _channel(params: Params) -> str:
    channel = params.get("channel")
    if not isinstance(channel, str) or not channel:
        raise ApiError("channel_not_found")
    return channel


def _text(params: Params, maximum: int) -> str | None:
    """The ``text`` argument or None when absent; ``msg_too_long`` above ``maximum`` characters."""
    text = params.get("text")
    if text is None:
        return None
    if len(str(text)) > maximum:
        raise ApiError("msg_too_long")
    return str(text)


def _blocks(params: Params) -> list[dict] | None:
    """The ``blocks`` argument, validated (see ``limits``) and with ids filled in; None when absent."""
    blocks = _json_field(params, "blocks", "invalid_blocks_format")
    if blocks is None:
        return None
    if not isinstance(blocks, list):
        raise ApiError("invalid_blocks_format")
    problems = check_blocks(blocks)
    if problems:
        raise ApiError("invalid_blocks", response_metadata={"messages": problems})
    if blocks_text_length(blocks) > MAX_BLOCKS_TOTAL_TEXT:
        raise ApiError("msg_blocks_too_long")
    return fill_ids(blocks)


def _content(params: Params, max_text: int) -> tuple[str, list[dict]]:
    """``(text, blocks)`` of a new message; ``no_text`` when both are missing or empty."""
    text, blocks = _text(params, max_text), _blocks(params)
    if not text and not blocks:
        raise ApiError("no_text")
    return text or "", blocks or []


def _metadata(params: Params) -> dict | None:
    """Message metadata ``{"event_type": str, "event_payload": dict}`` or None.

    https://docs.slack.dev/messaging/message-metadata ; malformed → ``invalid_metadata_format``.
    """
    metadata = _json_field(params, "metadata", "invalid_metadata_format")
    if metadata is None:
        return None
    if not (
        isinstance(metadata, dict)
        and isinstance(metadata.get("event_type"), str)
        and isinstance(metadata.get("event_payload", {}), dict)
    ):
        raise ApiError("invalid_metadata_format")
    return metadata


def auth_test(sb: Sandbox, params: Params) -> ApiResponse:
    """auth.test: who the token belongs to. https://docs.slack.dev/reference/methods/auth.test"""
    return ok(
        url=f"{sb.base_url or UNSERVED_BASE_URL}/",
        team=TEAM_NAME,
        team_id=sb.team_id,
        user=BOT_NAME,
        user_id=BOT_USER_ID,
        bot_id=BOT_ID,
        is_enterprise_install=False,
    )


def chat_post_message(sb: Sandbox, params: Params) -> ApiResponse:
    """chat.postMessage: ``channel`` plus ``text`` and/or ``blocks``, optional ``metadata`` and ``thread_ts``.

    https://docs.slack.dev/reference/methods/chat.postMessage . Answers ``{"channel", "ts", "message"}``.
    """
    channel = _channel(params)
    text, blocks = _content(params, MAX_MESSAGE_TEXT)
    record = sb.state.add_message(
        channel, text, blocks, metadata=_metadata(params), thread_ts=params.get("thread_ts") or None
    )
    return ok(channel=channel, ts=record["ts"], message=slack_message(record, sb.team_id))


def chat_update(sb: Sandbox, params: Params) -> ApiResponse:
    """chat.update: rewrite a message the bot posted. https://docs.slack.dev/reference/methods/chat.update

    Sending ``text`` without ``blocks`` drops the old blocks. Omitted ``text`` keeps the old text, and
    omitted ``metadata`` keeps the old metadata. ``text`` is limited to ``MAX_UPDATE_TEXT``. Errors:
    ``message_not_found``, ``cant_update_message`` (another poster's message; see
    https://docs.slack.dev/messaging/modifying-messages), ``no_text``.
    """
    channel = _channel(params)
    record = sb.state.messages.get((channel, str(params.get("ts") or "")))
    if record is None:
        raise ApiError("message_not_found")
    if record["user"] != BOT_USER_ID:
        raise ApiError("cant_update_message")
    text, blocks, metadata = _text(params, MAX_UPDATE_TEXT), _blocks(params), _metadata(params)
    if text is None and blocks is None and metadata is None:
        raise ApiError("no_text")
    if text is not None or blocks is not None:
        record.update(text=record["text"] if text is None else text, blocks=blocks or [])
    if metadata is not None:
        record["metadata"] = metadata
    record["edited"] = True
    return ok(
        channel=channel, ts=record["ts"], text=record["text"], message=slack_message(record, sb.team_id)
    )


def chat_post_ephemeral(sb: Sandbox, params: Params) -> ApiResponse:
    """chat.postEphemeral: a message only ``user`` sees in ``channel``; answers ``{"message_ts"}``.

    https://docs.slack.dev/reference/methods/chat.postEphemeral . Unknown user → ``user_not_found``.
    """
    channel = _channel(params)
    user = params.get("user")
    if user not in sb.users:
        raise ApiError("user_not_found")
    text, blocks = _content(params, MAX_MESSAGE_TEXT)
    return ok(message_ts=sb.state.add_ephemeral(channel, user, text, blocks))


def users_info(sb: Sandbox, params: Params) -> ApiResponse:
    """users.info: a directory entry; unknown id → ``user_not_found``.

    https://docs.slack.dev/reference/methods/users.info . The ``user`` object is
    ``{"id", "name", "real_name", "team_id", "is_bot", "deleted", "profile": {"display_name", "real_name"}}``.
    """
    user_id = params.get("user")
    if user_id not in sb.users:
        raise ApiError("user_not_found")
    name = sb.users[user_id]
    profile = {"display_name": name, "real_name": name}
    user = {"id": user_id, "name": name, "real_name": name, "team_id": sb.team_id, "profile": profile}
    return ok(user={**user, "is_bot": False, "deleted": False})


METHODS: dict[str, Method] = {
    "auth.test": auth_test,
    "chat.postMessage": chat_post_message,
    "chat.update": chat_update,
    "chat.postEphemeral": chat_post_ephemeral,
    "users.info": users_info,
}


def parse_params(content_type: str, body: bytes, query: str = "") -> Params:
    """Merge the query string and a form or JSON body into one dict (first value of repeated form keys).

    Bad JSON → ``invalid_json``, a JSON body that is not an object → ``json_not_object``.
    """
    params: Params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    if "json" in content_type.lower():
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            raise ApiError("invalid_json") from None
        if not isinstance(data, dict):
            raise ApiError("json_not_object")
        return {**params, **data}
    form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {**params, **{key: values[0] for key, values in form.items()}}


def _token(authorization: str, params: Params) -> str | None:
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return params.get("token") or None


def handle(
    sb: Sandbox, method: str, *, content_type: str, body: bytes, query: str, authorization: str
) -> ApiResponse:
    """Answer one Web API call to ``/api/<method>``.

    The token comes from ``Authorization: Bearer <token>`` or a ``token`` argument: missing → ``not_authed``,
    not a bot token (``xoxb-``) → ``invalid_auth``. https://docs.slack.dev/authentication/tokens
    """
    handler = METHODS.get(method)
    if handler is None:
        return ApiResponse({"ok": False, "error": "unknown_method"}, status=404)
    try:
        params = parse_params(content_type, body, query)
        token = _token(authorization, params)
        if token is None:
            raise ApiError("not_authed")
        if not str(token).startswith("xoxb-"):
            raise ApiError("invalid_auth")
        with sb.state.lock:
            return handler(sb, params)
    except ApiError as error:
        return error.response


def _flag(params: Params, name: str) -> bool:
    return params.get(name) in (True, "true", "1")


def _respond_to(sb: Sandbox, channel: str, ts: str, user: str, params: Params) -> None:
    if _flag(params, "delete_original"):
        sb.state.messages.pop((channel, ts), None)
        return
    text, blocks = _content(params, MAX_MESSAGE_TEXT)
    if _flag(params, "replace_original"):
        record = sb.state.messages.get((channel, ts))
        if record is None:
            raise ApiError("message_not_found", status=404)
        record.update(text=text, blocks=blocks, edited=True)
    elif params.get("response_type") == "in_channel":
        sb.state.add_message(channel, text, blocks, thread_ts=params.get("thread_ts") or None)
    else:
        sb.state.add_ephemeral(channel, user, text, blocks)


def respond(sb: Sandbox, key: str, params: Params) -> ApiResponse:
    """Answer a POST to a payload's ``response_url`` (``/_sandbox/response/<key>``).

    Follows https://docs.slack.dev/messaging/modifying-messages : ``delete_original`` deletes the card,
    ``replace_original`` rewrites it, ``response_type: "in_channel"`` posts a new message, and anything
    else posts an ephemeral to the user who clicked. Unknown key → HTTP 404 ``expired_url``. Slack's
    5-uses-in-30-minutes budget is not enforced yet.
    """
    try:
        with sb.state.lock:
            target = sb.state.response_urls.get(key)
            if target is None:
                raise ApiError("expired_url", status=404)
            _respond_to(sb, *target, params)
    except ApiError as error:
        return error.response
    return ok()
