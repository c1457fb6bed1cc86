"""Slack rendering: every card and modal countersign sends, as Block Kit.

Everything an agent wrote is untrusted, and so is what a reviewer typed (the Reject modal's reason).
It is rendered as `plain_text` (never parsed for mentions, links or formatting) and escaped where
Slack parses it anyway (`texts.escape`: the top-level `text` fallback and mrkdwn lines). Only ids
Slack itself gave us (a decider's user id) and the policy's approvers are written as mentions.

Blocks are built with slack_sdk's Block Kit model classes; `to_dict()` runs their validators, so a
block over a Slack limit fails here rather than at Slack. Limits honoured by construction
(https://docs.slack.dev/reference/block-kit/blocks and its section, button and modal pages),
named as in the sandbox's `limits` module: 50 blocks a message and 100 a modal, 3000 chars of
section text, 10 section fields of 2000 chars, header 150, modal title 24, and a total of about
12,000 chars of text in a message's blocks (`msg_blocks_too_long`, not documented: bolt-js issues
#2509 and #2867). Anything longer is cut with "…" here and stays whole in the database and the
Details modal (`details.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
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

from ..schema import payload_sha256
from ..store import Decider, Execution, Request, ResumeProblem, Status
from ..untrusted import LINE_BREAKS, one_line, sanitize
from .edits import block_id as edit_block_id
from .texts import (
    changes,
    clip,
    conversation,
    escape,
    hidden_characters,
    mentions,
    not_executed,
    not_resumed,
    paragraphs,
    show,
    verdict,
    when,
    who,
)

APPROVE_ACTION = "countersign_approve"
REJECT_ACTION = "countersign_reject"
EDIT_ACTION = "countersign_edit"
DETAILS_ACTION = "countersign_details"
EDIT_CALLBACK = "countersign_edit_submit"
REJECT_CALLBACK = "countersign_reject_submit"
REASON_BLOCK = "reject-reason"

MAX_HEADER_TEXT = 150
MAX_SECTION_TEXT = 3000
MAX_SECTION_FIELD_TEXT = 2000
MAX_SECTION_FIELDS = 10
MAX_BLOCKS_PER_MESSAGE = 50
MAX_BLOCKS_PER_VIEW = 100
MAX_VIEW_TITLE = 24
MAX_TEXT_INPUT_LENGTH = 3000
MAX_INPUT_LABEL = 2000
MAX_BLOCKS_TOTAL_TEXT = 12_000
# Card budgets, chosen so that a card stays far below MAX_BLOCKS_TOTAL_TEXT whatever the agent sent.
CARD_FIELD_MAX = 300
CARD_REASON_MAX = 2000
CARD_REASON_LINES = 8  # the reason's lines a card shows (`texts.paragraphs`); Details has them all
CARD_PAYLOAD_FIELDS = MAX_SECTION_FIELDS
MAX_KEY_FIELDS = CARD_PAYLOAD_FIELDS - 1  # the last payload field may fold the rest


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


Shown = dict[str, str | None]
"""What a reviewer was shown, as the audit trail records it: `{"text", "blocks_sha256"}` (`shown`),
and `"view": "home"` for a request's entry on the Home tab (`bot.payload.shown`)."""


def shown(text: str | None, blocks: list[dict[str, Any]]) -> Shown:
    """What a reviewer was shown, as the audit trail records it (`card_posted`, `card_updated`, and
    each decision's `shown`): `{"text": text, "blocks_sha256": SHA-256 (hex) of the RFC 8785
    canonical JSON of {"blocks": blocks}}` (https://www.rfc-editor.org/rfc/rfc8785), so the same
    blocks hash the same whatever their keys' order. The one function for every such hash: a
    decision's hash equals that of the card version that showed it. Raises `ValueError` for blocks
    RFC 8785 cannot represent (`schema.payload_sha256`)."""
    return {"text": text, "blocks_sha256": payload_sha256({"blocks": blocks})}


def shown_in(surface: Any) -> Shown | None:
    """`shown` of what a message or part of a view shows, as Slack holds it: its `blocks` and its
    `text` — a message's own (`card_posted` and `card_updated` from the `message` Slack answers a
    post or rewrite with, a click on a card from the `message` it carries) or, for blocks without
    one (a request's entry on the App Home tab, `inbox.home_entry`), the text the blocks show
    (`blocks_text`). None when `surface` has no list of blocks, or blocks RFC 8785 cannot
    represent. The one function that derives the text and hash of what a reviewer was shown."""
    blocks = surface.get("blocks") if isinstance(surface, dict) else None
    if not isinstance(blocks, list):
        return None
    text = surface.get("text")
    try:
        return shown(text if isinstance(text, str) else blocks_text(blocks), blocks)
    except ValueError:
        return None


