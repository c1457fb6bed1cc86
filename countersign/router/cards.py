"""Slack rendering: every card, modal and ephemeral text countersign sends.

Everything an agent wrote is untrusted. It is rendered as `plain_text` (never parsed for mentions,
links or formatting) and escaped (`&`, `<`, `>`) where Slack parses it anyway: the top-level `text`
fallback and mrkdwn lines (https://docs.slack.dev/messaging/formatting-message-text). Only ids
Slack itself gave us (a decider's user id) are written as mentions.

Blocks are built with slack_sdk's Block Kit model classes; `to_dict()` runs their validators, so a
block over a Slack limit fails here rather than at Slack. Limits honoured by construction
(https://docs.slack.dev/reference/block-kit/blocks and its section, button and modal pages):
50 blocks a message and 100 a modal, 3000 chars of section text, 10 section fields of 2000 chars,
header 150, button text 75, modal title 24, `private_metadata` 3000, and a total of about 12,000
chars of text in a message's blocks (`msg_blocks_too_long`, not documented: bolt-js issues #2509
and #2867). Anything longer is cut with "…" here and stays whole in the database and the Details
modal.
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
    InputBlock,
    MarkdownTextObject,
    NumberInputElement,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from ..store import APPROVED, EXECUTED, EXPIRED, FAILED, STARTED, ApprovalRequest
from .edits import block_id as edit_block_id

APPROVE_ACTION = "countersign_approve"
REJECT_ACTION = "countersign_reject"
EDIT_ACTION = "countersign_edit"
DETAILS_ACTION = "countersign_details"
EDIT_CALLBACK = "countersign_edit_submit"
REJECT_CALLBACK = "countersign_reject_submit"
REASON_BLOCK = "reject-reason"

HEADER_MAX = 150
SECTION_TEXT_MAX = 3000
FIELD_MAX = 2000
MAX_FIELDS = 10
MESSAGE_BLOCKS_MAX = 50
MODAL_BLOCKS_MAX = 100
MODAL_TITLE_MAX = 24
# views.* refuse a view over 250 kB (`view_too_large`: https://docs.slack.dev/reference/methods/views.push);
# the Details modal keeps its text under this many bytes of JSON, leaving room for the rest of the view.
MODAL_TEXT_BYTES = 200_000
MESSAGE_TEXT_BUDGET = 12_000
# Card budgets, chosen so that a card stays far below MESSAGE_TEXT_BUDGET whatever the agent sent.
CARD_FIELD_MAX = 300
CARD_REASON_MAX = 2000
CARD_PAYLOAD_FIELDS = MAX_FIELDS


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
    """`text` cut to at most `limit` characters (code points), ending in "…" when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn parser treats as control characters (and
    `sanitize` the rest)."""
    return sanitize(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# Bidirectional overrides and isolates can make text display in another order than it is stored
# ("Trojan Source", CVE-2021-42574); other control characters have no business on a card.
_UNSAFE = {
    c: "\ufffd"
    for c in [
        *range(0x00, 0x09),
        0x0B,
        0x0C,
        *range(0x0E, 0x20),
        0x7F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x200E,
        0x200F,
        0x061C,
    ]
}


def sanitize(text: str) -> str:
    """`text` with control and bidirectional-override characters replaced by U+FFFD."""
    return text.translate(_UNSAFE)


def _plain(text: str, limit: int) -> PlainTextObject:
    return PlainTextObject(text=clip(sanitize(text), limit), emoji=False)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _facts(request: ApprovalRequest) -> list[str]:
    facts = [f"Action: {request.action}", f"Requester: {request.requester}"]
    if request.on_behalf_of:
        facts.append(f"On behalf of: {request.on_behalf_of}")
    if request.confidence is not None:
        facts.append(f"Confidence: {request.confidence:.2f}")
    return facts


def _body(request: ApprovalRequest, version: str) -> list[Block]:
    """Summary next to the raw payload fields (the summary can never hide them), then the reason."""
    payload = request.approved_payload if request.approved_payload is not None else request.payload
    items = list(payload.items())
    shown = [f"{key}: {_show(value)}" for key, value in items[:CARD_PAYLOAD_FIELDS]]
    if len(items) > CARD_PAYLOAD_FIELDS:
        shown[-1] = f"… {len(items) - CARD_PAYLOAD_FIELDS + 1} more fields: see Details"
    blocks: list[Block] = [
        HeaderBlock(block_id=f"head-{version}", text=_plain(request.summary, HEADER_MAX)),
        SectionBlock(
            block_id=f"facts-{version}", fields=[_plain(f, CARD_FIELD_MAX) for f in _facts(request)]
        ),
    ]
    if shown:
        blocks.append(
            SectionBlock(block_id=f"payload-{version}", fields=[_plain(f, CARD_FIELD_MAX) for f in shown])
        )
    if request.reason:
        blocks.append(
            SectionBlock(block_id=f"why-{version}", text=_plain(f"Reason: {request.reason}", CARD_REASON_MAX))
        )
    return blocks


def _card(request: ApprovalRequest, blocks: list[Block], text: str) -> Card:
    rendered = [b.to_dict() for b in blocks]
    assert len(rendered) <= MESSAGE_BLOCKS_MAX
    return Card(text=clip(escape(text), 3000), blocks=rendered)


def request_card(request: ApprovalRequest, approvals: list[dict[str, str]] | None = None) -> Card:
    """The card for a pending request: summary, action class, requester, confidence, key payload
    fields, reason; why it needs review, who may decide, the quorum so far (`approvals`) and when it
    expires; Approve / Reject / Edit (when the policy makes fields editable and one approval is
    enough) / Details buttons whose `value` is only the request id."""
    approvals = approvals or []
    blocks = _body(request, f"pending-{request.level}-{len(approvals)}")
    note = _pending_note(request, approvals)
    blocks.append(
        ContextBlock(
            block_id=f"meta-{request.level}-{len(approvals)}", elements=[MarkdownTextObject(text=note)]
        )
    )
    buttons = [
        ButtonElement(text="Approve", action_id=APPROVE_ACTION, value=request.id, style="primary"),
        ButtonElement(text="Reject", action_id=REJECT_ACTION, value=request.id, style="danger"),
    ]
    if request.rules.get("editable") and request.required_approvals == 1:
        buttons.append(ButtonElement(text="Edit", action_id=EDIT_ACTION, value=request.id))
    buttons.append(ButtonElement(text="Details", action_id=DETAILS_ACTION, value=request.id))
    blocks.append(ActionsBlock(block_id=f"decide-{request.level}", elements=buttons))
    return _card(request, blocks, f"Approval needed: {request.summary}")


def compact_card(request: ApprovalRequest) -> Card:
    """A minimal card for when Slack refuses the full one (`invalid_blocks`, `msg_blocks_too_long`):
    summary, action class, requester and the buttons; everything else is in Details."""
    blocks: list[Block] = [
        SectionBlock(
            block_id="compact",
            text=_plain(f"{request.summary} ({request.action}, from {request.requester})", CARD_FIELD_MAX),
        ),
        ActionsBlock(
            block_id=f"decide-{request.level}",
            elements=[
                ButtonElement(text="Approve", action_id=APPROVE_ACTION, value=request.id, style="primary"),
                ButtonElement(text="Reject", action_id=REJECT_ACTION, value=request.id, style="danger"),
                ButtonElement(text="Details", action_id=DETAILS_ACTION, value=request.id),
            ],
        ),
    ]
    return _card(request, blocks, f"Approval needed: {request.summary}")


def _mentions(users: list[str], limit: int = 10, joiner: str = " or ") -> str:
    more = f" (+{len(users) - limit} more)" if len(users) > limit else ""
    return joiner.join(f"<@{user}>" for user in users[:limit]) + more


def _pending_note(request: ApprovalRequest, approvals: list[dict[str, str]]) -> str:
    """Why it needs review, who may decide, the quorum, the deadline (mrkdwn: the mentioned ids come
    from the policy and from Slack)."""
    eligible = request.eligible_approvers
    if request.required_approvals > 1:
        parts = [f"Needs {request.required_approvals} approvals from {_mentions(eligible, joiner=', ')}"]
    else:
        parts = [f"Needs review by {_mentions(eligible)}"]
    if request.required_approvals > 1:
        done = ", ".join(f"<@{a['slack_user_id']}>" for a in approvals) or "none yet"
        parts.append(f"{len(approvals)} of {request.required_approvals} approvals ({done})")
    parts.append(f"Why: {escape(clip(request.review_reason or 'policy', 300))}")
    levels = request.rules.get("levels") or [{}]
    then = levels[min(request.level, len(levels) - 1)].get("on_timeout", "deny")
    parts.append(f"Expires {_when(request.expires_at)}, then {then}" if request.expires_at else "No timeout")
    if request.level:
        parts.append(f"Escalation level {request.level}")
    parts.append(f"Policy v{request.policy_version} · request {request.id}")
    return " · ".join(parts)


def _when(moment: datetime | None, plain: bool = False) -> str:
    """A Slack date token (shown in the reader's time zone), or with `plain` the UTC text."""
    if moment is None:
        return "an unknown time"
    fallback = moment.strftime("%Y-%m-%d %H:%M UTC")
    return (
        fallback
        if plain
        else f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"
    )


def _who(request: ApprovalRequest, plain: bool = False) -> str:
    people = request.decided_by or []
    names = (sanitize(p["name"]) if plain else f"<@{p['slack_user_id']}>" for p in people)
    return ", ".join(names) or f"policy ({request.decided_via})"


def verdict(request: ApprovalRequest, plain: bool = False) -> str:
    """`"Approved by <@U123> at <date>"` (mrkdwn) for a decided request, or with `plain`
    `"approved by alice at 2026-11-29 08:28 UTC"` for places that show plain text only (modal
    errors); for an expired one, what the policy's timeout decided."""
    when = _when(request.decided_at, plain)
    if request.status == EXPIRED:
        result = "allowed to proceed (auto-proceeded)" if request.timeout_result == "allow" else "denied"
        text = f"Expired at {when} with no decision: {result} by the policy's timeout"
    else:
        text = f"{request.status.capitalize()} by {_who(request, plain)} at {when}"
    return text[0].lower() + text[1:] if plain else text


def _edit_line(request: ApprovalRequest) -> str | None:
    if not request.edits:
        return None
    changes = ", ".join(f"{e['field']} {_show(e['from'])} → {_show(e['to'])}" for e in request.edits)
    return f"✏️ {escape(clip(changes, 1500))}, edited by {_who(request)}"


def _execution_line(request: ApprovalRequest) -> str | None:
    if request.execution == EXECUTED:
        return f"Executed ✓ at {_when(request.executed_at)}"
    if request.execution == STARTED:
        return (
            f"⚙ Execution started at {_when(request.executed_at)}; no outcome reported yet "
            "(if the agent died, it may report it with `report_outcome`)"
        )
    if request.execution == FAILED:
        return f"Failed ✗ {escape(clip(request.execution_detail or '', 500))}"
    return None


def decided_card(request: ApprovalRequest) -> Card:
    """The card after the decision: the same facts, no buttons; who decided what and when, the
    edit diff, the reviewer's reason, and the execution outcome once the agent reports it."""
    icon = {APPROVED: "✅", EXPIRED: "⏱"}.get(request.status, "⛔")
    lines = [f"{icon} {verdict(request)}", _edit_line(request), _execution_line(request)]
    if request.decision_reason:
        lines.append(f"Reviewer's reason: {escape(clip(request.decision_reason, 1000))}")
    version = f"{request.status}-{request.execution or 'open'}"
    lines.append(f"Request {request.id} · policy v{request.policy_version}")
    blocks = _body(request, version)
    text = "\n".join(line for line in lines if line)
    blocks.append(
        SectionBlock(
            block_id=f"verdict-{version}", text=MarkdownTextObject(text=clip(text, SECTION_TEXT_MAX))
        )
    )
    return _card(request, blocks, f"{request.status.capitalize()}: {request.summary}")


def _view(title: str, blocks: list[Block], **extra: Any) -> dict[str, Any]:
    assert len(blocks) <= MODAL_BLOCKS_MAX
    return View(type="modal", title=_plain(title, MODAL_TITLE_MAX), blocks=blocks, **extra).to_dict()


def _form(
    title: str, blocks: list[Block], callback_id: str, request: ApprovalRequest, submit: str
) -> dict[str, Any]:
    """A modal with inputs; its submit comes back with `callback_id` and the request id as metadata."""
    return _view(
        title,
        blocks,
        callback_id=callback_id,
        private_metadata=request.id,
        submit=_plain(submit, MODAL_TITLE_MAX),
        close=_plain("Cancel", MODAL_TITLE_MAX),
    )


def loading_view(title: str) -> dict[str, Any]:
    """The modal opened at once with the click's `trigger_id` (valid 3 s, once:
    https://docs.slack.dev/tools/bolt-python/concepts/opening-modals), filled by `views.update`."""
    return _view(title, [SectionBlock(text=_plain("Loading…", 100))])


def notice_view(title: str, text: str) -> dict[str, Any]:
    """A modal with one message (e.g. why this reviewer cannot edit)."""
    return _view(title, [SectionBlock(text=MarkdownTextObject(text=clip(text, SECTION_TEXT_MAX)))])


def edit_view(request: ApprovalRequest) -> dict[str, Any]:
    """The Edit modal: one input per editable field, prefilled from the frozen payload.

    Decimal and integer fields are `number_input`s (`min_value`/`max_value` as strings, as
    Slack's schema requires); text fields are `plain_text_input`s. Submitting approves with edits.
    """
    blocks: list[Block] = [
        SectionBlock(text=_plain(f"Edit, then approve: {request.summary}", SECTION_TEXT_MAX))
    ]
    for name, spec in request.rules.get("editable", {}).items():
        original = _show(request.payload.get(name, ""))
        if spec["type"] == "text":
            element: Any = PlainTextInputElement(
                action_id="value",
                initial_value=clip(original, 3000),
                max_length=spec.get("max_length", 3000),
                multiline=len(original) > 80,
            )
        else:
            element = NumberInputElement(
                action_id="value",
                is_decimal_allowed=spec["type"] == "decimal",
                initial_value=original,
                min_value=spec.get("min"),
                max_value=spec.get("max"),
            )
        blocks.append(InputBlock(block_id=edit_block_id(name), label=_plain(name, 2000), element=element))
    return _form("Edit and approve", blocks, EDIT_CALLBACK, request, submit="Approve")


def reject_view(request: ApprovalRequest) -> dict[str, Any]:
    """The Reject modal: a reason, required when the policy says `reject_reason: required`."""
    required = request.rules.get("reject_reason") == "required"
    blocks: list[Block] = [
        SectionBlock(text=_plain(f"Reject: {request.summary}", SECTION_TEXT_MAX)),
        InputBlock(
            block_id=REASON_BLOCK,
            label=_plain("Reason (sent to the agent)", 2000),
            optional=not required,
            element=PlainTextInputElement(action_id="value", multiline=True, max_length=3000),
        ),
    ]
    return _form("Reject request", blocks, REJECT_CALLBACK, request, submit="Reject")


def details_view(request: ApprovalRequest) -> dict[str, Any]:
    """The Details modal: the whole payload and context as pretty JSON, in sections of at most
    3000 chars, within 100 blocks and 250 kB; what does not fit ends in an honest "… N more characters"."""
    blocks: list[Block] = [HeaderBlock(text=_plain(request.summary, HEADER_MAX))]
    blocks.append(SectionBlock(fields=[_plain(f, FIELD_MAX) for f in _facts(request)]))
    if request.reason:
        blocks.append(SectionBlock(text=_plain(f"Reason: {request.reason}", SECTION_TEXT_MAX)))
    parts = (("Payload", request.payload), ("Context", request.context))
    text = "\n\n".join(
        f"{title}:\n{json.dumps(data, indent=2, ensure_ascii=False)}" for title, data in parts if data
    )
    blocks.extend(_chunks(text, MODAL_BLOCKS_MAX - len(blocks)))
    return _view("Request details", blocks)


def _chunks(text: str, room: int) -> list[Block]:
    """`text` in sections of 3000 chars, at most `room` blocks and `MODAL_TEXT_BYTES` of JSON."""
    pieces = [text[i : i + SECTION_TEXT_MAX] for i in range(0, len(text), SECTION_TEXT_MAX)]
    sizes = [len(json.dumps(p)) for p in pieces]  # as sent: ASCII JSON, the largest encoding
    fits = next((n for n in range(len(pieces)) if sum(sizes[: n + 1]) > MODAL_TEXT_BYTES), len(pieces))
    if len(pieces) <= room and fits == len(pieces):
        return [SectionBlock(text=_plain(p, SECTION_TEXT_MAX)) for p in pieces]
    kept = min(room - 1, fits)
    left = len(text) - kept * SECTION_TEXT_MAX
    more = f"… {left} more characters not shown (countersign show <request id> prints everything)"
    return [SectionBlock(text=_plain(p, SECTION_TEXT_MAX)) for p in pieces[:kept]] + [
        SectionBlock(text=_plain(more, 300))
    ]


def already_decided_text(request: ApprovalRequest, plain: bool = False) -> str:
    """Answer to a click or submit on a request that is no longer pending (mrkdwn, or `plain` for
    a modal's inline error, which Slack shows as plain text)."""
    return f"This request was already {verdict(request, plain)}; your action changed nothing."


def not_an_approver_text(request: ApprovalRequest, plain: bool = False) -> str:
    """Answer to a click by someone the policy does not name as an approver."""
    action = request.action if plain else f"`{request.action}`"
    return f"You are not an approver for {action} requests, so your action changed nothing."


def escalated_card(request: ApprovalRequest, to_channel: str) -> Card:
    """The old card after an escalation: the same facts, no buttons, and where the request went."""
    blocks = _body(request, f"escalated-{request.level}")
    line = (
        f"⤴ No decision in time: escalated to <#{to_channel}> at {_when(request.expires_at)} · "
        f"request {request.id}"
    )
    blocks.append(SectionBlock(block_id=f"escalated-{request.level}", text=MarkdownTextObject(text=line)))
    return _card(request, blocks, f"Escalated: {request.summary}")


def reminder_text(request: ApprovalRequest) -> str:
    """The thread reply that reminds the approvers of a pending request before it expires."""
    deadline = f"; it expires {_when(request.expires_at)}" if request.expires_at else ""
    return (
        f"⏰ Reminder for {_mentions(request.approvers)}: this request still waits for a decision{deadline}."
    )


def timed_out_text(request: ApprovalRequest) -> str:
    """Answer to a click after the request's deadline (the timeout sweep decides it any moment)."""
    return (
        f"This request timed out at {_when(request.expires_at)}; the policy's timeout decides it, "
        "your action changed nothing."
    )


def counted_text(request: ApprovalRequest, approvals: list[dict[str, str]], repeated: bool) -> str:
    """Ephemeral answer to an approval that counts towards a quorum not reached yet."""
    first = "You had already approved" if repeated else "Your approval is counted"
    return f"{first}: {len(approvals)} of {request.required_approvals} approvals so far."


UNKNOWN_REQUEST_TEXT = "countersign does not know this request; your action changed nothing."
NO_EDIT_UNDER_QUORUM_TEXT = (
    "This request needs more than one approval, so it cannot be edited: reject it with a reason and "
    "let the agent ask again."
)
SELF_APPROVAL_TEXT = (
    "The agent is acting on your behalf, so another approver has to approve or edit this request; "
    "your action changed nothing."
)
