"""The intake job: validate, dedupe, route by policy, hold to the policy's intake limits, store, post
the card.

Runs on the router worker (`countersign worker`, queue `countersign`), at most a few jobs of one
action class queued or running at once (`jobs.intake_lane`). It is safe to run twice for
one request: the store keeps one row per requester's idempotency key and one card `ts` per request. A message
that cannot become a request is dead-lettered with its reason, never dropped (DESIGN.md,
invariant 8). Slack busy or unreachable is not such a reason: the one Slack call made before the
request is stored (`usergroups.users.list`, resolving the approvers) is tried again by
rescheduling the job, as the card's calls are; only Slack's refusals for good, or Slack busy for
every run RQ allows, dead-letter it. A job that runs again keeps the approvers its first run stored.
A request the gate lets through is stored approved by policy in one transaction, and one it sends to
review with its card's posting lease: no crash leaves a row the card sweep misreads (DESIGN.md,
invariant 12).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Literal

from rq import Retry, get_current_job
from slack_sdk.errors import SlackApiError

from .. import bell
from ..exceptions import IntakeLimitReached, InvalidRequest, PolicyError, RetryLater
from ..idempotency import release_key, remember_key
from ..schema import ALLOW_HTTP, ApprovalRequestV1, IntakeMessage, QueueResume, WebhookResume, parse
from ..store import Decided, Outcome, Request, Via, eligible_approvers
from . import directory, homedue, limits, pace, relay
from .delivery import post_card, refresh
from .gate import Gate, let_through
from .jobs import INTAKE_RETRY, leave_intake_lane
from .pace import CLOCK_SLACK_SECONDS, Slot
from .policy import Policy, Route
from .runtime import Runtime, current
from .texts import counted

log = logging.getLogger(__name__)

MAX_RESCHEDULES = 5
FIRST_LEVEL = 0  # a new request's escalation level (`ApprovalRequest.level`)

# What intake asks of Redis before it stores a request, in one round trip on one reading of Redis's
# clock (`_admit`). KEYS: the rate window, the channel's next free time, the card's reservation, the
# Home tabs' due set. ARGV: request id, per-minute limit, window ms, pace ms, ms after its time a
# reservation lapses, Home debounce s, due set TTL s, then the approvers (none: no card). Returns {ms to wait}
# when over the rate limit, {0} without approvers, else {0, reserved ms, channel's next free ms,
# clock s, clock µs}.
_ADMIT = (
    limits.ADMIT_LUA
    + pace.RESERVE_LUA
    + homedue.MARK_LUA
    + """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local wait = admit(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), now)
if wait > 0 or #ARGV < 8 then
    return {wait}
