"""Every text countersign shows a reviewer, and the rules for showing text safely.

Texts come in two forms where both are needed: mrkdwn for messages (mentions and date tokens,
which Slack renders) and `plain` for a modal's inline errors, which Slack shows as plain text.
Everything an agent wrote is untrusted: `sanitize` it for plain text and `escape` it for mrkdwn
(https://docs.slack.dev/messaging/formatting-message-text); `countersign.untrusted` holds the rules
for showing such text anywhere.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..store import (
    Decider,
    Edit,
    Request,
    ResumeProblem,
    Status,
    TimeoutResult,
    Via,
    WebhookDeadLettered,
    WebhookFailing,
)
from ..untrusted import UNSAFE, one_line, sanitize


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters (code points), ending in "…" when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn parser treats as control characters (and
    `sanitize` the rest)."""
    return sanitize(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code(text: str, limit: int) -> str:
    """`text` (cut to `limit` characters, `escape`d) as a mrkdwn code span. mrkdwn has no escape for a
    backtick, which would end the span early and let the rest be read as mrkdwn, so a backtick in
    `text` is shown as the look-alike U+02CB (modifier letter grave accent)."""
    return "`" + escape(clip(text, limit)).replace("`", "\u02cb") + "`"


def hidden_characters(text: str) -> str | None:
    """The Edit modal's hint for a value holding characters `sanitize` replaces (controls,
    bidirectional overrides), which a text input shows as they are (the value must stay exact, so an
    untouched one is no edit): how many and which code points; None when there are none."""
    found = [ord(c) for c in text if ord(c) in UNSAFE]
    if not found:
        return None
    kinds = sorted(set(found))
    named = ", ".join(f"U+{c:04X}" for c in kinds[:5]) + (", …" if len(kinds) > 5 else "")
    return (
        f"⚠ This value holds {counted(len(found), 'control or bidirectional character')} ({named}), "
        "which can reorder or hide what you read here; Details shows the value escaped."
    )


def show(value: Any) -> str:
    """`value` as a reviewer reads it: a string as it is, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def paragraphs(text: str, lines: int) -> str:
    """`text` (e.g. an agent's reason) with its line breaks kept but bounded: every kind of
    `untrusted.LINE_BREAKS` as a newline, runs of white space as one space, no blank line twice in a row, at
    most `lines` lines, then "… N more lines: see Details"."""
    kept = [" ".join(line.split()) for line in text.splitlines()]
    kept = [line for n, line in enumerate(kept) if line or (n and kept[n - 1])]
    more = len(kept) - lines
    cut = [*kept[:lines], f"… {more} more line{'s' if more > 1 else ''}: see Details"] if more > 0 else kept
    return "\n".join(cut).strip()


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """`count` with its noun in the number it takes: `1 approval`, `2 approvals`, `0 people`
    (`nouns`, the plural, defaults to `noun` + "s")."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def decide(users: list[str]) -> str:
    """The verb for `users` as its subject: "decides" for one, "decide" for more (or none)."""
    return "decides" if len(users) == 1 else "decide"


def mentions(users: list[str], limit: int = 10, joiner: str = " or ") -> str:
    """`<@U1> or <@U2>` for Slack user ids, at most `limit` of them, then "(+N more)"."""
    more = f" (+{len(users) - limit} more)" if len(users) > limit else ""
    return joiner.join(f"<@{user}>" for user in users[:limit]) + more


def when(moment: datetime | None, plain: bool = False) -> str:
    """A Slack date token (shown in the reader's time zone), or with `plain` the UTC text."""
    if moment is None:
        return "an unknown time"
    fallback = moment.strftime("%Y-%m-%d %H:%M UTC")
    return (
        fallback
        if plain
        else f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"
    )


def who(request: Request, plain: bool = False) -> str:
    """Who decided, as mentions (or with `plain`, their names), or with no reviewer the policy's
    way: `policy` (a rule of it, e.g. auto-approval) or `the policy's timeout`."""
    people = request.decided_by or []
    names = (sanitize(p["name"]) if plain else f"<@{p['slack_user_id']}>" for p in people)
    return ", ".join(names) or ("the policy's timeout" if request.decided_via == Via.TIMEOUT else "policy")


def verdict(request: Request, plain: bool = False, utc: bool = False) -> str:
    """`"Approved by <@U123> at <date>"` (mrkdwn; with `utc` the time as `2026-11-29 08:28 UTC`)
    for a decided request, or with `plain` `"approved by alice at 2026-11-29 08:28 UTC"` for places
    that show plain text only (modal errors); for an expired one, what the policy's timeout decided."""
    at = when(request.decided_at, plain or utc)
    if request.status == Status.EXPIRED:
        allowed = request.timeout_result == TimeoutResult.ALLOW
        result = "allowed to proceed (auto-proceeded)" if allowed else "denied"
        text = f"Expired at {at} with no decision: {result} by the policy's timeout"
    else:
        text = f"{request.status.capitalize()} by {who(request, plain)} at {at}"
    return text[0].lower() + text[1:] if plain else text


def not_executed(request: Request, why: str) -> str:
    """The decided card's line when the agent's worker refused to run the approved action; `why`
    is the refusal's code (`ExecutionRefused.why`), e.g. "Not executed: the grant expired at
    <date> (execution refused)"."""
    reasons = {
        "grant_expired": f"the grant expired at {when(request.grant_expires_at)}",
        "bad_signature": (
            "the grant's signature did not verify in the agent's worker (a forged decision, or "
            "another `COUNTERSIGN_SECRET` there)"
        ),
        "payload_mismatch": "the payload the agent's worker was given is not the approved one",
    }
    return f"Not executed: {reasons.get(why, escape(why))} (execution refused)"


def not_resumed(request: Request, problem: ResumeProblem) -> str:
    """The decided card's line while the agent has not run the decision: its resume job failed, or
    no worker has taken it, e.g. "⚠ The agent has not run it: its resume job `agent.resum` failed
    (ValueError: Invalid attribute name: resum); RQ will run it again (3 more times)"; or its
    webhook has not taken it (`not_told`); or, once the run started, that it never reported an
    outcome (`outcome_unknown`: someone must check whether it happened)."""
    if problem["event"] == "outcome_unknown":
        return (
            f"⚠ Outcome unknown: execution started at {when(request.executed_at)} and has reported no "
            "outcome (still running, or its worker stopped or died in it); the decision came again "
            "and was not run again. If no outcome comes, check whether it happened, then report it "
            "(`report_outcome`)"
        )
    lead = (
        "The agent has not run it"
        if request.approved_payload is not None
        else "The agent has not processed it"
    )
    if problem["event"] == "webhook_failing" or problem["event"] == "webhook_dead_lettered":
        return not_told(problem)
    if problem["event"] == "resume_not_taken":
        return (
            f"⚠ {lead}: no worker has taken its resume job from queue `{escape(problem['queue'])}` "
            f"since {when(request.decided_at)}"
        )
    left = problem["retries_left"]
    again = (
        f"RQ will run it again ({left} more time{'s' if left > 1 else ''})"
        if left
        else "RQ will not run it again"
    )
    error = escape(clip(one_line(problem["error"]), 500))  # the agent's exception: it may span lines
    return f"⚠ {lead}: its resume job `{escape(request.resume_func or '')}` failed ({error}); {again}"


def not_told(problem: WebhookFailing | WebhookDeadLettered) -> str:
    """The decided card's line while the agent's webhook has not taken the decision, e.g. "⚠ The
    agent has not been told yet: its webhook did not take the decision (HTTP 500, 1 attempt);
    countersign tries again until <date>". The URL is never shown (the card would make it a link):
    `countersign show` has it, and every attempt."""
    attempts = problem["attempts"]
    tried = f"{escape(clip(problem['error'], 200))}, {attempts} attempt{'s' if attempts != 1 else ''}"
    if problem["event"] == "webhook_dead_lettered":
        return (
            f"⚠ The agent has not been told: its webhook did not take the decision ({tried}); "
            "countersign gave up (dead-lettered)"
        )
    until = datetime.fromisoformat(problem["give_up_at"])
    return (
        f"⚠ The agent has not been told yet: its webhook did not take the decision ({tried}); "
        f"countersign tries again until {when(until)}"
    )


def changes(edits: list[Edit]) -> str:
    """A reviewer's edit as one line, `amount 120.00 → 100.50, memo a → b` (unescaped: `escape` it
    for mrkdwn, `sanitize` it for plain text), each value on one line (`one_line`)."""
    return ", ".join(f"{e['field']} {one_line(show(e['from']))} → {one_line(show(e['to']))}" for e in edits)


def already_decided_text(request: Request, plain: bool = False, user_id: str | None = None) -> str:
    """Answer to a click or submit on a request that is no longer pending (mrkdwn, or `plain` for
    a modal's inline error, which Slack shows as plain text: names, not mentions): its verdict and,
    for an edited approval, the edit that won (`changes`), so the loser of two edits racing knows
    what was approved. To `user_id` among those who decided it, the words a repeated vote gets
    (`counted_text`): "You had already approved …", whichever surface they clicked on."""
    text = verdict(request, plain)
    text = text[0].lower() + text[1:]
    if request.edits:
        edit = clip(changes(request.edits), 500)
        text += f", with the edit {sanitize(edit) if plain else escape(edit)}"
    if user_id is not None and user_id in [p["slack_user_id"] for p in request.decided_by or []]:
        return f"You had already {request.status} this request ({text}); your action changed nothing."
    return f"This request was already {text}; your action changed nothing."


def not_an_approver_text(request: Request) -> str:
    """Answer to a click by someone the policy does not name as an approver, in an ephemeral or a
    modal's inline error. The action class (`[a-z0-9_.-]`, nothing to escape) is written as it is, not
    as a code span: inline errors and notifications show text unformatted, and so does the sandbox."""
    return f"You are not an approver for {request.action} requests, so your action changed nothing."


def escalated_away_text(request: Request, plain: bool = False) -> str:
    """Answer to a click or submit by an approver of an earlier escalation level: where the request
    went and who decides it now, as mentions (mrkdwn, which renders them as names). With `plain`,
    for a modal's inline error, which Slack shows as plain text (an id there would read `U0LEAD`):
    that it moved on, how many approvers decide it there, where to read who and in which channel
    (`escalated_note`, the reply under the card of the level left: the router keeps no channel names,
    and a `<#C…>` link is not rendered there) and what to do, in words."""
    if plain:
        count = len(request.approvers)
        who_now = "its approver decides" if count == 1 else f"its {count} approvers decide"
        return (
            f"This request has moved on to the next level, where {who_now} it now, in the channel the "
            "reply under its earlier card names. You were an approver of an earlier level, so your "
            "action changed nothing; close this form."
        )
    where, who_now = conversation(request.channel), mentions(request.approvers) or "nobody"
    return (
        f"This request was escalated to {who_now} in {where}, who {decide(request.approvers)} it now: "
        "you were an approver of an earlier level, so your action changed nothing."
    )


def reminder_text(request: Request, missing: list[str]) -> str:
    """The thread reply that reminds the approvers still `missing` (user ids) of a pending request
    before it expires, with how many approvals it still needs."""
    deadline = f"; it expires {when(request.expires_at)}" if request.expires_at else ""
    needed = request.required_approvals - (len(request.eligible_approvers) - len(missing))
    still = f"{counted(needed, 'more approval')}" if request.required_approvals > 1 else "a decision"
    return f"⏰ Reminder for {mentions(missing)}: this request still needs {still}{deadline}."


def escalated_note(request: Request) -> str:
    """The thread reply under the card of the level a request escalated from: where it went (the
    `request` as it is now) and who decides it there."""
    return (
        f"⤴ No decision in time: escalated to {conversation(request.channel)}, "
        f"where {mentions(request.approvers)} {decide(request.approvers)} it."
    )


def escalation_failed_note(request: Request, channel: str, found: int) -> str:
    """The thread reply under the card of a request whose escalation to `channel` found `found`
    approvers (its users and user groups resolved), fewer than its quorum, so the policy's timeout
    denied it (fail closed): what went wrong, for whoever keeps the policy's user groups."""
    return (
        f"⚠ No decision in time, and no escalation: the next level in {conversation(channel)} has "
        f"{counted(found, 'approver')}, fewer than the {counted(request.required_approvals, 'approval')} "
        "needed (a user group empty, gone or shrunk?), so the policy's timeout denied it."
    )


def timed_out_text(request: Request) -> str:
    """Answer to a click after the request's deadline (the timeout sweep decides it any moment)."""
    return (
        f"This request timed out at {when(request.expires_at)}; the policy's timeout decides it, "
        "your action changed nothing."
    )


def counted_text(request: Request, approvals: list[Decider], repeated: bool) -> str:
    """Ephemeral answer to an approval that counts towards a quorum not reached yet."""
    first = "You had already approved" if repeated else "Your approval is counted"
    return f"{first}: {len(approvals)} of {request.required_approvals} approvals so far."


UNKNOWN_REQUEST = "countersign does not know this request; your action changed nothing."
NO_EDIT_UNDER_QUORUM = (
    "This request needs more than one approval, so it cannot be edited: reject it with a reason and "
    "let the agent ask again."
)
SELF_APPROVAL = (
    "The agent is acting on your behalf, so another approver has to approve or edit this request; "
    "your action changed nothing."
)


def not_recorded(error: str) -> str:
    """Answer to an action countersign acknowledged but could not record (`error`: the exception's
    class name, e.g. `OperationalError` when the database refused). Only for a failure before the
    commit: after it, `review.after_commit` keeps every error from the reviewer's answer."""
    return f"countersign could not record your action ({error}), so nothing changed: please try again."


def recorded_resume_later(request: Request) -> str:
    """Answer to a decision the database committed whose after-effects (the agent's resume job, the
    card) failed, Redis being unreachable: the decision stands, and the relay sweep publishes it
    from the outbox once Redis answers (`review.after_commit`)."""
    return (
        f"Your decision is recorded: the request is {request.status}. countersign could not reach its "
        "queue just now, so the agent will be resumed when the relay sweep publishes the decision "
        "(seconds after the queue answers again); nothing more to do."
    )


def not_answered(error: str) -> str:
    """Answer to a `/countersign` command countersign could not answer (`error`: the exception's
    class name)."""
    return f"countersign could not answer ({error}): please try again."


REJECT_REASON_REQUIRED = "A reason is required to reject this action class."


# Inline errors under the Edit modal's fields (plain text).
ENTER_A_VALUE = "Enter a value."
EDIT_RULE_INEXACT = (
    "This number has too many digits for the policy's edit rule to check exactly, so it is refused."
)


def not_a_number(integer: bool) -> str:
    """The value typed is not a number in the strict format the field takes (`edits._DECIMAL`,
    `edits._INTEGER`): said exactly, so that `.5` or `100.` is not refused by words that fit it."""
    if integer:
        return "Enter a whole number like 1234: digits only, no point, commas or exponents."
    return (
        "Enter a number like 1234.56 or 0.5: digits, with at most one point between them; no commas or "
        "exponents."
    )


def too_many_digits(limit: int) -> str:
    """The number typed has more than `limit` digits."""
    return f"Use at most {limit} digits."


def too_many_places(places: int) -> str:
    """The number typed has more decimal places than the field's `places`."""
    return f"Use at most {places} decimal places."


def below_min(minimum: str) -> str:
    """The number typed is below the field's `min`."""
    return f"Must be at least {minimum}."


def above_max(maximum: str) -> str:
    """The number typed is above the field's `max`."""
    return f"Must be at most {maximum}."


def too_long(limit: int) -> str:
    """The text typed is longer than the field's `max_length`."""
    return f"Use at most {limit} characters."


def edit_rule_failed(label: str | None) -> str:
    """The policy's `edit_rule` could not be evaluated (the CEL error goes to the log): the edit
    fails closed. `label`: the rule's label, shown instead of its CEL."""
    rule = f"edit rule ({label})" if label else "edit rule"
    return f"The policy's {rule} could not be evaluated, so the edit is refused."


def edit_not_allowed(label: str | None) -> str:
    """The edit breaks the policy's `edit_rule`; `label`: the rule's label, shown instead of its CEL."""
    return (
        f"The policy does not allow this edit: {label}."
        if label
        else "The policy's edit rule does not allow this edit."
    )


# Why a request needs review (the card's "Why:"): a policy rule's label, or plain words, never CEL.
_RULE_NAMES = {"auto_approve": "auto-approval rule", "review_when": "review rule"}
_RESULTS = {True: "held", False: "did not hold", None: "could not be evaluated"}


def rule_result(key: str, held: bool | None, label: str | None) -> str:
    """The result of the rule `key` (`auto_approve` or `review_when`) that decided, e.g. "the
    auto-approval rule did not hold: refunds under 50 are automatic" (without a label, the words
    before the colon)."""
    said = f"the {_RULE_NAMES[key]} {_RESULTS[held]}"
    return f"{said}: {label}" if label else said


def quorum_reason(approvals: int, held: bool | None, label: str | None) -> str:
    """Why `approvals` approvals are needed: a `require` rule held (`held`), or could not be
    evaluated (None), e.g. "2 approvals needed: refunds of 10,000 or more"."""
    if held is None:
        said = f"{approvals} approvals needed because the quorum rule could not be evaluated"
        return f"{said}: {label}" if label else said
    return (
        f"{approvals} approvals needed: {label}"
        if label
        else f"{approvals} approvals needed by the quorum rule"
    )


def always_reviewed(action: str) -> str:
    """Why a request of a class the policy marks `always_review` needs review."""
    return f"every {action} request needs a human"


def reviewed_every(action: str) -> str:
    """Why a request of a class with no gate rule needs review."""
    return f"the policy reviews every {action} request"


# User ids: `U…`, and `W…` on Enterprise Grid (the two kinds `migration.exchange` maps between:
# https://docs.slack.dev/reference/methods/migration.exchange).
USER_ID_PREFIXES = ("U", "W")


def conversation(channel: str) -> str:
    """A policy's channel as mrkdwn: `<@U…>` for a user id (a DM with them), else `<#C…>`."""
    return f"<@{channel}>" if channel.startswith(USER_ID_PREFIXES) else f"<#{channel}>"
