"""Reading what Slack sends: the few fields of a button click or a modal submit countersign uses.

The guard (`bot.guard`) has already refused bodies without the shape Slack always sends (a `user`
with an id, a non-empty `actions` list, a `view` with a `callback_id`); what remains may still
carry odd values in the fields read here, and each is read defensively: a malformed request id
becomes "" (a request countersign does not know), a malformed input value None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..router.cards import shown as shown_of
from ..store import Decider

MAX_REQUEST_ID = 64  # longer than any id countersign issues (26-character ULIDs)

Where = Literal["card", "home"]
"""The surface a reviewer acted on: a card in a channel, or their App Home tab."""


@dataclass(frozen=True)
class Click:
    """A `block_actions` click on one of a card's buttons, or the same button on the App Home tab
    (`where`); `shown`, what the clicker was shown (`shown`)."""

    action_id: str
    request_id: str
    user: Decider
    channel: str | None
    trigger_id: str
    where: Where = "card"
    shown: dict[str, str | None] | None = None


@dataclass(frozen=True)
class ViewSubmission:
    """A `view_submission` of one of countersign's modals: `values` is `{block_id: typed text}`;
    `where` the surface whose button opened it (`metadata`); `shown`, the modal as the submitter
    saw it (`shown`)."""

    request_id: str
    user: Decider
    values: dict[str, str | None]
    where: Where = "card"
    shown: dict[str, str | None] | None = None


def user(body: dict[str, Any]) -> Decider:
    """Who acted: their Slack user id and the name Slack sends with it (username, else name, else id)."""
    who = body["user"]
    return {"slack_user_id": who["id"], "name": who.get("username") or who.get("name") or who["id"]}


def click(body: dict[str, Any]) -> Click:
    """The first action of a `block_actions` body (countersign's buttons carry the request id as
    their `value`); from a view's button (`container.type` `view`: the Home tab) `where` is `home`."""
    action = body["actions"][0]
    container = body.get("container") or {}
    return Click(
        action_id=action["action_id"],
        request_id=_request_id(action.get("value")),
        user=user(body),
        channel=(body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id"),
        trigger_id=str(body.get("trigger_id") or ""),
        where="home" if container.get("type") == "view" else "card",
        shown=shown(body),
    )


def view_submission(body: dict[str, Any]) -> ViewSubmission:
    """A modal submit: the request id its `private_metadata` carries (with where the modal was
    opened from, `metadata`), who submitted, what they typed."""
    metadata = body["view"].get("private_metadata")
    request_id, _, where = metadata.partition(" ") if isinstance(metadata, str) else ("", "", "")
    return ViewSubmission(
        request_id=_request_id(request_id),
        user=user(body),
        values=_values(body["view"].get("state")),
        where="home" if where == "home" else "card",
        shown=shown(body),
    )


def shown(body: dict[str, Any]) -> dict[str, str | None] | None:
    """What the reviewer was shown when they acted, as Slack sent it with the interaction, for the
    decision's audit event: `cards.shown` of the surface — `{"text", "blocks_sha256"}` of the
    `message` a `block_actions` click on a card carries (its `text` and `blocks`), or of the `view`
    a click on the Home tab or a modal's `view_submission` carries (a view has no `text`: null; and
    `"view"`: its type, `home` or `modal`). Payload shapes:
    https://docs.slack.dev/reference/interaction-payloads/block_actions-payload and
    https://docs.slack.dev/reference/interaction-payloads/view-interactions-payload . None when
    the body carries neither, or blocks that are not a list or cannot be canonical JSON."""
    message, view = body.get("message"), body.get("view")
    in_message = isinstance(message, dict)
    surface: Any = message if in_message else view if isinstance(view, dict) else {}
    blocks, text = surface.get("blocks"), surface.get("text") if in_message else None
    if not isinstance(blocks, list):
        return None
    try:
        seen = shown_of(text if isinstance(text, str) else None, blocks)
    except ValueError:
        return None
    return seen if in_message else {**seen, "view": str(surface.get("type") or "")}


def metadata(request_id: str, where: Where) -> str:
    """A modal's `private_metadata`: the request id, followed by ` home` when the button that opened
    it was on the Home tab (read back by `view_submission`)."""
    return request_id if where == "card" else f"{request_id} {where}"


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