def blocks_text(blocks: list[Any]) -> str:
    """What `blocks` say, for the audit trail: the `text` of every text object in them (`plain_text`
    or `mrkdwn`: headers, sections and then their fields, context lines, button labels), in their
    order, one a line (https://docs.slack.dev/reference/block-kit/composition-objects/text-object)."""
    found: list[str] = []
    pending: list[Any] = [blocks]
    while pending:
        value = pending.pop()
        if isinstance(value, dict) and value.get("type") in ("plain_text", "mrkdwn"):
            found.append(str(value.get("text", "")))
        elif isinstance(value, dict):  # a section's text before its fields, whatever the keys' order
            pending.extend(reversed([value[k] for k in sorted(value, key=lambda k: k != "text")]))
        elif isinstance(value, list):
            pending.extend(reversed(value))
    return "\n".join(found)


def plain(text: str, limit: int) -> PlainTextObject:
    """Untrusted `text` as a `plain_text` object: `sanitize`d, clipped to `limit` characters, emoji
    codes left as typed. The one way cards, modals and the reviewer's own surfaces show such text."""
    return PlainTextObject(text=clip(sanitize(text), limit), emoji=False)


def facts(request: Request, limit: int) -> list[PlainTextObject | MarkdownTextObject]:
    """`Action: …`, `Requester: …`, and when given `On behalf of: @lee` and `Confidence: 0.80`: the
    request's facts, as a card's and the Details modal's fields show them, each clipped to `limit`
    characters. The agent's words are `plain`; the human it acts for is a mention (mrkdwn, which
    Slack renders as their name, as every other person on a card), safe there as the schema took
    `on_behalf_of` only as a Slack user id (`schema.SLACK_USER_ID`)."""
    fields: list[PlainTextObject | MarkdownTextObject] = [
        plain(f"Action: {request.action}", limit),
        plain(f"Requester: {request.requester}", limit),
    ]
    if request.on_behalf_of:
        fields.append(MarkdownTextObject(text=f"On behalf of: {mentions([request.on_behalf_of])}"))
    if request.confidence is not None:
        fields.append(plain(f"Confidence: {request.confidence:.2f}", limit))
    return fields


def field_line(name: str, value: Any) -> str:
    """One payload field as a card shows it, `amount: 120.00` (before `CARD_FIELD_MAX` clips it): the
    value on one line (`untrusted.one_line`), so it cannot look like another field."""
    return f"{name}: {one_line(show(value))}"


def payload_lines(payload: dict[str, Any], key_fields: list[str]) -> list[str]:
    """The payload fields a card shows: the policy's `key_fields` first, in its order, then the
    others in the payload's order; past `CARD_PAYLOAD_FIELDS` the rest fold into "… N more fields:
    see Details", which never takes a key field's place (a policy names at most
    `MAX_KEY_FIELDS`)."""
    first = [name for name in key_fields if name in payload]
    keys = first + [name for name in payload if name not in set(first)]
    lines = [field_line(name, payload[name]) for name in keys[:CARD_PAYLOAD_FIELDS]]
    if len(keys) > CARD_PAYLOAD_FIELDS:
        lines[-1] = f"… {len(keys) - CARD_PAYLOAD_FIELDS + 1} more fields: see Details"
    return lines


def _body(request: Request, version: str) -> list[Block]:
    """Summary next to the raw payload fields, key fields first (the summary can never hide them),
    then the reason."""
    shown = payload_lines(request.payload_to_run, request.rules.key_fields)
    blocks: list[Block] = [
        HeaderBlock(block_id=f"head-{version}", text=plain(one_line(request.summary), MAX_HEADER_TEXT)),
        SectionBlock(block_id=f"facts-{version}", fields=facts(request, CARD_FIELD_MAX)),
    ]
    if shown:
        blocks.append(
            SectionBlock(block_id=f"payload-{version}", fields=[plain(f, CARD_FIELD_MAX) for f in shown])
        )
    if request.reason:
        blocks.append(
            SectionBlock(
                block_id=f"why-{version}", text=plain(f"Reason: {_reason(request)}", CARD_REASON_MAX)
            )
        )
    return blocks