end
local slot, free = reserve(KEYS[2], KEYS[3], tonumber(ARGV[4]), tonumber(ARGV[5]), now)
mark_due(KEYS[4], math.floor(math.max(slot, now) / 1000) + tonumber(ARGV[6]), tonumber(ARGV[7]), 8)
return {0, slot, free, tonumber(time[1]), tonumber(time[2])}
"""
)


Taken = Literal["posted", "found", "auto_approved", "duplicate", "dead_letter"]


def intake(message: Any) -> Taken | Retry:
    """RQ job (router worker, `jobs.INTAKE_JOB`). Returns what happened: `posted` | `found` |
    `auto_approved` | `duplicate` | `dead_letter`, or an RQ `Retry` when the channel's pace or Slack
    asks to wait (the job is rescheduled, no worker sleeps)."""
    return handle(current(), message)


def handle(runtime: Runtime, message: Any) -> Taken | Retry:
    """Turn one intake message (`IntakeMessage` as JSON) into a stored request, then either a card
    for its approvers or, when the policy's gate allows it, an approval by policy (no card)."""
    policy = runtime.policy  # one version for the whole intake, even if the file changes meanwhile
    key: tuple[str, str] | None = None  # (requester, idempotency key)
    try:
        parsed = parse(IntakeMessage, message, _checks(runtime))
        request = parsed.request
        key = (request.requester, request.key)
        if isinstance(request.resume, WebhookResume) and not runtime.settings.COUNTERSIGN_WEBHOOK_SECRET:
            raise InvalidRequest(
                "resume.webhook: this router has no COUNTERSIGN_WEBHOOK_SECRET to sign webhooks with; "
                "resume by RQ (queue and func), or ask its operator to set it"
            )
        route = policy.admit(request.action, request.payload)
        gate = policy.gate(
            request.action,
            {
                "payload": request.payload,
                "confidence": request.confidence,
                "requester": request.requester,
                "action": request.action,
            },
        )
        stored = _stored_by_an_earlier_run(runtime, parsed.request_id)
        reserved = None
        if stored is None:
            limits.check_pending(runtime, policy, request)
            approvers = _approvers(runtime, route, gate, request)
            reserved = _admit(
                runtime, policy, parsed.request_id, request, route.channel, approvers if gate.review else []
            )
        else:
            approvers = stored.approvers
    except (InvalidRequest, PolicyError, IntakeLimitReached) as exc:
        return _dead_letter(runtime, message, str(exc), key)
    except RetryLater as later:  # Slack busy or unreachable while resolving the approvers
        return _reschedule(runtime, parsed.request_id, later)
    if gate.errors:
        log.warning(
            "request %s: policy rule not evaluated, failing closed: %s", parsed.request_id, gate.reason
        )
    values = columns(parsed.request_id, request, policy, route, gate, approvers)
    row, created, approved = _store(runtime, values, gate)
    if row.id != parsed.request_id:  # Redis had forgotten the key; the database remembered it
        if (row.action, row.payload_sha256) != (request.action, request.payload_sha256):
            reason = (
                f"IdempotencyConflict: key {request.key!r} was used by request {row.id} with another "
                "action class or payload"
            )
            remember_key(runtime.redis, row.requester, request.key, row.id, row.action, row.payload_sha256)
            return _dead_letter(runtime, message, reason)
        runtime.store.record_duplicate(parsed.request_id, row.id)
        bell.ring(runtime.redis, [parsed.request_id])  # its waiters read again and wait on row's bell
        remember_key(runtime.redis, row.requester, request.key, row.id, row.action, row.payload_sha256)
        log.info(
            "request %s repeats request %s (same key and payload); no second card", parsed.request_id, row.id
        )
    if approved is not None:
        return _approved_by_policy(runtime, approved)
    if let_through(row.rules.review_rule):  # stored before (a rerun, a duplicate): its own gate governs
        return approve_by_policy(runtime, row)
    if row.id != parsed.request_id:  # the row of an earlier request with the same key: its own time
        reserved = None
    try:
        return post_card(runtime, row, leased=created, reserved=reserved)
    except RetryLater as later:
        return _reschedule(runtime, row.id, later)


def columns(
    request_id: str,
    request: ApprovalRequestV1,
    policy: Policy,
    route: Route,
    gate: Gate,
    approvers: list[str],
) -> dict[str, Any]:
    """The columns intake stores for `request` (`Store.create`'s `values`): as sent, routed by
    `policy` (`route`), with the `gate`'s answer (its reason in `rules.review_rule`) and the first
    level's `approvers`."""
    return {
        "id": request_id,
        "idempotency_key": request.key,
        "payload_sha256": request.payload_sha256,
        "channel": route.channel,
        "approvers": approvers,
        "rules": route.rules.model_copy(update={"review_rule": gate.reason}),
        "required_approvals": gate.approvals,
        "review_reason": gate.says,
        "policy_version": policy.version,
        "policy_sha256": policy.sha256,
        **_resume_columns(request.resume),
        **request.model_dump(exclude={"resume", "idempotency_key"}),
    }


def _store(runtime: Runtime, values: dict[str, Any], gate: Gate) -> tuple[Request, bool, Decided | None]:
    """Store the request (`values`: `Store.create`'s): one the gate sends to review with its card's
    posting lease taken (`Store.create`), one it lets through approved by policy in the same
    transaction (`Store.create_approved`), so that no crash between the two steps leaves a pending
    row the card sweep would post a card for. Returns the stored row (for `created` False the
    earlier one, or this one from an earlier run), whether it was created, and the decision when
    this call approved it (its resume event not yet published)."""
    if gate.review:
        row, created = runtime.store.create(values, card_lease=True)
        return row, created, None
    grant_ttl = values["rules"].grant_ttl_seconds
    stored, created = runtime.store.create_approved(values, runtime.resume_event, grant_ttl)
    if isinstance(stored, Decided):
        return stored.request, created, stored
    return stored, created, None


