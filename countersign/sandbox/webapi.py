"""The Slack Web API methods the sandbox serves, as a dispatch table of small functions.

Every method answers as Slack does (https://docs.slack.dev/apis/web-api/): HTTP 200 with
``{"ok": true, ...}`` or ``{"ok": false, "error": "<code>"}``. An unknown method gets HTTP 404 with
``unknown_method``. To add a method, write ``def handler(sb, params) -> ApiResponse`` and register it in
``METHODS``. Handlers run while holding ``sb.state.lock`` and signal errors by raising ``ApiError`` (or
``modals.ViewError`` for views.*). ``ApiResponse`` carries a status and headers so handlers can also
answer 429 with ``Retry-After``.

``handle`` records every call (``Sandbox.calls``) and applies faults queued by ``Sandbox.inject`` before
running the handler.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from countersign.sandbox.blocks import fill_ids
from countersign.sandbox.core import (
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    TEAM_NAME,
    UNSERVED_BASE_URL,
    slack_message,
)
from countersign.sandbox.limits import (
    MAX_BLOCKS_TOTAL_TEXT,
    MAX_MESSAGE_TEXT,
    MAX_UPDATE_TEXT,
    blocks_text_length,
    check_blocks,
)
from countersign.sandbox.modals import ViewError, decode_view

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
    """Raised by a handler to answer ``{"ok": false, "error": error, **extra}`` with status and headers."""

    def __init__(
        self, error: str, status: int = 200, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(error)
        self.response = ApiResponse({"ok": False, "error": error, **extra}, status, headers or {})


def ratelimited(retry_after_s: int) -> ApiError:
    """Slack's rate-limit answer: HTTP 429, ``Retry-After: <seconds>``, ``{"ok": false, "error":
    "ratelimited"}``. https://docs.slack.dev/apis/web-api/rate-limits"""
    return ApiError("ratelimited", status=429, headers={"Retry-After": str(retry_after_s)})


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


def _pace(sb: Sandbox, channel: str) -> None:
    """Per-channel token bucket for chat.postMessage when ``sb.post_rate_per_channel`` is set.

    Slack allows about 1 message per second per channel with short bursts
    (https://docs.slack.dev/apis/web-api/rate-limits): the bucket refills at ``post_rate_per_channel``
    tokens per clock second up to ``post_burst``; an empty bucket answers ``ratelimited`` with
    ``Retry-After`` = whole seconds until the next token (at least 1).
    """
    rate = sb.post_rate_per_channel
    if not rate:
        return
    now = sb.clock()
    tokens, last = sb.state.post_buckets.get(channel, (float(sb.post_burst), now))
    tokens = min(float(sb.post_burst), tokens + max(0.0, now - last) * rate)
    if tokens < 1:
        sb.state.post_buckets[channel] = (tokens, now)
        raise ratelimited(max(1, math.ceil((1 - tokens) / rate)))
    sb.state.post_buckets[channel] = (tokens - 1, now)


def chat_post_message(sb: Sandbox, params: Params) -> ApiResponse:
    """chat.postMessage: ``channel`` plus ``text`` and/or ``blocks``, optional ``metadata`` and ``thread_ts``.

    https://docs.slack.dev/reference/methods/chat.postMessage . Answers ``{"channel", "ts", "message"}``.
    With ``Sandbox(post_rate_per_channel=...)`` an over-eager poster gets HTTP 429 (see ``_pace``).
    """
    channel = _channel(params)
    text, blocks = _content(params, MAX_MESSAGE_TEXT)
    _pace(sb, channel)
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


#: conversations.history: default and largest page size. https://docs.slack.dev/reference/methods/conversations.history
HISTORY_DEFAULT_LIMIT = 100
HISTORY_MAX_LIMIT = 999


def _ts_bound(params: Params, name: str, default: Decimal) -> Decimal:
    value = params.get(name)
    if value in (None, ""):
        return default
    try:
        return Decimal(str(value))
    except InvalidOperation:
        raise ApiError(f"invalid_ts_{name}") from None


def _cursor(params: Params) -> Decimal | None:
    """The ts a ``next_cursor`` points at (base64 of ``"next_ts:<ts>"``, like Slack's); None for no cursor."""
    cursor = params.get("cursor")
    if not cursor:
        return None
    try:
        prefix, _, ts = base64.b64decode(str(cursor), validate=True).decode().partition(":")
        if prefix != "next_ts":
            raise ValueError(prefix)
        return Decimal(ts)
    except (ValueError, binascii.Error, InvalidOperation):
        raise ApiError("invalid_cursor") from None


