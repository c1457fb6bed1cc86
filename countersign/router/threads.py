"""Thread replies under a request's card: what happened after the card was posted, said where its
reviewers look, instead of new top-level messages (the card is rewritten too).

Reminders are posted by `delivery.remind` (due times in the store). Here: the escalation notice
under the card of the level left behind (`escalated`), or why there was no escalation
(`escalation_failed`), and, when a decided card is rewritten, the
news it shows about the agent's side (`refresh`): the execution's outcome, a refusal by the agent's
worker, or why the agent has not run the decision (`OutboxEvent.problem`: a resume job that failed
or was not taken, a webhook failing or given up). Each note is posted once per request and kind: a
Redis key per note posted (`NOTES_PREFIX`, `SET NX`, kept `NOTE_TTL_SECONDS`; the `executed` note
on the request's resumed marker instead, `jobs.note_executed`), given back when Slack refused the
note, so the next rewrite tries it again. Slack's thread replies:
`chat.postMessage` with `thread_ts` (https://docs.slack.dev/messaging/#threading).
"""

from __future__ import annotations

import logging

from redis import Redis
from slack_sdk.errors import SlackApiError

from ..store import CardFacts, Execution, Request
from . import cards, delivery, texts
from .jobs import note_executed, unnote_executed
from .runtime import Runtime

log = logging.getLogger(__name__)

NOTES_PREFIX = "countersign:thread:"
NOTE_TTL_SECONDS = 2 * 24 * 3600  # as long as a resumed marker: a late outcome is still news
EXECUTED = str(Execution.EXECUTED)


def note_once(runtime: Runtime, request: Request, kind: str, text: str) -> bool:
    """Post `text` (mrkdwn) as a reply under the request's card, once per request and `kind`;
    True when posted now. A request without a card gets none; a Slack error or a network error is
    logged and the note left to a later call."""
    if request.card_ts is None or not _take(runtime.redis, request.id, kind):
        return False
    try:
        channel = delivery.conversation(runtime.slack, request.channel)
        runtime.slack.chat_postMessage(channel=channel, thread_ts=request.card_ts, text=text)
    except (SlackApiError, OSError) as exc:
        log.warning("request %s: thread note %s not posted (%s)", request.id, kind, type(exc).__name__)
        _give_back(runtime.redis, request.id, kind)
        return False
    return True


def _take(redis: Redis, request_id: str, kind: str) -> bool:
    """Take the request's note of `kind`: True when no call took it before."""
    if kind == EXECUTED:
        return note_executed(redis, request_id)
    return bool(redis.set(f"{NOTES_PREFIX}{request_id}:{kind}", 1, nx=True, ex=NOTE_TTL_SECONDS))


def _give_back(redis: Redis, request_id: str, kind: str) -> None:
    if kind == EXECUTED:
        unnote_executed(redis, request_id)
    else:
        redis.delete(f"{NOTES_PREFIX}{request_id}:{kind}")


def refresh(runtime: Runtime, request_id: str, leave_stored: bool = False) -> None:
    """Rewrite a decided request's card (`delivery.refresh`; `leave_stored`: not one whose rewrite
    the card sweep holds) and post its news about the agent's side in the card's thread, once per
    kind (`news_kind`), at once either way."""
    facts = delivery.refresh(runtime, request_id, leave_stored)
    if facts is None:
        return
    kind = news_kind(facts)
    line = cards.execution_line(facts.request, facts.refused, facts.problem)
    if kind is not None and line is not None:
        note_once(runtime, facts.request, kind, line)


def news_kind(facts: CardFacts) -> str | None:
    """What the decided card says about the agent's side, as a note's kind: `executed` or
    `failed`, the problem's event (`resume_failed`, `resume_not_taken`, `webhook_failing`,
    `webhook_dead_lettered`, `outcome_unknown`), `refused`; None when there is nothing to tell (a run
    started only)."""
    request = facts.request
    if request.execution in (Execution.EXECUTED, Execution.FAILED):
        return str(request.execution)
    if request.execution is not None:
        unknown = facts.problem is not None and cards.outcome_unknown(facts.problem)
        return "outcome_unknown" if unknown else None
    if facts.problem is not None:
        return facts.problem["event"]
    return "refused" if facts.refused else None


def escalated(runtime: Runtime, old: Request, new: Request) -> None:
    """The escalation notice under the card of the level `old` was at: where the request went and
    who decides it now."""
    note_once(runtime, old, f"escalated-{old.level}", texts.escalated_note(new))


def escalation_failed(runtime: Runtime, request: Request, channel: str, found: int) -> None:
    """The note under the card of `request` (at the level it expired at) when its escalation to
    `channel` found `found` approvers, too few for its quorum, and it was denied instead."""
    note_once(
        runtime,
        request,
        f"escalation-failed-{request.level}",
        texts.escalation_failed_note(request, channel, found),
    )
