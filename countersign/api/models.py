"""The JSON bodies of the HTTP API that are not the approval request or the decision (those are
`schema.ApprovalRequestV1` and `decision.Decision`), as pydantic models: FastAPI validates them and
writes them into the OpenAPI document."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_DETAIL = 2000  # characters of an outcome's detail kept (as `agent.execution.report_outcome`)


class Accepted(BaseModel):
    """`POST /v1/requests`: the request id the approval request has, new or replayed."""

    request_id: str


class OutcomeReport(BaseModel):
    """`POST /v1/requests/{id}/outcome`: how the approved action went (`ok`), with an optional
    `detail` (at most 2000 characters are kept)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    ok: bool
    detail: Annotated[str, Field(max_length=100_000)] | None = None


class Recorded(BaseModel):
    """The outcome was recorded now."""

    recorded: bool


class Claimed(BaseModel):
    """`POST /v1/requests/{id}/execution`: the single execution of the request's approved payload is
    now this caller's (audited `execution_started`): run it, then report the outcome."""

    claimed: bool
    request_id: str


class Verification(BaseModel):
    """`POST /v1/grants/verify`: `valid` when the decision's grant is signed by this router for its
    payload and has not expired (database clock); else `why`: `not_approved`, `bad_signature`,
    `payload_mismatch` or `grant_expired`."""

    valid: bool
    request_id: str | None
    why: str | None = None
    expires_at: str | None = None


class Problem(BaseModel):
    """Every 4xx and 5xx answer of the API: one line saying what is wrong."""

    error: str