def _reason(request: Request) -> str:
    return paragraphs(request.reason or "", CARD_REASON_LINES)


def _card(request: Request, blocks: list[Block], text: str) -> Card:
    """A card of `request`: `blocks`, which must offer its Details button (every card shows the body,
    which may fold into "… N more lines: see Details", or only the key fields), and `text`."""
    rendered = [b.to_dict() for b in blocks]
    assert len(rendered) <= MAX_BLOCKS_PER_MESSAGE
    actions = [e for b in blocks if isinstance(b, ActionsBlock) for e in b.elements]
    assert any(getattr(e, "action_id", None) == DETAILS_ACTION for e in actions)
    return Card(text=clip(escape(one_line(text)), 3000), blocks=rendered)


def request_card(request: Request, approvals: list[Decider] | None = None) -> Card:
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
    blocks.append(ActionsBlock(block_id=f"decide-{request.level}", elements=decision_buttons(request)))
    return _card(request, blocks, f"Approval needed: {request.summary}")


def decision_buttons(request: Request) -> list[ButtonElement]:
    """Approve / Reject / Edit (when the policy makes fields editable and one approval is enough) /
    Details, each with the request id as its `value`: the card's, and the App Home tab's."""
    buttons = [
        ButtonElement(text="Approve", action_id=APPROVE_ACTION, value=request.id, style="primary"),
        ButtonElement(text="Reject", action_id=REJECT_ACTION, value=request.id, style="danger"),
    ]
    if request.rules.editable and request.required_approvals == 1:
        buttons.append(ButtonElement(text="Edit", action_id=EDIT_ACTION, value=request.id))
    return [*buttons, details_button(request)]


def details_button(request: Request) -> ButtonElement:
    """The Details button (`value`: the request id): on a pending card beside the others, alone on a
    decided one, whose Details keep the decision (`details.details_view`), and on one escalated away."""
    return ButtonElement(text="Details", action_id=DETAILS_ACTION, value=request.id)


def details_only(request: Request, version: str) -> ActionsBlock:
    """The actions of a card no longer decided on (decided, or escalated away): Details alone, for
    the record in full to anyone who sees the card."""
    return ActionsBlock(block_id=f"details-{version}", elements=[details_button(request)])


def compact_card(request: Request) -> Card:
    """A minimal card for when Slack refuses the full one (`invalid_blocks`, `msg_blocks_too_long`):
    summary, action class, requester, the key fields and the buttons; everything else is in Details."""
    key_fields = request.rules.key_fields
    only_keys = {name: value for name, value in request.payload_to_run.items() if name in key_fields}
    keys = [plain(line, CARD_FIELD_MAX) for line in payload_lines(only_keys, key_fields)]
    blocks: list[Block] = [
        SectionBlock(
            block_id="compact",
            text=plain(
                f"{one_line(request.summary)} ({request.action}, from {request.requester})", CARD_FIELD_MAX
            ),
            fields=keys or None,
        ),
        ActionsBlock(
            block_id=f"decide-{request.level}",
            elements=[
                ButtonElement(text="Approve", action_id=APPROVE_ACTION, value=request.id, style="primary"),
                ButtonElement(text="Reject", action_id=REJECT_ACTION, value=request.id, style="danger"),
                details_button(request),
            ],
        ),
    ]
    return _card(request, blocks, f"Approval needed: {request.summary}")


def _pending_note(request: Request, approvals: list[Decider]) -> str:
    """Why it needs review, who may decide, the quorum, the deadline (mrkdwn: the mentioned ids come
    from the policy and from Slack)."""
    eligible = request.eligible_approvers
    if request.required_approvals > 1:
        parts = [f"Needs {request.required_approvals} approvals from {mentions(eligible, joiner=', ')}"]
    else:
        parts = [f"Needs review by {mentions(eligible)}"]
    if request.required_approvals > 1:
        done = ", ".join(f"<@{a['slack_user_id']}>" for a in approvals) or "none yet"
        parts.append(f"{len(approvals)} of {request.required_approvals} approvals ({done})")
    parts.append(f"Why: {escape(clip(request.review_reason or 'policy', 500))}")  # room for two labels
    parts.append(
        f"Expires {when(request.expires_at)}, then {_then(request)}" if request.expires_at else "No timeout"
    )
    if request.level:
        parts.append(f"Escalation level {request.level}")
    parts.append(f"Policy v{request.policy_version} · request {request.id}")
    return " · ".join(parts)


