"""The timeout sweep: expiry, escalation and reminders, decided by the database clock; and cards
whose posting died with its process.

Run every second by the router worker's sweep process (several workers may run it at once). Each
step is a conditional UPDATE in the store, so a click racing the sweep, or two sweeps racing each
other, end in exactly one terminal state, one audit event and one resume event; the Slack side
effects (new card, rewritten card, reminder) follow only the step that won.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from ..store import ApprovalRequest
from . import cards, decisions, directory, relay
from .decision import decision_of
from .delivery import RetryLater, post_card
from .runtime import Runtime

log = logging.getLogger(__name__)


def sweep(runtime: Runtime, limit: int = 100) -> int:
    """Time out, escalate and remind what is due; returns how many requests changed state."""
    changed = sum(_each(_time_out, runtime, request) for request in runtime.store.due_for_timeout(limit))
    for request in runtime.store.due_for_reminder(limit):
        _each(_remind, runtime, request)
    for request in runtime.store.due_for_card(limit=limit):
        _each(post_card, runtime, request)  # its posting died with a process: find the card or post it
    return changed


def _each(step: Callable[[Runtime, ApprovalRequest], Any], runtime: Runtime, request: ApprovalRequest) -> int:
    """Run one request's step; a failure (Slack down, a network error) is logged and retried on a
    later tick without holding up the other requests or the rest of the sweep."""
    try:
        return 1 if step(runtime, request) else 0
    except RetryLater as later:
        log.info("request %s: retrying in %s s", request.id, later.seconds)
    except Exception:
        log.exception("request %s: sweep step failed; retrying later", request.id)
    return 0


def _time_out(runtime: Runtime, request: ApprovalRequest) -> int:
    levels = request.rules.get("levels") or [{"on_timeout": "deny"}]
    on_timeout = levels[min(request.level, len(levels) - 1)]["on_timeout"]
    if on_timeout == "escalate" and request.level + 1 < len(levels):
        return _escalate(runtime, request, levels[request.level + 1])
    return _expire(runtime, request, "allow" if on_timeout == "allow" else "deny")


def _expire(runtime: Runtime, request: ApprovalRequest, result: str) -> int:
    secret = runtime.settings.COUNTERSIGN_SECRET or ""
    decided = runtime.store.expire(request, result, lambda row: decision_of(row, secret))
    if decided is None:
        return 0
    log.info("request %s expired at level %s: %s", request.id, request.level, result)
    relay.try_publish(runtime.store, runtime.redis, decided.event)
    decisions.update_card(runtime.slack, decided.request)
    return 1


def _escalate(runtime: Runtime, request: ApprovalRequest, level: dict[str, Any]) -> int:
    try:
        approvers = directory.approvers(runtime.slack, level["users"], level["usergroups"])
    except SlackApiError as exc:
        if exc.response.status_code == 429 or exc.response.status_code >= 500:
            raise RetryLater(5) from None  # Slack is busy: the next tick tries again
        approvers = []  # Slack refused for good (e.g. the user group is gone): nobody can decide
    if len(approvers) < request.required_approvals:  # a user group shrank below the quorum
        log.error(
            "request %s: the next level has %d approver(s) for a quorum of %d; denying",
            request.id,
            len(approvers),
            request.required_approvals,
        )
        runtime.store.record(
            request.id, "escalation_failed", "policy", why="too_few_approvers", approvers=approvers
        )
        return _expire(runtime, request, "deny")
    row = runtime.store.escalate(request, level["channel"], approvers, level["timeout"])
    if row is None:
        return 0
    log.info("request %s escalated to level %s in %s", request.id, row.level, row.channel)
    if request.card_ts is not None:
        try:
            runtime.slack.chat_update(
                channel=request.channel,
                ts=request.card_ts,
                **cards.escalated_card(request, row.channel).message(),
            )
        except SlackApiError as exc:
            log.warning("request %s: old card not updated (%s)", request.id, exc.response.get("error"))
    try:
        post_card(runtime, row)
    except (SlackApiError, RetryLater) as exc:  # the sweep's due_for_card posts it a little later
        log.warning("request %s: escalation card not posted yet (%s)", request.id, exc)
    return 1


def _remind(runtime: Runtime, request: ApprovalRequest) -> None:
    if not runtime.store.claim_reminder(request):
        return
    try:
        runtime.slack.chat_postMessage(
            channel=request.channel, thread_ts=request.card_ts, text=cards.reminder_text(request)
        )
    except SlackApiError as exc:
        log.warning("request %s: reminder not posted (%s)", request.id, exc.response.get("error"))
