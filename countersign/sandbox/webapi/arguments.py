"""Web API arguments: the query string and body of a call as one dict, and the checks methods share.

Slack takes arguments form-encoded or as a JSON body (https://docs.slack.dev/apis/web-api/); form bodies
carry structured arguments (``blocks``, ``metadata``, ``view``) as JSON strings. The checks raise
``ApiError`` with Slack's error code for the argument.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from countersign.sandbox.blocks import fill_ids
from countersign.sandbox.limits import MAX_BLOCKS_TOTAL_TEXT, blocks_text_length, check_blocks
from countersign.sandbox.types import Json
from countersign.sandbox.webapi.answers import ApiError

Params = dict[str, Any]
"""The arguments of one call, as parsed by ``parse_params``."""

#: How user ids start: ``U…``, and ``W…`` for Enterprise Grid's global user ids (the two kinds
#: ``migration.exchange`` maps between: https://docs.slack.dev/reference/methods/migration.exchange).
USER_ID_PREFIXES = ("U", "W")


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


def json_field(params: Params, name: str, error: str) -> Any:
    """``params[name]``, decoded when it arrived as a JSON string (form bodies carry JSON that way)."""
    value = params.get(name)
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value else None
    except ValueError:
        raise ApiError(error) from None


def flag(params: Params, name: str) -> bool:
    """A boolean argument: true for ``true``, ``1`` (as JSON or form text) and ``True``."""
    return params.get(name) in (True, 1, "true", "True", "1")


def is_user_id(value: str) -> bool:
    """Whether ``value`` is a user id: ``U…``, or ``W…`` on Enterprise Grid (not a conversation id)."""
    return value.startswith(USER_ID_PREFIXES)


def channel_or_user(params: Params) -> str:
    """The ``channel`` argument as given, a conversation id or a user id; ``channel_not_found`` when
    it is missing or empty. Only chat.postMessage takes a user id (see ``chat.post_message``)."""
    value = params.get("channel")
    if not isinstance(value, str) or not value:
        raise ApiError("channel_not_found")
    return value


def channel(params: Params) -> str:
    """The ``channel`` argument, a conversation id (``C…``, ``G…``, ``D…``); ``channel_not_found``
    when it is missing, empty or a user id.

    A message is read and edited by the id of the conversation it is in: chat.update and
    conversations.history answer ``channel_not_found`` to the user id a DM was posted with, and take
    the DM's ``D…`` id that chat.postMessage answered (Slack's maintainers in
    https://github.com/slackapi/bolt-python/issues/951 and
    https://github.com/slackapi/python-slack-sdk/issues/528). chat.postEphemeral's ``channel`` is
    documented as a channel, private group or IM channel, not a user
    (https://docs.slack.dev/reference/methods/chat.postEphemeral).
    """
    value = channel_or_user(params)
    if is_user_id(value):
        raise ApiError("channel_not_found")
    return value


def text(params: Params, maximum: int) -> str | None:
    """The ``text`` argument or None when absent; ``msg_too_long`` above ``maximum`` characters."""
    value = params.get("text")
    if value is None:
        return None
    if len(str(value)) > maximum:
        raise ApiError("msg_too_long")
    return str(value)


def blocks(params: Params) -> list[Json] | None:
    """The ``blocks`` argument, validated (see ``limits``) and with ids filled in; None when absent."""
    value = json_field(params, "blocks", "invalid_blocks_format")
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError("invalid_blocks_format")
    problems = check_blocks(value)
    if problems:
        raise ApiError("invalid_blocks", response_metadata={"messages": problems})
    if blocks_text_length(value) > MAX_BLOCKS_TOTAL_TEXT:
        raise ApiError("msg_blocks_too_long")
    return fill_ids(value)


def content(params: Params, max_text: int) -> tuple[str, list[Json]]:
    """``(text, blocks)`` of a new message; ``no_text`` when both are missing or empty."""
    message_text, message_blocks = text(params, max_text), blocks(params)
    if not message_text and not message_blocks:
        raise ApiError("no_text")
    return message_text or "", message_blocks or []


def metadata(params: Params) -> Json | None:
    """Message metadata ``{"event_type": str, "event_payload": dict}`` or None.

    https://docs.slack.dev/messaging/message-metadata ; malformed → ``invalid_metadata_format``.
    """
    value = json_field(params, "metadata", "invalid_metadata_format")
    if value is None:
        return None
    if not (
        isinstance(value, dict)
        and isinstance(value.get("event_type"), str)
        and isinstance(value.get("event_payload", {}), dict)
    ):
        raise ApiError("invalid_metadata_format")
    return value