def _then(request: Request) -> str:
    """What the current level's timeout does: `deny`, `allow`, or `escalation to <#C…>` (or `<@U…>`)."""
    then = request.rules.level(request.level).on_timeout
    if then != "escalate":
        return then
    return f"escalation to {conversation(request.rules.level(request.level + 1).channel)}"


def edit_line(request: Request) -> str | None:
    """`✏️ amount 120.00 → 100.50, edited by <@U…>` (mrkdwn, escaped) for an edited request, else None."""
    if not request.edits:
        return None
    return f"✏️ {escape(clip(changes(request.edits), 1500))}, edited by {who(request)}"


def execution_line(request: Request, refused: str | None, problem: ResumeProblem | None) -> str | None:
    """How the approved action went; that its run started and never reported an outcome
    (`outcome_unknown`: someone must check); or, while nothing ran, why the agent has not run the
    decision or why its worker refused to."""
    if request.execution == Execution.EXECUTED:
        return f"Executed ✓ at {when(request.executed_at)}"
    if request.execution == Execution.STARTED and problem is not None and outcome_unknown(problem):
        return not_resumed(request, problem)
    if request.execution == Execution.STARTED:
        return (
            f"⚙ Execution started at {when(request.executed_at)}; no outcome reported yet "
            "(if the agent died, it may report it with `report_outcome`)"
        )
    if request.execution == Execution.FAILED:
        return f"Failed ✗ {escape(clip(one_line(request.execution_detail or ''), 500))}"
    if problem is not None and request.execution is None:
        return not_resumed(request, problem)
    if refused and request.execution is None and request.approved_payload is not None:
        return not_executed(request, refused)
    return None


def outcome_unknown(problem: ResumeProblem) -> bool:
    """`problem` says the approved action's run started and never reported an outcome."""
    return problem["event"] == "outcome_unknown"


def _state(request: Request, refused: str | None, problem: ResumeProblem | None) -> str:
    """What the verdict's `block_id` names, so that a changed line gets a fresh one."""
    if request.execution is not None:
        unknown = problem is not None and outcome_unknown(problem)
        return f"{request.execution}-outcome_unknown" if unknown else request.execution
    if problem is not None:
        if problem["event"] == "resume_failed":
            return f"{problem['event']}{problem['retries_left']}"
        if problem["event"] == "webhook_failing" or problem["event"] == "webhook_dead_lettered":
            return f"{problem['event']}{problem['attempts']}"
        return problem["event"]
    return refused or "open"


def verdict_line(request: Request, utc: bool = False) -> str:
    """`✅ Approved by <@U…> at <date>` (mrkdwn; ⛔ rejected, ⏱ expired: `texts.verdict`), with `utc`
    the time as UTC text."""
    icon = {Status.APPROVED: "✅", Status.EXPIRED: "⏱"}.get(request.status, "⛔")
    return f"{icon} {verdict(request, utc=utc)}"


def decided_card(request: Request, refused: str | None = None, problem: ResumeProblem | None = None) -> Card:
    """The card after the decision: the same facts; who decided what and when, the edit diff, the
    reviewer's reason (its first lines), the Details button alone (the record in full, to anyone
    who sees the card), and the execution outcome once the agent reports it, or
    while it has not: why the agent has not run the decision (`problem`: its resume job failed or
    no worker took it, `OutboxEvent.problem`), or why its worker refused to (`refused`: the `why`
    of its latest refusal)."""
    lines = [verdict_line(request), edit_line(request), execution_line(request, refused, problem)]
    version = f"{request.status}-{_state(request, refused, problem)}"
    lines.append(f"Request {request.id} · policy v{request.policy_version}")
    blocks = _body(request, version)
    text = "\n".join(line for line in lines if line)
    blocks.append(
        SectionBlock(
            block_id=f"verdict-{version}", text=MarkdownTextObject(text=clip(text, MAX_SECTION_TEXT))
        )
    )
    if request.decision_reason:  # typed by a reviewer: as untrusted as the agent's text, and as bounded
        reason = f"Reviewer's reason: {paragraphs(request.decision_reason, CARD_REASON_LINES)}"
        blocks.append(SectionBlock(block_id=f"decided-why-{version}", text=plain(reason, CARD_REASON_MAX)))
    blocks.append(details_only(request, version))
    return _card(request, blocks, f"{request.status.capitalize()}: {request.summary}")


