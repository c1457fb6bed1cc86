"""The intake job: validate, dedupe, route by policy, store, post the card.

Runs on the router worker (`countersign worker`, queue `countersign`). It is safe to run twice for
one request: the store keeps one row per idempotency key and one card `ts` per request. A message
that cannot become a request is dead-lettered with its reason, never dropped (DESIGN.md,
invariant 8).
"""

from __future__ import annotations

import logging
from typing import Any

from rq import get_current_job

from ..store import ApprovalRequest
from . import cards
from .client import remember_key
from .policy import PolicyError
from .runtime import Runtime, current
from .schema import IntakeMessage, InvalidRequest, parse

log = logging.getLogger(__name__)


def intake(message: Any) -> str:
    """RQ entry point. Returns what happened: `posted` | `duplicate` | `dead_letter`."""
    return handle(current(), message)


def handle(runtime: Runtime, message: Any) -> str:
    """Turn one intake message (`IntakeMessage` as JSON) into a stored request with one card."""
    try:
        parsed: IntakeMessage = parse(IntakeMessage, message)
        route = runtime.policy.route(parsed.request.action)
    except (InvalidRequest, PolicyError) as exc:
        return _dead_letter(runtime, message, str(exc))
    request = parsed.request
    row, _ = runtime.store.create(
        {
            "id": parsed.request_id,
            "idempotency_key": request.key,
            "payload_sha256": request.payload_sha256,
            "channel": route.channel,
            "approvers": list(route.approvers),
            "rules": route.rules,
            "policy_version": runtime.policy.version,
            "policy_sha256": runtime.policy.sha256,
            "resume_queue": request.resume.queue,
            "resume_func": request.resume.func,
            **request.model_dump(exclude={"resume", "idempotency_key"}),
        }
    )
    if row.id != parsed.request_id:  # Redis had forgotten the key; the database remembered it
        if row.payload_sha256 != request.payload_sha256:
            reason = (
                f"IdempotencyConflict: key {request.key!r} was used by request {row.id} with another payload"
            )
            return _dead_letter(runtime, message, reason)
        runtime.store.record_duplicate(parsed.request_id, row.id)
        remember_key(runtime.redis, request.key, row.id, row.payload_sha256)
        log.info(
            "request %s repeats request %s (same key and payload); no second card", parsed.request_id, row.id
        )
    return _post_card(runtime, row)


def _post_card(runtime: Runtime, row: ApprovalRequest) -> str:
    if row.card_ts is not None:
        return "duplicate"
    response = runtime.slack.chat_postMessage(channel=row.channel, **cards.request_card(row).message())
    runtime.store.attach_card(row.id, response["ts"])
    log.info("request %s: card posted to %s at %s", row.id, row.channel, response["ts"])
    return "posted"


def _dead_letter(runtime: Runtime, message: Any, reason: str) -> str:
    letter_id = _letter_id(message)
    runtime.store.dead_letter(letter_id, reason, message)
    log.error("dead-lettered intake message %s: %s", letter_id, reason)
    return "dead_letter"


def _letter_id(message: Any) -> str:
    request_id = message.get("request_id") if isinstance(message, dict) else None
    if isinstance(request_id, str) and 0 < len(request_id) <= 64:
        return request_id
    job = get_current_job()
    return job.id if job is not None else "unknown"
