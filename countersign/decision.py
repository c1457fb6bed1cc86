"""The decision: what an agent's resume job receives, or its `wait`, when a request is decided
(DESIGN.md, "Decision").

The resume job gets it as JSON (`Decision.to_json()`, RQ's JSON serializer); `Decision.from_json`
reads it back typed. `payload` is what may run: the frozen payload, or the reviewer's edit (then
`edits` lists `{field, from, to}`); `original_payload` is what the agent asked for. `grant` is set
only when the payload may run (`may_run`). Times are ISO 8601 UTC strings from the database clock.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from .grant import issue_grant
from .schema import iso
from .store import Decider, Edit, Outcome, Request, TimeoutResult, Via, may_run


class Grant(BaseModel):
    """The signed permission to run `payload` until `expires_at` (see `countersign.grant`)."""

    model_config = ConfigDict(frozen=True)

    payload_sha256: str
    expires_at: str
    signature: str


class Decision(BaseModel):
    """A decided approval request, as its resume job receives it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    request_id: str
    idempotency_key: str
    action: str
    outcome: Outcome
    payload: dict[str, Any]
    original_payload: dict[str, Any]
    edits: list[Edit]
    decided_by: list[Decider]
    decided_via: Via
    reason: str | None
    decided_at: str | None
    policy_version: int
    policy_sha256: str
    timeout_result: TimeoutResult | None
    grant: Grant | None

    @property
    def may_run(self) -> bool:
        """True when the payload may run: approved, or expired with the policy's `on_timeout: allow`."""
        return may_run(self.outcome, self.timeout_result)

    @property
    def edited(self) -> bool:
        """True when a reviewer edited the payload before approving (`edits` lists the changes)."""
        return bool(self.edits)

    @classmethod
    def from_json(cls, data: Any) -> Decision:
        """The typed decision from the resume job's argument. Raises pydantic's `ValidationError`
        for anything else."""
        return cls.model_validate(data)

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict the resume job receives (and the outbox keeps)."""
        return self.model_dump(mode="json")


def decision_of(request: Request, secret: str) -> Decision:
    """The decision of a decided request, its grant signed with `secret` (`COUNTERSIGN_SECRET`)."""
    assert request.decided_via is not None, "only a decided request has a decision"
    grant = issue_grant(request, secret)
    return Decision(
        request_id=request.id,
        idempotency_key=request.idempotency_key,
        action=request.action,
        outcome=Outcome(request.status),
        payload=request.payload_to_run,
        original_payload=request.payload,
        edits=request.edits or [],
        decided_by=request.decided_by or [],
        decided_via=request.decided_via,
        reason=request.decision_reason,
        decided_at=iso(request.decided_at),
        policy_version=request.policy_version,
        policy_sha256=request.policy_sha256,
        timeout_result=request.timeout_result,
        grant=Grant(**grant) if grant else None,
    )
