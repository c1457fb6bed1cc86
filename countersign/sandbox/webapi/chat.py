"""chat.*: posting, updating and ephemeral messages, with optional per-channel pacing of posts."""

from __future__ import annotations

import math

from countersign.sandbox.identity import BOT_USER_ID
from countersign.sandbox.limits import MAX_MESSAGE_TEXT, MAX_UPDATE_TEXT
from countersign.sandbox.shapes import slack_message
from countersign.sandbox.webapi import arguments
from countersign.sandbox.webapi.answers import ApiError, ApiResponse, ok, ratelimited
from countersign.sandbox.webapi.arguments import Params
from countersign.sandbox.workspace import Workspace


def _pace(ws: Workspace, channel: str) -> None:
    """Per-channel token bucket for chat.postMessage when ``ws.post_rate_per_channel`` is set.

    Slack allows about 1 message per second per channel with short bursts
    (https://docs.slack.dev/apis/web-api/rate-limits): the bucket refills at ``post_rate_per_channel``
    tokens per clock second up to ``post_burst``; an empty bucket answers ``ratelimited`` with
    ``Retry-After`` = whole seconds until the next token (at least 1).
    """
    rate = ws.post_rate_per_channel
    if not rate:
        return
    now = ws.clock()
    tokens, last = ws.state.post_buckets.get(channel, (float(ws.post_burst), now))
    tokens = min(float(ws.post_burst), tokens + max(0.0, now - last) * rate)
    if tokens < 1:
        ws.state.post_buckets[channel] = (tokens, now)
        raise ratelimited(max(1, math.ceil((1 - tokens) / rate)))
    ws.state.post_buckets[channel] = (tokens - 1, now)


def post_message(ws: Workspace, params: Params) -> ApiResponse:
    """chat.postMessage: ``channel`` plus ``text`` and/or ``blocks``, optional ``metadata`` and ``thread_ts``.

    https://docs.slack.dev/reference/methods/chat.postMessage . Answers ``{"channel", "ts", "message"}``.
    With ``Sandbox(post_rate_per_channel=...)`` an over-eager poster gets HTTP 429 (see ``_pace``).
    """
    channel = arguments.channel(params)
    text, blocks = arguments.content(params, MAX_MESSAGE_TEXT)
    _pace(ws, channel)
    record = ws.state.add_message(
        channel,
        text,
        blocks,
        metadata=arguments.metadata(params),
        thread_ts=params.get("thread_ts") or None,
    )
    return ok(channel=channel, ts=record["ts"], message=slack_message(record, ws.team_id))


def update(ws: Workspace, params: Params) -> ApiResponse:
    """chat.update: rewrite a message the bot posted. https://docs.slack.dev/reference/methods/chat.update

    Sending ``text`` without ``blocks`` drops the old blocks. Omitted ``text`` keeps the old text, and
    omitted ``metadata`` keeps the old metadata. ``text`` is limited to ``MAX_UPDATE_TEXT``. Errors:
    ``message_not_found``, ``cant_update_message`` (another poster's message; see
    https://docs.slack.dev/messaging/modifying-messages), ``no_text``.
    """
    channel = arguments.channel(params)
    record = ws.state.messages.get((channel, str(params.get("ts") or "")))
    if record is None:
        raise ApiError("message_not_found")
    if record["user"] != BOT_USER_ID:
        raise ApiError("cant_update_message")
    text = arguments.text(params, MAX_UPDATE_TEXT)
    blocks, metadata = arguments.blocks(params), arguments.metadata(params)
    if text is None and blocks is None and metadata is None:
        raise ApiError("no_text")
    if text is not None or blocks is not None:
        record["text"] = record["text"] if text is None else text
        record["blocks"] = blocks or []
    if metadata is not None:
        record["metadata"] = metadata
    record["edited"] = True
    return ok(
        channel=channel, ts=record["ts"], text=record["text"], message=slack_message(record, ws.team_id)
    )


def post_ephemeral(ws: Workspace, params: Params) -> ApiResponse:
    """chat.postEphemeral: a message only ``user`` sees in ``channel``; answers ``{"message_ts"}``.

    https://docs.slack.dev/reference/methods/chat.postEphemeral . Unknown user → ``user_not_found``.
    """
    channel = arguments.channel(params)
    user = params.get("user")
    if user not in ws.users:
        raise ApiError("user_not_found")
    text, blocks = arguments.content(params, MAX_MESSAGE_TEXT)
    return ok(message_ts=ws.state.add_ephemeral(channel, user, text, blocks))
