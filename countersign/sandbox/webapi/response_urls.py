"""The ``response_url`` of a click: POSTs to it replace, delete or answer the message clicked on."""

from __future__ import annotations

from countersign.sandbox.limits import MAX_MESSAGE_TEXT
from countersign.sandbox.webapi import arguments
from countersign.sandbox.webapi.answers import ApiError, ApiResponse, ok
from countersign.sandbox.webapi.arguments import Params
from countersign.sandbox.workspace import Workspace


def _respond_to(ws: Workspace, channel: str, ts: str, user: str, params: Params) -> None:
    if arguments.flag(params, "delete_original"):
        ws.state.messages.pop((channel, ts), None)
        return
    text, blocks = arguments.content(params, MAX_MESSAGE_TEXT)
    if arguments.flag(params, "replace_original"):
        record = ws.state.messages.get((channel, ts))
        if record is None:
            raise ApiError("message_not_found", status=404)
        record["text"] = text
        record["blocks"] = blocks
        record["edited"] = True
    elif params.get("response_type") == "in_channel":
        ws.state.add_message(channel, text, blocks, thread_ts=params.get("thread_ts") or None)
    else:
        ws.state.add_ephemeral(channel, user, text, blocks)


def respond(ws: Workspace, key: str, params: Params) -> ApiResponse:
    """Answer a POST to a payload's ``response_url`` (``/_sandbox/response/<key>``).

    Follows https://docs.slack.dev/messaging/modifying-messages : ``delete_original`` deletes the card,
    ``replace_original`` rewrites it, ``response_type: "in_channel"`` posts a new message, and anything
    else posts an ephemeral to the user who clicked. An unknown key, a sixth use or one more than 30
    minutes after the click (``state.ResponseUrl``) → HTTP 404 ``expired_url`` (what Slack answers past
    the budget is not documented; the sandbox answers as for an expired URL).
    """
    try:
        with ws.state.lock:
            target = ws.state.response_urls.get(key)
            if target is None or not target.use(ws.clock()):
                raise ApiError("expired_url", status=404)
            _respond_to(ws, target.channel, target.ts, target.user, params)
    except ApiError as error:
        return error.response
    return ok()
