"""conversations.*: a channel's history (paged, newest first) and opening DMs with the bot."""

from __future__ import annotations

import base64
import binascii
from decimal import Decimal, InvalidOperation

from countersign.sandbox.shapes import slack_message
from countersign.sandbox.types import MessageRecord
from countersign.sandbox.webapi import arguments
from countersign.sandbox.webapi.answers import ApiError, ApiResponse, ok
from countersign.sandbox.webapi.arguments import Params
from countersign.sandbox.workspace import Workspace

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


def history(ws: Workspace, params: Params) -> ApiResponse:
    """conversations.history: a channel's messages, newest first. https://docs.slack.dev/reference/methods/conversations.history

    Arguments: ``channel``; ``limit`` (default 100, at most 999); ``oldest`` / ``latest`` (ts bounds,
    exclusive unless ``inclusive``); ``cursor`` (a ``response_metadata.next_cursor``);
    ``include_all_metadata`` (``metadata`` appears on messages only when true;
    https://docs.slack.dev/messaging/message-metadata). Thread replies are left out, as in Slack. Answers
    ``{"messages", "has_more", "pin_count", "response_metadata": {"next_cursor"}}``.

    The sandbox has no channel list: any non-empty channel id exists, so a channel with no messages answers
    an empty list (as real Slack does for an existing channel). A missing ``channel``, or a user id (a DM
    is read by its ``D…`` id: ``arguments.channel``), is ``channel_not_found``; use
    ``Sandbox.inject(..., error="channel_not_found")`` to test that answer for a given channel. Bad
    bounds: ``invalid_ts_oldest`` / ``invalid_ts_latest``; bad cursor: ``invalid_cursor``.
    """
    channel = arguments.channel(params)
    try:
        limit = int(params.get("limit") or HISTORY_DEFAULT_LIMIT)
    except (TypeError, ValueError):
        raise ApiError("invalid_limit") from None
    limit = min(limit if limit > 0 else HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT)
    oldest = _ts_bound(params, "oldest", Decimal(0))
    latest = _ts_bound(params, "latest", Decimal("Infinity"))
    inclusive, start = arguments.flag(params, "inclusive"), _cursor(params)

    def wanted(record: MessageRecord) -> bool:
        ts = Decimal(record["ts"])
        in_range = oldest <= ts <= latest if inclusive else oldest < ts < latest
        return record["channel"] == channel and not record["thread_ts"] and in_range

    found = sorted(
        (r for r in ws.state.messages.values() if wanted(r)), key=lambda r: Decimal(r["ts"]), reverse=True
    )
    if start is not None:
        found = [r for r in found if Decimal(r["ts"]) <= start]
    page, rest = found[:limit], found[limit:]
    with_metadata = arguments.flag(params, "include_all_metadata")
    next_cursor = base64.b64encode(f"next_ts:{rest[0]['ts']}".encode()).decode() if rest else ""
    return ok(
        messages=[slack_message(r, ws.team_id, include_metadata=with_metadata) for r in page],
        has_more=bool(rest),
        pin_count=0,
        response_metadata={"next_cursor": next_cursor},
    )


def open_conversation(ws: Workspace, params: Params) -> ApiResponse:
    """conversations.open: a DM (one user) or group DM (several, comma-separated) with the bot; the same
    users always get the same channel id, and a user's DM is the one chat.postMessage to their user id
    lands in (``State.open_dm``). https://docs.slack.dev/reference/methods/conversations.open
    """
    users = [u for u in str(params.get("users") or "").split(",") if u]
    if not users or len(users) > 8:
        raise ApiError("users_list_not_supplied" if not users else "too_many_users")
    if any(u not in ws.users for u in users):
        raise ApiError("user_not_found")
    return ok(channel={"id": ws.state.open_dm(users)})
