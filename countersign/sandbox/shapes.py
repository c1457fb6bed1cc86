"""Stored messages and views in the shape Slack's Web API returns them (and payloads carry them)."""

from __future__ import annotations

import copy
import secrets
import time

from countersign.sandbox.identity import API_APP_ID, BOT_ID, BOT_USER_ID
from countersign.sandbox.types import Json, MessageRecord


def slack_message(record: MessageRecord, team_id: str, *, include_metadata: bool = True) -> Json:
    """A stored message in the shape Slack's API returns it (``type``, ``user``, ``bot_id``, ``ts``, ...).

    ``metadata`` is included when the message has some and ``include_metadata`` is true.
    """
    message: Json = {
        "type": "message",
        "user": record["user"],
        "ts": record["ts"],
        "text": record["text"],
        "blocks": copy.deepcopy(record["blocks"]),
        "team": team_id,
    }
    if record["user"] == BOT_USER_ID:
        message["bot_id"] = BOT_ID
    if record["thread_ts"]:
        message["thread_ts"] = record["thread_ts"]
    if record["metadata"] and include_metadata:
        message["metadata"] = copy.deepcopy(record["metadata"])
    return message


def slack_view(
    view: Json,
    *,
    view_id: str,
    team_id: str,
    root_view_id: str,
    previous_view_id: str | None,
    values: dict[str, dict[str, Json]],
) -> Json:
    """A validated modal (see ``modals.decode_view``) in the shape views.* return it, with a new ``hash``.

    Fields as in https://docs.slack.dev/reference/views/modal-views plus Slack's bookkeeping (``id``,
    ``team_id``, ``state``, ``hash``, ``root_view_id``, ``previous_view_id``, ``app_id``, ``bot_id``).
    """
    return {
        "id": view_id,
        "team_id": team_id,
        "type": view["type"],
        "blocks": view["blocks"],
        "private_metadata": view.get("private_metadata", ""),
        "callback_id": view.get("callback_id", ""),
        "state": {"values": values},
        "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
        "title": view["title"],
        "clear_on_close": view.get("clear_on_close", False),
        "notify_on_close": view.get("notify_on_close", False),
        "close": view.get("close"),
        "submit": view.get("submit"),
        "previous_view_id": previous_view_id,
        "root_view_id": root_view_id,
        "app_id": API_APP_ID,
        "external_id": view.get("external_id", ""),
        "app_installed_team_id": team_id,
        "bot_id": BOT_ID,
    }
