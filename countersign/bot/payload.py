"""Reading what Slack sends: the few fields of a button click or a modal submit countersign uses.

The guard (`bot.guard`) has already refused bodies without the shape Slack always sends (a `user`
with an id, a non-empty `actions` list, a `view` with a `callback_id`); what remains may still
carry odd values in the fields read here, and each is read defensively: a malformed request id
becomes "" (a request countersign does not know), a malformed input value None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from ..router import cards, inbox
from ..router.texts import clip
from ..store import Decider

MAX_REQUEST_ID = 64  # longer than any id countersign issues (26-character ULIDs)
MAX_PRIVATE_METADATA = 3000  # characters of a view's private_metadata (reference/slack.md, modal views)

Where = Literal["card", "home"]
"""The surface a reviewer acted on: a card in a channel, or their App Home tab."""


@dataclass(frozen=True)
class Click:
    """A `block_actions` click on one of a card's buttons, or the same button on the App Home tab
    (`where`); `shown`, what the clicker was shown of the request (`shown`)."""

    action_id: str
    request_id: str
    user: Decider
    channel: str | None
    trigger_id: str
    where: Where = "card"
    shown: cards.Shown | None = None


@dataclass(frozen=True)
class ViewSubmission:
    """A `view_submission` of one of countersign's modals: `values` is `{block_id: typed text}`;
    `where` the surface whose button opened it and what that surface `shown` of the request
    (`metadata`)."""

    request_id: str
    user: Decider
    values: dict[str, str | None]
    where: Where = "card"
    shown: cards.Shown | None = None


def user(body: dict[str, Any]) -> Decider:
    """Who acted: their Slack user id and the name Slack sends with it (username, else name, else id)."""
    who = body["user"]
    return {"slack_user_id": who["id"], "name": who.get("username") or who.get("name") or who["id"]}


def click(body: dict[str, Any]) -> Click:
    """The first action of a `block_actions` body (countersign's buttons carry the request id as
    their `value`); from a view's button (`container.type` `view`: the Home tab) `where` is `home`."""
    action = body["actions"][0]
    container = body.get("container") or {}
    request_id = _request_id(action.get("value"))
    return Click(
        action_id=action["action_id"],
        request_id=request_id,
        user=user(body),
        channel=(body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id"),
        trigger_id=str(body.get("trigger_id") or ""),
        where="home" if container.get("type") == "view" else "card",
        shown=shown(body, request_id),
    )


def view_submission(body: dict[str, Any]) -> ViewSubmission:
    """A modal submit: the request id its `private_metadata` carries, with where the modal was
    opened from and what was shown there (`metadata`), who submitted, what they typed. Metadata of
    the older form, `"<id>"` or `"<id> home"`, carries no `shown`."""
    carried = body["view"].get("private_metadata")
    request_id, where, seen = _carried(carried) if isinstance(carried, str) else ("", "card", None)
    return ViewSubmission(
        request_id=_request_id(request_id),
        user=user(body),
        values=_values(body["view"].get("state")),
        where="home" if where == "home" else "card",
        shown=seen,
    )


def shown(body: dict[str, Any], request_id: str) -> cards.Shown | None:
    """What a click's reviewer was shown of request `request_id`, as Slack sent it with the click
    (https://docs.slack.dev/reference/interaction-payloads/block_actions-payload), for the
    decision's audit event (`cards.shown_in`, the function `card_posted` and `card_updated` are
    written with): on a card, the `message` the click carries (its `text` and `blocks`, so the
    hash is that of the card version clicked); on the Home tab, only the request's own entry in
    the `view` the click carries (`inbox.home_entry`: the blocks naming it, and the text they show;
    not the other requests listed), with `"view": "home"`. None when the body carries neither, or
    no such blocks."""
    message, view = body.get("message"), body.get("view")
    if isinstance(message, dict):
        return cards.shown_in(message)
    if not isinstance(view, dict) or view.get("type") != "home" or not isinstance(view.get("blocks"), list):
        return None
    entry = inbox.home_entry(request_id, view["blocks"])
    seen = cards.shown_in({"blocks": entry}) if entry else None
    return None if seen is None else {**seen, "view": "home"}


def metadata(request_id: str, where: Where, seen: cards.Shown | None) -> str:
    """A Reject / Edit modal's `private_metadata`: ASCII JSON `{"id", "where", "shown"}` — the
    request id, the surface whose button opened it and what the reviewer was shown there (the
    click's `shown`: its text and hash, never the blocks), read back by `view_submission`, so the
    decision audits what the reviewer clicked on, not the modal. Slack keeps at most
    `MAX_PRIVATE_METADATA` characters (https://docs.slack.dev/reference/views/modal-views); ASCII
    JSON is as long in characters, bytes or UTF-16 units, whichever Slack counts. When it would be
    longer, the text is cut (`texts.clip`, ending in "…") until it fits; the hash stays whole."""
    text = seen.get("text") if seen else None
    while True:
        carried = {"id": request_id, "where": where, "shown": seen and {**seen, "text": text}}
        encoded = json.dumps(carried, separators=(",", ":"))
        over = len(encoded) - MAX_PRIVATE_METADATA
        if over <= 0 or not text:
            return encoded
        text = clip(text, max(len(text) - over, 1))


def _carried(metadata: str) -> tuple[str, str, cards.Shown | None]:
    """(request id, where, shown) from a modal's `private_metadata` (`metadata`, or the older
    `"<id>[ home]"`); values of the wrong type read as "" and None."""
    try:
        carried = json.loads(metadata) if metadata.startswith("{") else None
    except ValueError:
        return "", "card", None
    if not isinstance(carried, dict):
        older = metadata.partition(" ")
        return older[0], older[2], None
    seen, request_id, where = carried.get("shown"), carried.get("id"), carried.get("where")
    valid = isinstance(seen, dict) and all(isinstance(v, str | None) for v in seen.values())
    return (
        request_id if isinstance(request_id, str) else "",
        where if isinstance(where, str) else "card",
        seen if valid else None,
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
