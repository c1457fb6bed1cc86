"""chat.*: posting, updating and ephemeral messages, with optional per-channel pacing of posts."""

from __future__ import annotations

from countersign.sandbox import buckets
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
    wait = buckets.take(ws.state.post_buckets, channel, rate, float(ws.post_burst), ws.clock())
    if wait:
        raise ratelimited(wait)


def _destination(ws: Workspace, params: Params) -> str:
    """The conversation a new message goes to: ``channel``, or for a user id the bot's DM with that user.

    chat.postMessage takes a user id as ``channel`` and posts to the app's DM with that person, opening
    it if need be; its answer's ``channel`` is then the DM's ``D…`` id, which later calls on the message
    need (https://docs.slack.dev/reference/methods/chat.postMessage, the ``channel`` argument and its
    response; Slack's maintainer in https://github.com/slackapi/bolt-python/issues/951). A user id of
    nobody in the workspace is ``channel_not_found``.
    """
    target = arguments.channel_or_user(params)
    if not arguments.is_user_id(target):
        return target
    if target not in ws.users:
        raise ApiError("channel_not_found")
    return ws.state.open_dm([target])


def post_message(ws: Workspace, params: Params) -> ApiResponse:
    """chat.postMessage: ``channel`` (a conversation or a user id) plus ``text`` and/or ``blocks``,
    optional ``metadata`` and ``thread_ts``.

    https://docs.slack.dev/reference/methods/chat.postMessage . Answers ``{"channel", "ts", "message"}``,
    ``channel`` being the conversation the message went to (a DM's ``D…`` id for a user id: see
    ``_destination``). With ``Sandbox(post_rate_per_channel=...)`` an over-eager poster gets HTTP 429
    (see ``_pace``).
    """
    channel = _destination(ws, params)
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
    https://docs.slack.dev/messaging/modifying-messages), ``no_text``, and ``channel_not_found`` for a
    user id: a DM's message is edited by the DM's ``D…`` id (``arguments.channel``).
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

    https://docs.slack.dev/reference/methods/chat.postEphemeral : ``channel`` is a conversation id (a
    user id is ``channel_not_found``: ``arguments.channel``) and ``user`` must be in it. Unknown user →
    ``user_not_found``; a user outside a DM or group DM the bot opened, or outside a channel whose
    members the workspace lists (``Workspace.channel_members``) → ``user_not_in_channel`` (a channel
    not listed takes anyone).
    """
    channel = arguments.channel(params)
    user = params.get("user")
    if user not in ws.users:
        raise ApiError("user_not_found")
    members = ws.state.dms.get(channel, ws.channel_members.get(channel))
    if members is not None and user not in members:
        raise ApiError("user_not_in_channel")
    text, blocks = arguments.content(params, MAX_MESSAGE_TEXT)
    return ok(message_ts=ws.state.add_ephemeral(channel, user, text, blocks))
