"""Slack rendering of the reviewer's own surfaces, beside the cards of `router/cards.py` and by its
rules (agent text as `plain_text` or escaped, Block Kit through slack_sdk's validating models): the
answers of the `/countersign` command.

Limits (https://docs.slack.dev/reference/block-kit/blocks): 50 blocks a message, so an answer lists
at most `MAX_LISTED` requests and says how many more there are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from ..store import AuditEvent, Execution, Request, Status
from ..untrusted import one_line
from .cards import (
    CARD_FIELD_MAX,
    MAX_BLOCKS_PER_VIEW,
    MAX_HEADER_TEXT,
    MAX_SECTION_TEXT,
    decision_buttons,
    payload_lines,
    plain,
)
from .texts import USER_ID_PREFIXES, clip, code, counted, escape, verdict, when

MAX_LISTED = 20  # requests in one answer: two blocks each, within Slack's 50 a message
MAX_TRAIL = 12  # audit events `show` lists, the latest
KEY_FIELDS_LISTED = 3  # payload fields shown per request in a list
HOME_LISTED = 25  # requests waiting on the Home tab: three blocks each, within Slack's 100 a view
HOME_RECENT = 10  # requests "decided by you recently": one context block each (25 * 3 + 10 + 8 <= 100)
GATES_REVIEWERS = 20  # reviewers listed in the admins' "Gates", most decisions first
Gates = dict[str, dict[str, dict[str, Any]]]
"""The admins' "Gates": `{"actions": {action class: Tally.as_dict}, "reviewers": {user id:
Tally.as_reviewer_dict}}`."""

COMMAND = "/countersign"
USAGE = [
    ("pending", "the requests you may decide now, oldest deadline first"),
    ("show ID", "one request: status, decision and its audit trail"),
    ("stats [ACTION]", "how many requests there are, by status and outcome"),
    ("help", "this list"),
]


def message(text: str, blocks: Sequence[Block]) -> dict[str, Any]:
    """An ephemeral answer for `respond` (a slash command's `response_url`): `response_type`,
    `text` (the fallback) and the blocks as dicts (validated by slack_sdk)."""
    return {"response_type": "ephemeral", "text": text, "blocks": [block.to_dict() for block in blocks]}


def _note(block_id: str, text: str) -> dict[str, Any]:
    """A one-section answer saying `text` (mrkdwn)."""
    return message(text, [SectionBlock(block_id=block_id, text=MarkdownTextObject(text=text))])


def help_message(unknown: str | None = None) -> dict[str, Any]:
    """The list of subcommands; with `unknown`, first says that subcommand is not one."""
    lines = [f"`{COMMAND} {usage}`: {what}" for usage, what in USAGE]
    if unknown is not None:
        lines.insert(0, f"{code(unknown, 40)} is not a {COMMAND} subcommand.")
    return _note("help", "\n".join(lines))


def _entry_ids(request_id: str, version: str) -> tuple[str, str, str]:
    """The `block_id`s of one request in a list (`version`: where it is listed), each naming the
    request: its section, its id line, and its buttons (on the Home tab only)."""
    return f"req-{request_id}-{version}", f"id-{request_id}-{version}", f"decide-{request_id}"


def home_entry(request_id: str, blocks: list[Any]) -> list[dict[str, Any]]:
    """The blocks of request `request_id`'s entry among a Home view's `blocks` (as `home_view`
    renders them and Slack returns them): those whose `block_id` is one of its `_entry_ids`, in the
    view's order; [] when it is not listed (or `request_id` is empty)."""
    ids = set(_entry_ids(request_id, "home")) if request_id else set()
    return [block for block in blocks if isinstance(block, dict) and block.get("block_id") in ids]


def request_blocks(request: Request, version: str) -> list[Block]:
    """One request in a list: its summary, action class, first key payload fields and, while it is
    pending, its deadline (a section), and its id (a context line, for `show`); `block_id`s from
    `_entry_ids`. A decided request's verdict is `show_message`'s status line alone."""
    section, id_line, _ = _entry_ids(request.id, version)
    lines = payload_lines(request.payload_to_run, request.rules.key_fields)[:KEY_FIELDS_LISTED]
    fields: list[PlainTextObject | MarkdownTextObject] = [plain(f"Action: {request.action}", CARD_FIELD_MAX)]
    fields += [plain(line, CARD_FIELD_MAX) for line in lines]
    if request.status == Status.PENDING:
        fields.append(MarkdownTextObject(text=_due(request)))
    return [
        SectionBlock(
            block_id=section,
            text=plain(one_line(request.summary), MAX_HEADER_TEXT),
            fields=fields,
        ),
        ContextBlock(block_id=id_line, elements=[MarkdownTextObject(text=f"`{request.id}`")]),
    ]


def _due(request: Request) -> str:
    """When a pending request is due (mrkdwn): "Due <date>", or "No deadline"."""
    return f"Due {when(request.expires_at)}" if request.expires_at else "No deadline"


def pending_message(queue: list[Request], more: bool) -> dict[str, Any]:
    """The answer to `pending`: the requests the reviewer may decide now (`queue`, in order), and
    whether there are more than listed."""
    if not queue:
        return _note("pending", "Nothing is waiting for you.")
    head = f"{counted(len(queue), 'request')}{'+' if more else ''} waiting for you, oldest deadline first:"
    blocks: list[Block] = [SectionBlock(block_id="pending", text=MarkdownTextObject(text=head))]
    for request in queue[:MAX_LISTED]:
        blocks += request_blocks(request, "pending")
    return message(head, blocks)


def _actor(actor: str | None) -> str:
    if actor is None:
        return "countersign"
    return f"<@{actor}>" if actor.startswith(USER_ID_PREFIXES) and actor.isalnum() else escape(actor)


def trail_line(event: AuditEvent) -> str:
    """One audit event as `show` lists it: `when · event · actor` (mrkdwn)."""
    return f"{when(event.at)} · {escape(event.event)} · {_actor(event.actor)}"


def missing_id_message() -> dict[str, Any]:
    """The answer to `show` without an id: the id is missing, and how to find one."""
    return _note(
        "show",
        f"`{COMMAND} show` needs a request id: `{COMMAND} show ID` (ids are listed by `{COMMAND} pending`).",
    )


def not_shown_message(request_id: str) -> dict[str, Any]:
    """The answer to `show ID` for a request the user may not see, or one countersign does not know:
    the same words for both, so it says nothing about the request, not even whether it exists."""
    return _note(
        "show",
        f"No request {code(request_id, 64)} that you may see: "
        "`show` answers the request's approvers and the policy's admins.",
    )


def admins_only_message() -> dict[str, Any]:
    """The answer to `stats` for a user who is not one of the policy's `admins`."""
    return _note(
        "stats",
        f"`{COMMAND} stats` answers the policy's admins only "
        '(they see the same numbers under "Gates" on the app\'s Home tab).',
    )


def unknown_action_message(action: str, dead_lettered: int) -> dict[str, Any]:
    """The answer to `stats ACTION` for an action class the policy does not name and no approval
    request has: said so, with the `dead_lettered` intake messages that named it (as `countersign
    stats` and the Home tab's "Gates" count them), when there were any."""
    if dead_lettered:
        return _note(
            "stats",
            f"{code(action, 64)} is not in the policy; {dead_lettered} dead-lettered "
            f"request{'s' if dead_lettered != 1 else ''} named it (refused at intake), "
            "and no other request has it.",
        )
    return _note(
        "stats",
        f"{code(action, 64)} is not an action class: the policy does not name it and no request used it.",
    )


def show_message(request: Request, trail: list[AuditEvent]) -> dict[str, Any]:
    """The answer to `show ID` (for one who may see it, `commands.may_see`): status, decision and the
    latest `MAX_TRAIL` audit events."""
    state = "Pending" if request.status == Status.PENDING else verdict(request)
    lines = [trail_line(event) for event in trail[-MAX_TRAIL:]]
    if len(trail) > MAX_TRAIL:
        lines.insert(0, f"… {len(trail) - MAX_TRAIL} earlier events (`countersign show {request.id}`)")
    blocks: list[Block] = [
        *request_blocks(request, "show"),
        SectionBlock(
            block_id="status", text=MarkdownTextObject(text=clip(f"*Status:* {state}", MAX_SECTION_TEXT))
        ),
        SectionBlock(
            block_id="trail", text=MarkdownTextObject(text=clip("\n".join(lines), MAX_SECTION_TEXT))
        ),
    ]
    return message(f"{request.status}: {escape(one_line(request.summary))}", blocks)


def stats_message(
    counts: dict[tuple[Status, Execution | None], int], action: str | None, dead_lettered: int
) -> dict[str, Any]:
    """The answer to `stats [ACTION]`: requests by status, the `dead_lettered` intake messages (refused
    before they became requests), and the approved ones by how their run went (`executed`,
    `failed`, `started`, or not run yet)."""
    by_status = {status: 0 for status in Status}
    runs: dict[str, int] = {}
    for (status, execution), count in counts.items():
        by_status[status] += count
        if status == Status.APPROVED:
            name = str(execution) if execution is not None else "not run"
            runs[name] = runs.get(name, 0) + count
    scope = code(action, 64) if action else "all action classes"
    parts = [f"{status}: {count}" for status, count in by_status.items()] + [
        f"dead-lettered: {dead_lettered}"
    ]
    run_text = ", ".join(f"{name} {count}" for name, count in sorted(runs.items()))
    text = (
        f"Requests of {scope}: " + " · ".join(parts) + (f"\nApproved, by run: {run_text}" if run_text else "")
    )
    return _note("stats", text)


def home_view(
    queue: list[Request],
    more: bool,
    decided: list[Request],
    gates: Gates | None = None,
) -> dict[str, Any]:
    """The App Home tab of a reviewer (`views.publish`'s `view`): the counts, "Waiting for you" (the
    `queue`, in order, each with the card's Approve / Reject / Edit / Details buttons, and whether
    there are more than listed), "Decided by you recently" (`decided`, latest first) and, for an
    admin, "Gates" (`gates_blocks`). Every block of a request's entry has a `block_id` naming it
    (`_entry_ids`), so a decision made there audits that entry alone (`home_entry`)."""
    waiting = f"{len(queue)}{'+' if more else ''}"
    blocks: list[Block] = [
        ContextBlock(
            block_id="counts",
            elements=[
                MarkdownTextObject(
                    text=f"Waiting for you: {waiting} · Decided by you recently: {len(decided)}"
                )
            ],
        ),
        HeaderBlock(block_id="waiting", text=f"Waiting for you ({waiting})"),
    ]
    if not queue:
        blocks.append(
            SectionBlock(block_id="none", text=MarkdownTextObject(text="Nothing is waiting for you."))
        )
    for request in queue[:HOME_LISTED]:
        blocks += request_blocks(request, "home")
        buttons = _entry_ids(request.id, "home")[2]
        blocks.append(ActionsBlock(block_id=buttons, elements=decision_buttons(request)))
    blocks.append(HeaderBlock(block_id="decided", text="Decided by you recently"))
    blocks += [_decided_line(request) for request in decided[:HOME_RECENT]] or [
        SectionBlock(block_id="recent", text=MarkdownTextObject(text="Nothing yet."))
    ]
    if gates is not None:
        blocks += gates_blocks(gates)
    assert len(blocks) <= MAX_BLOCKS_PER_VIEW
    return View(type="home", blocks=blocks).to_dict()


def _decided_line(request: Request) -> ContextBlock:
    """One line of "Decided by you recently": the agent's summary as `plain_text` (mrkdwn has no
    escape for `*`, `_` or `~`, so an agent's `*urgent*` would show bold), then the verdict (mrkdwn:
    mentions and a date token)."""
    return ContextBlock(
        block_id=f"recent-{request.id}",
        elements=[plain(one_line(request.summary), 80), MarkdownTextObject(text=verdict(request))],
    )


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g} s"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _count(number: int, noun: str) -> str:
    """`1 decision`, `2 decisions`: `number` and `noun`, plural (an `s`) unless it is 1."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def gates_line(action: str, tally: dict[str, Any]) -> str:
    """One action class in "Gates" (mrkdwn): its requests and where they are (`Tally.as_dict` of
    store/stats.py: the outcomes add up to the requests), how many escalated, the median and p95
    seconds to a human decision and the rubber-stamp share, "n/a" where there is none."""
    return (
        f"*{escape(clip(action, 64))}*: {_count(tally['requests'], 'request')} · "
        f"{tally['auto_approved']} auto-approved · "
        f"{tally['approved']} approved · {tally['edited']} edited · {tally['rejected']} rejected · "
        f"{tally['expired']} expired · {tally['pending']} pending · "
        f"{tally['dead_lettered']} dead-lettered · {tally['escalated']} escalated · "
        f"median {_seconds(tally['median_seconds'])}, p95 {_seconds(tally['p95_seconds'])} to decide · "
        f"rubber stamps {_share(tally['rubber_stamp_share'])}"
    )


def reviewer_line(user: str, tally: dict[str, Any]) -> str:
    """One reviewer in "Gates" (mrkdwn): the decisions they took part in, their approvals (edited
    ones included) and rejections (`Tally.as_reviewer_dict`), and the share of the approvals that
    were rubber stamps."""
    approvals = tally["approved"] + tally["edited"]
    return (
        f"{_actor(user)}: {_count(tally['decisions'], 'decision')} · {_count(approvals, 'approval')} · "
        f"{_count(tally['rejected'], 'rejection')} · rubber stamps {_share(tally['rubber_stamp_share'])}"
    )


def gates_blocks(gates: Gates) -> list[Block]:
    """The admins' "Gates" section of the Home tab (`Gates`, last 30 days): a header, one line per
    action class, and one per reviewer, the `GATES_REVIEWERS` with most decisions (then "… N more"):
    four blocks, each section cut to 3,000 characters
    (https://docs.slack.dev/reference/block-kit/blocks/section-block)."""
    lines = [gates_line(action, tally) for action, tally in gates["actions"].items()]
    text = "\n".join(lines) or "No requests in the last 30 days."
    busiest = sorted(gates["reviewers"].items(), key=lambda item: (-item[1]["decisions"], item[0]))
    people = [reviewer_line(user, tally) for user, tally in busiest[:GATES_REVIEWERS]]
    if len(busiest) > GATES_REVIEWERS:
        people.append(f"… {len(busiest) - GATES_REVIEWERS} more reviewers (`countersign stats`)")
    who_text = "\n".join(people) or "No human decisions in the last 30 days."
    return [
        HeaderBlock(block_id="gates", text="Gates (last 30 days)"),
        SectionBlock(block_id="gates-lines", text=MarkdownTextObject(text=clip(text, MAX_SECTION_TEXT))),
        HeaderBlock(block_id="gates-reviewers", text="Reviewers (last 30 days)"),
        SectionBlock(
            block_id="gates-reviewer-lines", text=MarkdownTextObject(text=clip(who_text, MAX_SECTION_TEXT))
        ),
    ]
