"""The signed grant of a decision: "this exact payload may run until `expires_at`".

`payload_sha256` is the SHA-256 of the RFC 8785 canonical JSON of the payload that may run, and
`signature` is HMAC-SHA256(`COUNTERSIGN_SECRET`,
"countersign-grant-v1\\n<request_id>\\n<payload_sha256>\\n<expires_at>") in hex. The router signs it
when it decides; the agent checks it before acting (`agent.execution.execute_approved`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from .exceptions import ExecutionRefused
from .schema import iso, payload_sha256
from .store import Request, may_run

GRANT_VERSION = "countersign-grant-v1"


def sign_grant(secret: str, request_id: str, sha256: str, expires_at: str) -> str:
    """The grant signature (hex HMAC-SHA256) over the request id, payload hash and expiry."""
    message = "\n".join((GRANT_VERSION, request_id, sha256, expires_at)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def issue_grant(request: Request, secret: str) -> dict[str, str] | None:
    """`{payload_sha256, expires_at, signature}` for a decided request whose payload may run (its
    `approved_payload` and `grant_expires_at` are set), else None."""
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


def verify_grant(secret: str, decision: Mapping[str, Any]) -> None:
    """Check a decision's grant against its payload. The decision is the JSON an RQ job received, so
    every field is checked for its type. Raises `ExecutionRefused` with `why` `not_approved`,
    `bad_signature` (missing, malformed or forged) or `payload_mismatch`."""
    request_id = str(decision.get("request_id"))
    grant = decision.get("grant")
    if not may_run(decision.get("outcome"), decision.get("timeout_result")):
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
