"""Slack rendering: every card, card update and ephemeral text countersign sends.

Everything an agent wrote is untrusted. It is rendered as `plain_text` (never parsed for mentions,
links or formatting) and escaped (`&`, `<`, `>`) where Slack parses it anyway, in the top-level
`text` fallback (https://docs.slack.dev/messaging/formatting-message-text). Only ids that come
from Slack itself (the decider's user id) are written as mentions.

Blocks are built with slack_sdk's Block Kit model classes; `to_dict()` runs their validators, so a
block over a Slack limit fails here rather than at Slack. Limits
(https://docs.slack.dev/reference/block-kit/blocks): header text 150 chars, section text 3000,
at most 10 section fields of 2000 chars each, button text 75.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from ..store import APPROVED, ApprovalRequest

APPROVE_ACTION = "countersign_approve"
REJECT_ACTION = "countersign_reject"
HEADER_MAX = 150
SECTION_TEXT_MAX = 3000
FIELD_MAX = 2000
MAX_FIELDS = 10
PAYLOAD_FIELDS = MAX_FIELDS - 2  # two fields carry the action class and the requester


@dataclass(frozen=True)
class Card:
    """A message: `text` (notification and screen-reader fallback) and Block Kit `blocks` as dicts.

    `chat.update` drops the old blocks when given text alone, so callers always send both
    (https://docs.slack.dev/messaging/modifying-messages): use `**card.message()`.
    """

    text: str
    blocks: list[dict[str, Any]]

    def message(self) -> dict[str, Any]:
        """`{"text": ..., "blocks": [...]}` for `chat.postMessage` / `chat.update`."""
        return {"text": self.text, "blocks": self.blocks}


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in "…" when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn parser treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str, limit: int) -> PlainTextObject:
    return PlainTextObject(text=clip(text, limit), emoji=False)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _body(request: ApprovalRequest, version: str) -> list[Block]:
    fields = [f"Action: {request.action}", f"Requester: {request.requester}"]
    fields += [f"{key}: {_value(value)}" for key, value in list(request.payload.items())[:PAYLOAD_FIELDS]]
    blocks: list[Block] = [
        HeaderBlock(block_id=f"head-{version}", text=_plain(request.summary, HEADER_MAX)),
        SectionBlock(block_id=f"facts-{version}", fields=[_plain(f, FIELD_MAX) for f in fields]),
    ]
    if request.reason:
        blocks.append(
            SectionBlock(
                block_id=f"why-{version}", text=_plain(f"Reason: {request.reason}", SECTION_TEXT_MAX)
            )
        )
    return blocks


def request_card(request: ApprovalRequest) -> Card:
    """The card for a pending request: summary, action class, requester, key payload fields,
    reason, and Approve (primary) / Reject (danger) buttons whose `value` is only the request id."""
    blocks = _body(request, "pending")
    blocks.append(
        ContextBlock(
            block_id="meta-pending",
            elements=[
                _plain(f"Request {request.id} · needs one of {len(request.approvers)} approvers", 2000)
            ],
        )
    )
    blocks.append(
        ActionsBlock(
            block_id="decide",
            elements=[
                ButtonElement(text="Approve", action_id=APPROVE_ACTION, value=request.id, style="primary"),
                ButtonElement(text="Reject", action_id=REJECT_ACTION, value=request.id, style="danger"),
            ],
        )
    )
    return Card(text=escape(f"Approval needed: {request.summary}"), blocks=[b.to_dict() for b in blocks])


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "an unknown time"
    fallback = moment.strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _who(request: ApprovalRequest) -> str:
    people = request.decided_by or []
    return ", ".join(f"<@{p['slack_user_id']}>" for p in people) or f"policy ({request.decided_via})"


def verdict(request: ApprovalRequest) -> str:
    """`"Approved by <@U123> at <date>"` (mrkdwn) for a decided request."""
    return f"{request.status.capitalize()} by {_who(request)} at {_when(request.decided_at)}"


def decided_card(request: ApprovalRequest) -> Card:
    """The card after the decision: the same facts, no buttons, and who decided what, when."""
    icon = "✅" if request.status == APPROVED else "⛔"
    blocks = _body(request, request.status)
    blocks.append(
        SectionBlock(
            block_id=f"verdict-{request.status}", text=MarkdownTextObject(text=f"{icon} {verdict(request)}")
        )
    )
    text = escape(f"{request.status.capitalize()}: {request.summary}")
    return Card(text=text, blocks=[b.to_dict() for b in blocks])


def already_decided_text(request: ApprovalRequest) -> str:
    """Ephemeral answer to a click on a request that is no longer pending."""
    return f"This request was already {verdict(request)}."


def not_an_approver_text(request: ApprovalRequest) -> str:
    """Ephemeral answer to a click by someone the policy does not name as an approver."""
    return f"You are not an approver for `{escape(request.action)}` requests, so your click changed nothing."


UNKNOWN_REQUEST_TEXT = "countersign does not know this request; your click changed nothing."