def conversations_history(sb: Sandbox, params: Params) -> ApiResponse:
    """conversations.history: a channel's messages, newest first. https://docs.slack.dev/reference/methods/conversations.history

    Arguments: ``channel``; ``limit`` (default 100, at most 999); ``oldest`` / ``latest`` (ts bounds,
    exclusive unless ``inclusive``); ``cursor`` (a ``response_metadata.next_cursor``);
    ``include_all_metadata`` (``metadata`` appears on messages only when true;
    https://docs.slack.dev/messaging/message-metadata). Thread replies are left out, as in Slack. Answers
    ``{"messages", "has_more", "pin_count", "response_metadata": {"next_cursor"}}``.

    The sandbox has no channel list: any non-empty channel id exists, so a channel with no messages answers
    an empty list (as real Slack does for an existing channel). A missing ``channel`` is
    ``channel_not_found``; use ``Sandbox.inject(..., error="channel_not_found")`` to test that answer for a
    given channel. Bad bounds: ``invalid_ts_oldest`` / ``invalid_ts_latest``; bad cursor: ``invalid_cursor``.
    """
    channel = _channel(params)
    try:
        limit = int(params.get("limit") or HISTORY_DEFAULT_LIMIT)
    except (TypeError, ValueError):
        raise ApiError("invalid_limit") from None
    limit = min(limit if limit > 0 else HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT)
    oldest = _ts_bound(params, "oldest", Decimal(0))
    latest = _ts_bound(params, "latest", Decimal("Infinity"))
    inclusive, start = _flag(params, "inclusive"), _cursor(params)

    def wanted(record: dict) -> bool:
        ts = Decimal(record["ts"])
        in_range = oldest <= ts <= latest if inclusive else oldest < ts < latest
        return record["channel"] == channel and not record["thread_ts"] and in_range

    found = sorted(
        (r for r in sb.state.messages.values() if wanted(r)), key=lambda r: Decimal(r["ts"]), reverse=True
    )
    if start is not None:
        found = [r for r in found if Decimal(r["ts"]) <= start]
    page, rest = found[:limit], found[limit:]
    with_metadata = _flag(params, "include_all_metadata")
    next_cursor = base64.b64encode(f"next_ts:{rest[0]['ts']}".encode()).decode() if rest else ""
    return ok(
        messages=[slack_message(r, sb.team_id, include_metadata=with_metadata) for r in page],
        has_more=bool(rest),
        pin_count=0,
        response_metadata={"next_cursor": next_cursor},
    )


def views_open(sb: Sandbox, params: Params) -> ApiResponse:
    """views.open: open a modal for the user whose interaction issued ``trigger_id``.

    https://docs.slack.dev/reference/methods/views.open . ``view`` is a dict or JSON string, checked by
    ``modals.decode_view`` (``invalid_arguments`` with ``response_metadata.messages``, ``view_too_large``)
    before the trigger is used, so a refused view leaves the trigger usable. Then the trigger must be
    known, unused and at most ``sb.trigger_ttl_s`` seconds old (``invalid_trigger_id``,
    ``exchanged_trigger_id``, ``expired_trigger_id``;
    https://docs.slack.dev/tools/bolt-python/concepts/opening-modals). Answers ``{"view": {..., "id",
    "hash", "state": {"values": {}}, "team_id", "app_id"}}``. A modal the user already had open is
    replaced (see ``State.open_view``).
    """
    if not params.get("trigger_id"):
        raise ViewError("invalid_arguments", ["[ERROR] missing required field: trigger_id"])
    view = decode_view(params.get("view"))
    trigger = sb.state.exchange_trigger(params["trigger_id"], sb.clock(), sb.trigger_ttl_s)
    return ok(view=sb.state.open_view(trigger["user"], view, sb.team_id)["view"])


def views_push(sb: Sandbox, params: Params) -> ApiResponse:
    """views.push: put a view on top of the open modal of the user who issued ``trigger_id``.

    https://docs.slack.dev/reference/methods/views.push . Checks as views.open, then ``not_found`` when
    that user has no open modal (sandbox choice) and ``push_limit_reached`` above root + 2 views.
    """
    if not params.get("trigger_id"):
        raise ViewError("invalid_arguments", ["[ERROR] missing required field: trigger_id"])
    view = decode_view(params.get("view"))
    trigger = sb.state.exchange_trigger(params["trigger_id"], sb.clock(), sb.trigger_ttl_s)
    return ok(view=sb.state.push_view(trigger["user"], view, sb.team_id)["view"])


