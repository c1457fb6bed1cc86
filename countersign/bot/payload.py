"""Reading what Slack sends: the few fields of a button click or a modal submit countersign uses.

The guard (`bot.guard`) has already refused bodies without the shape Slack always sends (a `user`
with an id, a non-empty `actions` list, a `view` with a `callback_id`); what remains may still
carry odd values in the fields read here, and each is read defensively: a malformed request id
becomes "" (a request countersign does not know), a malformed input value None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..store import Decider

MAX_REQUEST_ID = 64  # longer than any id countersign issues (26-character ULIDs)


@dataclass(frozen=True)
class Click:
    """A `block_actions` click on one of a card's buttons."""

    action_id: str
    request_id: str
    user: Decider
    channel: str | None
    trigger_id: str


@dataclass(frozen=True)
class ViewSubmission:
    """A `view_submission` of one of countersign's modals: `values` is `{block_id: typed text}`."""

    request_id: str
    user: Decider
    values: dict[str, str | None]


def user(body: dict[str, Any]) -> Decider:
    """Who acted: their Slack user id and the name Slack sends with it (username, else name, else id)."""
    who = body["user"]
    return {"slack_user_id": who["id"], "name": who.get("username") or who.get("name") or who["id"]}


def click(body: dict[str, Any]) -> Click:
    """The first action of a `block_actions` body (countersign's buttons carry the request id as
    their `value`)."""
    action = body["actions"][0]
    return Click(
        action_id=action["action_id"],
        request_id=_request_id(action.get("value")),
        user=user(body),
        channel=(body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id"),
        trigger_id=str(body.get("trigger_id") or ""),
    )


def view_submission(body: dict[str, Any]) -> ViewSubmission:
    """A modal submit: the request id its `private_metadata` carries, who submitted, what they typed."""
    return ViewSubmission(
        request_id=_request_id(body["view"].get("private_metadata")),
        user=user(body),
        values=_values(body["view"].get("state")),
    )


def _request_id(value: Any) -> str:
    return value if isinstance(value, str) and len(value) <= MAX_REQUEST_ID else ""


def _values(state: Any) -> dict[str, str | None]:
    """`{block_id: typed text}` from a view's `state.values`, ignoring malformed entries."""
    blocks = state.get("values") if isinstance(state, dict) else None
    values: dict[str, str | None] = {}
    for block, elements in blocks.items() if isinstance(blocks, dict) else ():
        element = elements.get("value") if isinstance(elements, dict) else None
        typed = element.get("value") if isinstance(element, dict) else None
        values[block] = typed if isinstance(typed, str) else None
    return values
