"""The timeout sweep: expiry, escalation and reminders, decided by the database clock; and cards
whose posting died with its process.

A level's clock runs from its card: its deadline follows the card's time in a busy channel and
starts again when the card is posted (`Store.schedule_card`, `Store.attach_card`). A level that
times out with no card posted escalates if its policy says so, and is otherwise denied, even with
`on_timeout: allow` (`Store.expire`): only what a reviewer could have seen may run.

Run every second by the router worker's sweep process (several workers may run it at once). Each
step is a conditional UPDATE in the store, so a click racing the sweep, or two sweeps racing each
other, end in exactly one terminal state, one audit event and one resume event; the Slack side
effects (new card, rewritten card, reminder) follow only the step that won. Expiries due together
share one transaction (one commit per batch); a backlog is drained within one tick, each batch's
publish overlapping the next batch's statement (`_drain`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from ..exceptions import RetryLater
from ..store import Decided, Level, Request, TimeoutResult
from . import delivery, directory, relay, texts, threads
from .delivery import Posted, post_card
from .gate import let_through
from .intake import Taken, approve_by_policy
from .runtime import Runtime

log = logging.getLogger(__name__)


DRAIN_SECONDS = 10.0
EXPIRY_BATCH = 500
"""Timeouts taken and expired together: one database transaction and one Redis transaction for
their resume jobs a batch, so a backlog of 10,000 takes 20 of each (BENCHMARKS.md, "Issue 14, second
pass")."""
REWRITES_PER_TICK = 1
"""Decided cards the sweep rewrites a tick (one a second): chat.update is Tier 3, 50+ a minute per
workspace (https://docs.slack.dev/apis/web-api/rate-limits); a 429 is honoured for its Retry-After."""


def sweep(
    runtime: Runtime,
    limit: int = 100,
    drain_seconds: float = DRAIN_SECONDS,
    rewrites: int = REWRITES_PER_TICK,
    batch: int = EXPIRY_BATCH,
) -> int:
    """Time out, escalate and remind what is due; returns how many requests changed state.

    Timeouts are taken `batch` at a time, and taken again at once while a whole batch was due and
    changed, for up to `drain_seconds` (first those that expire, in one statement a batch, then those
    that escalate): a backlog (many requests timing out together) drains in one
    tick instead of `batch` a second, and reminders and cards (`limit` a tick) and the relay still
    get their turn. The
    cards of expired requests are not rewritten with their expiry but by the card step, `rewrites`
    a tick, oldest due first, at Slack's pace.
    """
    changed = _timeouts(runtime, batch, time.monotonic() + drain_seconds)
    for request in runtime.store.due_for_reminder(limit):
        _each(_remind, runtime, request)
    for request in runtime.store.due_for_card_refresh(rewrites):
        # an expired card, or one Slack would not rewrite earlier
        _each(lambda rt, r: threads.refresh(rt, r.id), runtime, request)
    for request in runtime.store.due_for_card(limit=limit):
        _each(_card_due, runtime, request)
    return changed


def _card_due(runtime: Runtime, request: Request) -> Posted | Taken:
    """A pending request with no card and no live posting lease (`Store.due_for_card`): its posting
    died with a process, so find the card or post it (`post_card`). Never a card for a request its
    gate let through (`gate.let_through` of its stored reason): an older version stored that one
    pending and died before approving it by policy (this one stores it approved, in one
    transaction); approve it now, as its intake would have (DESIGN.md, invariant 12)."""
    if not let_through(request.rules.review_rule):
        return post_card(runtime, request)
    log.warning("request %s: let through by its gate but left pending; approving it by policy", request.id)
    return approve_by_policy(runtime, request)


def _timeouts(runtime: Runtime, batch: int, until: float) -> int:
    """`sweep`'s timeouts until the monotonic clock reaches `until`: those that expire drained in
    SQL (`_drain`), then those that escalate, and any the drain left (it failed or ran out of time:
    one by one, `_time_out`). Requests that expire and fell due after the drain's statement (a
    backlog made due while the tick began) are drained again rather than taken one by one, for as
    long as a drain takes some: each of its batches is one statement, where `_time_out` reads each
    row whole and writes its events in Python (about twice the sweep's CPU and three times the wall
    time a row: BENCHMARKS.md, "Issue 14, eighth pass"). Returns how many changed state."""
    changed = _drain(runtime, batch, until)
    drain_again = True
    while True:
        due = runtime.store.due_for_timeout(batch)
        if drain_again and time.monotonic() < until and any(_next_level(one) is None for one in due):
            drained = _drain(runtime, batch, until)
            changed += drained
            drain_again = drained > 0  # none taken (rows a click holds, or it failed): one by one below
            if drained:
                continue
        done = _time_out(runtime, due)
        changed += done
        if len(due) < batch or done < len(due) or time.monotonic() > until:
            return changed


def _each(step: Callable[[Runtime, Request], Any], runtime: Runtime, request: Request) -> int:
    """Run one request's step; a failure (Slack down, a network error) is logged and retried on a
    later tick without holding up the other requests or the rest of the sweep."""
    try:
        return 1 if step(runtime, request) else 0
    except RetryLater as later:
        log.info("request %s: retrying in %.3f s", request.id, later.seconds)
    except Exception:
        log.exception("request %s: sweep step failed; retrying later", request.id)
    return 0


def _time_out(runtime: Runtime, due: list[Request]) -> int:
    """Escalate the due requests whose policy says so (one by one: each asks Slack for its next
    approvers); expire the rest together. Returns how many changed state."""
    expiring: list[tuple[Request, TimeoutResult]] = []
    changed = 0
    for request in due:
        next_level = _next_level(request)
        if next_level is not None:
            changed += _each(functools.partial(_escalate, level=next_level), runtime, request)
        else:
            on_timeout = request.rules.level(request.level).on_timeout
            result = TimeoutResult.ALLOW if on_timeout == "allow" else TimeoutResult.DENY
            expiring.append((request, result))
    return changed + _expire(runtime, expiring)


def _next_level(request: Request) -> Level | None:
    """The level a timed-out `request` escalates to, or None when it expires (its level's
    `on_timeout` is not `escalate`, or it is the last level): what `_drain` takes in SQL."""
    levels = request.rules.levels
    if request.rules.level(request.level).on_timeout == "escalate" and request.level + 1 < len(levels):
        return levels[request.level + 1]
    return None


def _drain(runtime: Runtime, batch: int, until: float) -> int:
    """Expire the due requests whose policy does not escalate them, `batch` at a time
    (`_expire_due`), back to back while whole batches come back and the monotonic clock is before
    `until`, and publish each batch (`_expired`). Returns how many were expired.

    A batch that is not full (nothing more was due: every idle tick) is published at once. Once one
    is full, each batch's resume events are published (`_publish`) on a thread of its own while the
    next batch's statement runs in the database, so that the database's work and the publishing
    (Redis, and this process's CPU) overlap instead of taking turns; the next batch is published
    only when the one before has been, and everything else (`_report`: logs, a lost card adopted
    through Slack) stays on this thread. The outbox is unchanged by it: each batch is committed
    before its publish starts, and an event whose publish failed stays unpublished for the relay.
    The publishing thread is a daemon: a sweep told to stop (SIGTERM: `SystemExit` on this thread)
    exits without waiting for it, which could wait on a database lock the interrupted statement
    still holds; its events stay unpublished for the next sweep's relay."""
    decided = _expire_due(runtime, batch)
    if len(decided) < batch:
        return _expired(runtime, decided)
    changed = 0
    while decided:
        publishing = threading.Thread(
            target=_publish, args=(runtime, decided), name="countersign-publish", daemon=True
        )
        publishing.start()
        more = len(decided) == batch and time.monotonic() < until
        following = _expire_due(runtime, batch) if more else []
        publishing.join()  # `_publish` raises nothing
        changed += _report(runtime, decided)
        decided = following
    return changed


def _expire_due(runtime: Runtime, batch: int) -> list[Decided]:
    """Expire up to `batch` due requests whose policy does not escalate them, in one store
    transaction that reads nothing first (`Store.expire_due`). If it fails, nothing is expired (the
    sweep's second loop then takes them one by one). Returns the `Decided` of those expired."""
    try:
        return runtime.store.expire_due(batch, runtime.resume_event)
    except Exception:
        log.exception("expiring up to %d due requests together failed; trying them one by one", batch)
        return []


def _expire(runtime: Runtime, due: list[tuple[Request, TimeoutResult]]) -> int:
    """Expire `(request, result)`s in one store transaction and publish them (`_expired`). If the
    batch fails, each request is tried alone, so one bad request cannot hold the others up.
    Returns how many were expired."""
    if not due:
        return 0
    try:
        decided = runtime.store.expire(due, runtime.resume_event)
    except Exception:
        if len(due) == 1:
            log.exception("request %s: expiry failed; retrying later", due[0][0].id)
            return 0
        log.exception("expiring %d requests together failed; expiring them one by one", len(due))
        return sum(_expire(runtime, [one]) for one in due)
    return _expired(runtime, decided)


def _expired(runtime: Runtime, decided: list[Decided]) -> int:
    """Publish the resume events of just-expired requests together (`_publish`), then log them and
    adopt their lost cards (`_report`). Returns how many there are."""
    _publish(runtime, decided)
    return _report(runtime, decided)


def _publish(runtime: Runtime, decided: list[Decided]) -> None:
    """Publish the resume events of just-expired (committed) requests together: one Redis
    transaction, one more database transaction (`relay.publish_all`). A failure is logged, not
    raised: the events stay unpublished and the relay sweep publishes them (each job once)."""
    if not decided:
        return
    try:
        relay.publish_all(runtime.store, runtime.redis, [one.event for one in decided])
    except Exception:
        log.exception(
            "resume events of %s not marked published; the relay retries",
            texts.counted(len(decided), "expired request"),
        )


def _report(runtime: Runtime, decided: list[Decided]) -> int:
    """After `_publish`: their cards are rewritten later, at Slack's pace, by the card step (the
    store marks them due), but for a card whose poster died before storing it, looked up at once.
    Logs one line for them all (each expiry is in its request's audit trail), and a warning for
    each whose card was never posted. Returns how many there are."""
    if not decided:
        return 0
    results = Counter(str(one.request.timeout_result) for one in decided)
    log.info(
        "%s expired: %s",
        texts.counted(len(decided), "request"),
        ", ".join(f"{n} {why}" for why, n in sorted(results.items())),
    )
    for one in decided:
        if one.request.card_ts is not None:
            continue
        # `allow` needs a card someone saw: the store denied it
        log.warning(
            "request %s expired at level %s: deny (its card was never posted, so nothing runs)",
            one.request.id,
            one.request.level,
        )
        if one.request.card_attempts > 0:  # a card posted by a process that died: adopt it
            _each(_adopt_card, runtime, one.request)
    return len(decided)


def _adopt_card(runtime: Runtime, request: Request) -> None:
    """Find the card of an expired `request` whose poster died before storing it, and rewrite it as
    expired (the request read again: an expiry's row holds only the decision's columns)."""
    row = runtime.store.get(request.id)
    if row is not None:
        delivery.update_card(runtime, runtime.slack, row)


def _escalate(runtime: Runtime, request: Request, level: Level) -> int:
    try:  # Slack busy or unreachable raises RetryLater: the next tick tries again
        approvers = directory.approvers(runtime.slack, level.users, level.usergroups)
    except SlackApiError:
        approvers = []  # Slack refused for good (e.g. the user group is gone): nobody can decide
    if len(approvers) < request.required_approvals:  # a user group shrank below the quorum
        log.error(
            "request %s: the next level has %s for a quorum of %d; denying",
            request.id,
            texts.counted(len(approvers), "approver"),
            request.required_approvals,
        )
        runtime.store.record(
            request.id, "escalation_failed", "policy", why="too_few_approvers", approvers=approvers
        )
        denied = _expire(runtime, [(request, TimeoutResult.DENY)])
        if denied:
            threads.escalation_failed(runtime, request, level.channel, len(approvers))
        return denied
    row = runtime.store.escalate(request, level.channel, approvers)
    if row is None:
        return 0
    log.info("request %s escalated to level %s in %s", request.id, row.level, row.channel)
    delivery.mark_escalated(runtime, request, row.channel)
    threads.escalated(runtime, request, row)
    try:
        post_card(runtime, row)
    except RetryLater as later:  # routine pacing: the sweep's due_for_card posts it a little later
        log.info("request %s: escalation card not posted yet (%s)", request.id, later)
    except SlackApiError as exc:  # the sweep's due_for_card tries again a little later
        log.warning("request %s: escalation card not posted yet (%s)", request.id, exc)
    return 1


def _remind(runtime: Runtime, request: Request) -> None:
    """Post a due reminder, mentioning the approvers who may decide and have not voted, and only
    then mark it sent: one Slack is busy for stays due (its claim runs out and a later tick posts
    it); one Slack refuses for good is marked failed."""
    if not runtime.store.claim_reminder(request):
        return
    voted = {vote.slack_user_id for vote in runtime.store.votes(request.id)}
    missing = [user for user in request.eligible_approvers if user not in voted]
    try:
        delivery.remind(runtime.slack, request, missing)
    except SlackApiError as exc:
        log.warning("request %s: reminder not posted (%s)", request.id, exc.response.get("error"))
        runtime.store.reminder_sent(request, failed=str(exc.response.get("error")))
        return
    runtime.store.reminder_sent(request)