def views_update(sb: Sandbox, params: Params) -> ApiResponse:
    """views.update: replace an open view, found by ``view_id`` or else ``external_id``.

    https://docs.slack.dev/reference/methods/views.update . Needs no trigger. ``hash`` (optional) must be
    the view's current hash, else ``hash_conflict``; an unknown or closed view is ``not_found``; the view
    is checked as in views.open. Answers ``{"view"}`` with the same id and a new hash.
    """
    if not params.get("view_id") and not params.get("external_id"):
        raise ViewError("invalid_arguments", ["[ERROR] view_id or external_id is required"])
    view = decode_view(params.get("view"))
    record = sb.state.find_view(params.get("view_id"), params.get("external_id"))
    return ok(view=sb.state.update_view(record, view, sb.team_id, params.get("hash") or None)["view"])


def usergroups_users_list(sb: Sandbox, params: Params) -> ApiResponse:
    """usergroups.users.list: the member ids of ``usergroup``; an unknown group → ``no_such_subteam``.

    https://docs.slack.dev/reference/methods/usergroups.users.list
    """
    group = params.get("usergroup")
    if group not in sb.usergroups:
        raise ApiError("no_such_subteam")
    return ok(users=list(sb.usergroups[group]))


def conversations_open(sb: Sandbox, params: Params) -> ApiResponse:
    """conversations.open: a DM (one user) or group DM (several, comma-separated) with the bot; the same
    users always get the same channel id. https://docs.slack.dev/reference/methods/conversations.open
    """
    users = sorted(u for u in str(params.get("users") or "").split(",") if u)
    if not users or len(users) > 8:
        raise ApiError("users_list_not_supplied" if not users else "too_many_users")
    if any(u not in sb.users for u in users):
        raise ApiError("user_not_found")
    prefix = "D" if len(users) == 1 else "G"
    return ok(channel={"id": prefix + "".join(u.removeprefix("U") for u in users)[:20]})


METHODS: dict[str, Method] = {
    "auth.test": auth_test,
    "chat.postMessage": chat_post_message,
    "chat.update": chat_update,
    "chat.postEphemeral": chat_post_ephemeral,
    "conversations.history": conversations_history,
    "conversations.open": conversations_open,
    "users.info": users_info,
    "usergroups.users.list": usergroups_users_list,
    "views.open": views_open,
    "views.push": views_push,
    "views.update": views_update,
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


def _fault_response(fault: dict[str, Any]) -> ApiResponse | None:
    """The answer an injected fault gives instead of running the method; None for a pure delay."""
    status, error, retry_after = fault["status"], fault["error"], fault["retry_after"]
    if status == 429:
        return ApiError(
            error or "ratelimited",
            429,
            headers={"Retry-After": str(1 if retry_after is None else retry_after)},
        ).response
    if status == 200 and error is None:
        return None
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return ApiError(error or "internal_error", status, headers=headers).response


def _answer(sb: Sandbox, method: str, params: Params, authorization: str) -> ApiResponse:
    handler = METHODS.get(method)
    if handler is None:
        return ApiResponse({"ok": False, "error": "unknown_method"}, status=404)
    token = _token(authorization, params)
    if token is None:
        raise ApiError("not_authed")
    if not str(token).startswith("xoxb-"):
        raise ApiError("invalid_auth")
    with sb.state.lock:
        fault = sb.state.take_fault(method)
    if fault is not None:
        if fault["delay_s"]:
            time.sleep(fault["delay_s"])
        response = _fault_response(fault)
        if response is not None:
            return response
    with sb.state.lock:
        try:
            return handler(sb, params)
        except ViewError as error:
            extra = {"response_metadata": {"messages": error.messages}} if error.messages else {}
            raise ApiError(error.error, **extra) from None


def handle(
    sb: Sandbox, method: str, *, content_type: str, body: bytes, query: str, authorization: str
) -> ApiResponse:
    """Answer one Web API call to ``/api/<method>`` and record it (``Sandbox.calls``).

    The token comes from ``Authorization: Bearer <token>`` or a ``token`` argument: missing → ``not_authed``,
    not a bot token (``xoxb-``) → ``invalid_auth`` (https://docs.slack.dev/authentication/tokens). An
    unknown method is HTTP 404 ``unknown_method``. A fault queued by ``Sandbox.inject`` is applied after
    the token check, before the method runs.
    """
    try:
        params = parse_params(content_type, body, query)
    except ApiError as error:
        params, response = {}, error.response
    else:
        response = None
    with sb.state.lock:
        recorded = {k: v for k, v in params.items() if k != "token"}
        call = sb.state.record_call(method, recorded, sb.clock())
    if response is None:
        try:
            response = _answer(sb, method, params, authorization)
        except ApiError as error:
            response = error.response
    with sb.state.lock:
        call.update(
            status=response.status, error=None if response.body.get("ok") else response.body.get("error")
        )
    return response


def _flag(params: Params, name: str) -> bool:
    return params.get(name) in (True, 1, "true", "True", "1")


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