def modal(title: str, blocks: list[Block], close: str = "Close", **extra: Any) -> dict[str, Any]:
    """A modal; `close` labels its close button: `Close` for one that only shows (a view that names
    none shows Slack's default, `Cancel`, which reads as if something would be undone)."""
    assert len(blocks) <= MAX_BLOCKS_PER_VIEW
    title_text, close_text = plain(title, MAX_VIEW_TITLE), plain(close, MAX_VIEW_TITLE)
    return View(type="modal", title=title_text, blocks=blocks, close=close_text, **extra).to_dict()


def _form(title: str, blocks: list[Block], callback_id: str, request: Request, submit: str) -> dict[str, Any]:
    """A modal with inputs; its submit comes back with `callback_id` and the request id as metadata."""
    return modal(
        title,
        blocks,
        callback_id=callback_id,
        private_metadata=request.id,
        submit=plain(submit, MAX_VIEW_TITLE),
        close="Cancel",
    )


def loading_view(title: str) -> dict[str, Any]:
    """The modal opened at once with the click's `trigger_id` (valid 3 s, once:
    https://docs.slack.dev/tools/bolt-python/concepts/opening-modals), filled by `views.update`."""
    return modal(title, [SectionBlock(text=plain("Loading…", 100))])


def notice_view(title: str, text: str) -> dict[str, Any]:
    """A modal with one message (e.g. why this reviewer cannot edit)."""
    return modal(title, [SectionBlock(text=MarkdownTextObject(text=clip(text, MAX_SECTION_TEXT)))])


def edit_view(request: Request) -> dict[str, Any]:
    """The Edit modal: one input per editable field, prefilled from the frozen payload.

    Decimal and integer fields are `number_input`s (`min_value`/`max_value` as strings, as
    Slack's schema requires); text fields are `plain_text_input`s, multi-line for a value over 80
    characters or with a line break (`untrusted.LINE_BREAKS`), with a hint when the value holds
    controls or bidirectional overrides (`texts.hidden_characters`). Submitting approves with edits.
    """
    blocks: list[Block] = [
        SectionBlock(text=plain(f"Edit, then approve: {one_line(request.summary)}", MAX_SECTION_TEXT))
    ]
    for name, spec in request.rules.editable.items():
        original = show(request.payload.get(name, ""))
        if spec.type == "text":
            element: Any = PlainTextInputElement(
                action_id="value",
                initial_value=clip(original, MAX_TEXT_INPUT_LENGTH),
                max_length=spec.max_length,
                multiline=len(original) > 80 or any(brk in original for brk in LINE_BREAKS),
            )
        else:
            element = NumberInputElement(
                action_id="value",
                is_decimal_allowed=spec.type == "decimal",
                initial_value=original,
                min_value=spec.min,
                max_value=spec.max,
            )
        hint = hidden_characters(original)  # the input shows them raw: say so
        shown = None if hint is None else plain(hint, 2000)
        blocks.append(
            InputBlock(block_id=edit_block_id(name), label=plain(name, 2000), element=element, hint=shown)
        )
    return _form("Edit and approve", blocks, EDIT_CALLBACK, request, submit="Approve")


def reject_view(request: Request) -> dict[str, Any]:
    """The Reject modal: a reason, required when the policy says `reject_reason: required`."""
    required = request.rules.reject_reason == "required"
    blocks: list[Block] = [
        SectionBlock(text=plain(f"Reject: {one_line(request.summary)}", MAX_SECTION_TEXT)),
        InputBlock(
            block_id=REASON_BLOCK,
            label=plain("Reason (sent to the agent)", 2000),
            optional=not required,
            element=PlainTextInputElement(action_id="value", multiline=True, max_length=3000),
        ),
    ]
    return _form("Reject request", blocks, REJECT_CALLBACK, request, submit="Reject")


def escalated_card(request: Request, to_channel: str) -> Card:
    """The old card after an escalation: the same facts, where the request went, and Details alone
    (the body may fold into "… N more lines: see Details")."""
    blocks = _body(request, f"escalated-{request.level}")
    line = (
        f"⤴ No decision in time: escalated to {conversation(to_channel)} at {when(request.expires_at)} · "
        f"request {request.id}"
    )
    blocks.append(SectionBlock(block_id=f"escalated-{request.level}", text=MarkdownTextObject(text=line)))
    blocks.append(details_only(request, f"escalated-{request.level}"))
    return _card(request, blocks, f"Escalated: {request.summary}")
