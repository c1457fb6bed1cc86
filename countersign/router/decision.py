"""The decision an agent's resume job receives (DESIGN.md, "Decision") and its signed grant.

A grant says "this exact payload may run until `expires_at`": `payload_sha256` is the SHA-256 of
the RFC 8785 canonical JSON of the payload that may run, and `signature` is
HMAC-SHA256(`COUNTERSIGN_SECRET`, "countersign-grant-v1\\n<request_id>\\n<payload_sha256>\\n<expires_at>")
in hex. The agent checks it before acting (`router.execution.execute_approved`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..store import APPROVED, EXPIRED, ApprovalRequest, ExecutionRefused
from .schema import payload_sha256

if TYPE_CHECKING:
    from .runtime import Runtime

GRANT_VERSION = "countersign-grant-v1"


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 UTC with a `Z`, e.g. `2026-11-29T08:00:00.123456Z`; None stays None."""
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def sign_grant(secret: str, request_id: str, sha256: str, expires_at: str) -> str:
    """The grant signature (hex HMAC-SHA256) over the request id, payload hash and expiry."""
    message = "\n".join((GRANT_VERSION, request_id, sha256, expires_at)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_grant(secret: str, decision: dict[str, Any]) -> None:
    """Check a decision's grant against its payload. Raises `ExecutionRefused` with `why`
    `not_approved`, `bad_signature` (missing, malformed or forged) or `payload_mismatch`."""
    request_id = str(decision.get("request_id"))
    grant = decision.get("grant")
    if not may_run(decision):
        raise ExecutionRefused(request_id, "not_approved")
    if not isinstance(grant, dict) or not all(
        isinstance(grant.get(k), str) for k in ("payload_sha256", "expires_at", "signature")
    ):
        raise ExecutionRefused(request_id, "bad_signature")
    expected = sign_grant(secret, request_id, grant["payload_sha256"], grant["expires_at"])
    if not hmac.compare_digest(expected, grant["signature"]):
        raise ExecutionRefused(request_id, "bad_signature")
    payload = decision.get("payload")
    try:
        actual = payload_sha256(payload) if isinstance(payload, dict) else None
    except ValueError:
        actual = None
    if actual != grant["payload_sha256"]:
        raise ExecutionRefused(request_id, "payload_mismatch")


def may_run(decision: dict[str, Any]) -> bool:
    """True for a decision that lets the payload run: approved, or expired with `timeout_result`
    `allow` (the policy's `on_timeout: allow`)."""
    outcome = decision.get("outcome")
    return outcome == APPROVED or (outcome == EXPIRED and decision.get("timeout_result") == "allow")


def _grant(request: ApprovalRequest, secret: str) -> dict[str, str] | None:
    if request.approved_payload is None or request.grant_expires_at is None:
        return None
    sha256 = payload_sha256(request.approved_payload)
    expires_at = iso(request.grant_expires_at)
    assert expires_at is not None
    return {
        "payload_sha256": sha256,
        "expires_at": expires_at,
        "signature": sign_grant(secret, request.id, sha256, expires_at),
    }


def decision_of(request: ApprovalRequest, secret: str) -> dict[str, Any]:
    """The JSON-ready decision for a decided request.

    `outcome` is `approved` | `rejected` | `expired`; for `expired`, `timeout_result` is the
    policy's answer (`deny`: nothing may run; `allow`: the payload may run). `payload` is what may
    run (the frozen payload, or the reviewer's edit: then `edits` lists `{field, from, to}`);
    `original_payload` is what the agent asked for. `grant` is None unless something may run.
    `decided_at` is ISO 8601 UTC from the database clock.
    """
    return {
        "request_id": request.id,
        "idempotency_key": request.idempotency_key,
        "action": request.action,
        "outcome": request.status,
        "payload": request.approved_payload if request.approved_payload is not None else request.payload,
        "original_payload": request.payload,
        "edits": request.edits or [],
        "decided_by": request.decided_by or [],
        "decided_via": request.decided_via,
        "reason": request.decision_reason,
        "decided_at": iso(request.decided_at),
        "policy_version": request.policy_version,
        "policy_sha256": request.policy_sha256,
        "timeout_result": request.timeout_result,
        "grant": _grant(request, secret),
    }


def decision_body(runtime: Runtime) -> Callable[[ApprovalRequest], dict[str, Any]]:
    """What the store writes into the outbox for a row it has just decided (`Store.decide`, `vote`,
    `expire`): `decision_of(row, COUNTERSIGN_SECRET)`."""
    secret = runtime.settings.COUNTERSIGN_SECRET or ""
    return lambda row: decision_of(row, secret)