def _admit(
    runtime: Runtime,
    policy: Policy,
    request_id: str,
    request: ApprovalRequestV1,
    channel: str,
    approvers: list[str],
) -> Slot | None:
    """What intake asks of Redis before it stores a request, in one script (`_ADMIT`): count it
    against its class's rate limit (`limits.ADMIT_LUA`); then, for a request with a card (its
    `approvers` given), reserve the card's time in `channel` (`pace.RESERVE_LUA`) and mark the
    approvers' Home tabs due `homedue.DEBOUNCE_SECONDS` after that time (`homedue.MARK_LUA`; a
    Home tab lists a pending request whether its card is posted or not). Returns the card's `Slot`
    (None without approvers). Raises `IntakeLimitReached` over the rate limit (nothing reserved or
    marked), redis-py's `RedisError`. `policy` is the version the request is routed by."""
    rate_key, rate_args = limits.rate_args(policy, request, request_id)
    keys = [rate_key, *pace.slot_keys(channel, request_id, FIRST_LEVEL), homedue.DUE_KEY]
    card_args = [pace.PACE_MILLISECONDS, pace.LAPSED_MILLISECONDS, homedue.DEBOUNCE_SECONDS]
    answer = runtime.redis.register_script(_ADMIT)(
        keys=keys, args=[*rate_args, *card_args, homedue.DUE_TTL_SECONDS, *approvers]
    )
    if answer[0]:
        raise limits.over_rate(policy, request, int(answer[0]))
    if len(answer) == 1:
        return None
    slot, free, seconds, micros = answer[1:]
    return Slot.of(slot, free, seconds * 1000 + micros / 1000)


def _checks(runtime: Runtime) -> dict[str, Any]:
    """The validation context of the router's settings (`COUNTERSIGN_WEBHOOK_ALLOW_HTTP`)."""
    return {ALLOW_HTTP: runtime.settings.COUNTERSIGN_WEBHOOK_ALLOW_HTTP}


def _resume_columns(resume: QueueResume | WebhookResume | None) -> dict[str, str | None]:
    """The request's columns that say where its decision goes: an RQ queue and function, a webhook,
    or none of them (no resume target: the agent waits in process, `ApprovalClient.wait`)."""
    if resume is None:
        return {"resume_queue": None, "resume_func": None, "resume_webhook": None}
    if isinstance(resume, WebhookResume):
        return {"resume_queue": None, "resume_func": None, "resume_webhook": resume.webhook}
    return {"resume_queue": resume.queue, "resume_func": resume.func, "resume_webhook": None}


def _reschedule(runtime: Runtime, request_id: str, later: RetryLater) -> Retry:
    """Log why the job waits, take it out of its action's lane (`jobs.leave_intake_lane`: its next
    run is at a time of its own), and return the `Retry` that runs it again in `later.seconds`."""
    why = later.why or "channel pace or Slack's Retry-After"
    log.info("request %s: rescheduled in %.3f s (%s)", request_id, later.seconds, why)
    leave_intake_lane(runtime.redis)
    return _retry_in(later.seconds)


def _retry_in(seconds: float) -> Retry:
    """RQ's `Retry` that runs the job again no earlier than `seconds` from now.

    RQ's scheduler keeps whole unix seconds (it floors the time) and moves due jobs onto the queue
    once a second, so the time is rounded up to the next whole second (a float interval must come in
    a list), unless that second is within `CLOCK_SLACK_SECONDS` of the time (then the card posts
    on time: see `post_card`). `max` counts every reschedule of the job: its waits for Slack to
    resolve the approvers (`_approvers` dead-letters the request when none is left), for the
    channel's time, then Slack's 429s; past that the job fails and the card sweep posts the card.
    """
    now = time.time()
    second = math.ceil(now + seconds - CLOCK_SLACK_SECONDS)
    interval: Any = [second - now + 0.001]  # RQ annotates whole seconds; its scheduler takes floats
    return Retry(max=MAX_RESCHEDULES, interval=interval)


def _stored_by_an_earlier_run(runtime: Runtime, request_id: str) -> Request | None:
    """The request if an earlier run of this intake job stored it, else None; a first run reads
    nothing. RQ counts the job's runs after the first: `number_of_retries` (it returned a `Retry`)
    and `retries_left` (it raised, or its worker died, and `INTAKE_RETRY` ran it again)."""
    job = get_current_job()
    if job is None:
        return None
    raised = job.retries_left is not None and job.retries_left < INTAKE_RETRY.max
    return runtime.store.get(request_id) if job.number_of_retries or raised else None


