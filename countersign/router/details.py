"""The Details modal: a request's record in full, read-only, for anyone who sees its card.

A card shows the first lines of the agent's reason and of the reviewer's, and the first payload
fields ("… N more lines: see Details"); Details shows them whole, within a modal's limits (100
blocks, 3000 chars a section, 250 kB a view: https://docs.slack.dev/reference/views/modal-views).
A decided card keeps its Details button, as a GitHub deployment review keeps its record viewable
after the decision, so Details also shows the decision: the verdict, who decided (every approver
of a quorum), when (UTC) and any edit.
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import Block, HeaderBlock, MarkdownTextObject, SectionBlock

from ..store import Request, Status
from ..untrusted import json_text, one_line
from .cards import (
    MAX_BLOCKS_PER_VIEW,
    MAX_HEADER_TEXT,
    MAX_SECTION_FIELD_TEXT,
    MAX_SECTION_TEXT,
    edit_line,
    facts,
    modal,
    plain,
    verdict_line,
)
from .texts import clip

# views.* refuse a view over 250 kB (`view_too_large`: https://docs.slack.dev/reference/methods/views.push);
# the Details modal keeps its text under this many bytes of JSON, leaving room for the rest of the view.
MODAL_TEXT_BYTES = 200_000


def details_view(request: Request) -> dict[str, Any]:
    """The Details modal: the summary and facts; the policy rule that sent the request to review, as
    written (CEL); once decided, the decision (`decision`); then the reviewer's reason, the agent's
    reason, and the whole payload and context as pretty JSON, in sections of at most 3000 chars,
    within 100 blocks and `MODAL_TEXT_BYTES`; what does not fit ends in an honest "… N more
    characters"."""
    blocks: list[Block] = [HeaderBlock(text=plain(one_line(request.summary), MAX_HEADER_TEXT))]
    blocks.append(SectionBlock(fields=facts(request, MAX_SECTION_FIELD_TEXT)))
    if request.rules.review_rule:
        rule = f"Policy v{request.policy_version} rule: {request.rules.review_rule}"
        blocks.append(SectionBlock(text=plain(rule, MAX_SECTION_TEXT)))
    if request.status != Status.PENDING:
        blocks.append(SectionBlock(block_id="decision", text=MarkdownTextObject(text=decision(request))))
    parts = [
        ("Reviewer's reason: ", request.decision_reason),
        ("Reason: ", request.reason),
        ("Payload:\n", request.payload and json_text(request.payload)),
        ("Context:\n", request.context and json_text(request.context)),
    ]
    text = "\n\n".join(f"{title}{part}" for title, part in parts if part)
    blocks.extend(_chunks(text, MAX_BLOCKS_PER_VIEW - len(blocks)))
    return modal("Request details", blocks)


def decision(request: Request) -> str:
    """A decided request's decision as Details shows it (mrkdwn): `✅ Approved by <@U1>, <@U2> at
    2026-12-03 08:00 UTC` (every approver of a quorum; the policy or its timeout when no reviewer
    decided), then the edit, if any."""
    lines = [verdict_line(request, utc=True), edit_line(request)]
    return clip("\n".join(line for line in lines if line), MAX_SECTION_TEXT)


def _chunks(text: str, room: int) -> list[SectionBlock]:
    """`text` in sections of 3000 chars, at most `room` blocks and `MODAL_TEXT_BYTES` of JSON."""
    pieces = [text[i : i + MAX_SECTION_TEXT] for i in range(0, len(text), MAX_SECTION_TEXT)]
    sizes = [len(json.dumps(p)) for p in pieces]  # as sent: ASCII JSON, the largest encoding
    fits = next((n for n in range(len(pieces)) if sum(sizes[: n + 1]) > MODAL_TEXT_BYTES), len(pieces))
    if len(pieces) <= room and fits == len(pieces):
        return [SectionBlock(text=plain(p, MAX_SECTION_TEXT)) for p in pieces]
    kept = min(room - 1, fits)
    left = len(text) - kept * MAX_SECTION_TEXT
    more = f"… {left} more characters not shown (countersign show <request id> prints everything)"
    return [SectionBlock(text=plain(p, MAX_SECTION_TEXT)) for p in pieces[:kept]] + [
        SectionBlock(text=plain(more, 300))
    ]