def _approvers(runtime: Runtime, route: Route, gate: Gate, request: ApprovalRequestV1) -> list[str]:
    """The first level's approvers, user groups resolved. Raises `RetryLater` when Slack is busy or
    unreachable (see `_lookup_later`), and `PolicyError` when Slack refuses for good or they are
    too few for the quorum the gate asks for."""
    if not gate.review:
        return list(route.approvers.users)
    failed = f"approvers of {route.channel}: usergroups.users.list failed"
    try:
        found = directory.approvers(runtime.slack, route.approvers.users, route.approvers.usergroups)
    except SlackApiError as exc:
        raise PolicyError(f"{failed} ({exc.response.get('error')})") from None
    except RetryLater as later:
        raise _lookup_later(later, failed) from None
    eligible = eligible_approvers(found, request.on_behalf_of, route.rules)
    if len(eligible) < gate.approvals:
        raise PolicyError(
            f"the policy asks for {counted(gate.approvals, 'approval')} but names "
            f"{counted(len(eligible), 'approver')} who may "
            "approve (the human the agent acts for may not approve their own request)"
        )
    return found


def _lookup_later(later: RetryLater, failed: str) -> RetryLater | PolicyError:
    """Slack was busy or unreachable resolving the approvers, before the request was stored: wait
    for its `Retry-After` or the intake job's back-off (`INTAKE_RETRY`'s intervals), whichever is
    longer. Once the job has been rescheduled `MAX_RESCHEDULES` times (RQ would fail it, and nothing
    would be left to retry it), a `PolicyError` naming Slack's answer dead-letters it instead, so
    the request still ends in one state."""
    job = get_current_job()
    runs = (job.number_of_retries or 0) if job is not None else 0
    if runs >= MAX_RESCHEDULES:
        return PolicyError(f"{failed} after {runs + 1} attempts, Slack busy or unreachable ({later.why})")
    return RetryLater(max(later.seconds, Retry.get_interval(runs, INTAKE_RETRY.intervals)), later.why)


def approve_by_policy(runtime: Runtime, row: Request) -> Taken:
    """Approve the stored pending `row`, which its gate let through (`gate.let_through` of its
    `rules.review_rule`, the decision's reason), by policy: `auto_approved`, or `duplicate` when it
    is decided already (a policy decision is never late). For a row an older version stored
    pending and died before approving (DESIGN.md, invariant 12)."""
    result = runtime.store.decide(
        row.id,
        Outcome.APPROVED,
        [],
        via=Via.POLICY,
        resume=runtime.resume_event,
        reason=row.rules.review_rule,
        grant_ttl=row.rules.grant_ttl_seconds,
    )
    return _approved_by_policy(runtime, result) if isinstance(result, Decided) else "duplicate"


def _approved_by_policy(runtime: Runtime, decided: Decided) -> Taken:
    """Publish the resume job of a request just approved by policy, after its commit
    (`relay.try_publish`; the outbox relay publishes it if this is lost), and rewrite its card if
    an older version posted one (or may have: a claim of its posting, whose poster died before
    storing it, is adopted first) for it (`delivery.refresh`): `auto_approved`."""
    relay.try_publish(runtime.redis, decided.event)
    row = decided.request
    log.info("request %s approved by policy (%s)", row.id, row.rules.review_rule)
    if row.card_ts is not None or row.card_attempts > 0:
        refresh(runtime, row.id)
    return "auto_approved"


def _dead_letter(runtime: Runtime, message: Any, reason: str, key: tuple[str, str] | None = None) -> Taken:
    """Keep a message intake refused, with its reason, and ring its bell (an agent waiting on it
    learns at once: `ApprovalClient.wait` raises `RequestDeadLettered`); then free its idempotency
    `key` (requester and idempotency key, if it parsed), so the agent can send the request again with
    the same key."""
    letter_id = _letter_id(message)
    runtime.store.dead_letter(letter_id, reason, message)
    bell.ring(runtime.redis, [letter_id])
    log.error("dead-lettered intake message %s: %s", letter_id, reason)
    if key is not None:
        release_key(runtime.redis, *key, letter_id)
    return "dead_letter"


def _letter_id(message: Any) -> str:
    request_id = message.get("request_id") if isinstance(message, dict) else None
    if isinstance(request_id, str) and 0 < len(request_id) <= 64:
        return request_id
    job = get_current_job()
    return job.id if job is not None else "unknown"
