"""The approval request, schema version 1 (DESIGN.md, "Approval request"), and its intake message:
what an agent sends, checked the same way by the agent's client and by the router's intake.

Validation is strict: no type coercion (`"0.9"` is not a confidence, `7` is not a summary) and no
unknown fields, so an agent's mistake is an error at `request()` instead of a surprising card.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, TypeVar

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .exceptions import InvalidRequest

M = TypeVar("M", bound=BaseModel)
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_DEPTH = 32
SLACK_USER_ID = r"^[UW][A-Z0-9]{2,31}$"


def payload_sha256(payload: dict[str, Any]) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical JSON of `payload` (https://www.rfc-editor.org/rfc/rfc8785).

    Raises `ValueError` for what RFC 8785 cannot represent (NaN, infinities, integers beyond
    ±2**53-1) and for nesting deeper than `MAX_DEPTH`.
    """
    return hashlib.sha256(_canonical(payload)).hexdigest()


def _canonical(payload: dict[str, Any]) -> bytes:
    _check_depth(payload, MAX_DEPTH)
    try:
        return rfc8785.dumps(payload)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise ValueError(f"cannot be canonical JSON ({exc})") from None


def _check_depth(value: Any, budget: int) -> None:
    """Refuse nesting deeper than `MAX_DEPTH`, and NUL characters (PostgreSQL cannot store them)."""
    if budget < 0:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("contains a NUL character (U+0000)")
    children = (
        [*value.keys(), *value.values()]
        if isinstance(value, dict)
        else value
        if isinstance(value, list)
        else ()
    )
    for child in children:
        _check_depth(child, budget - 1)


class Resume(BaseModel):
    """Where the decision goes: an RQ job `func(decision)` on the queue `queue`.

    `func` is checked for its form only (a dotted path of Python identifiers, module then
    function): whether it imports is up to the agent's worker, whose code the requester may not
    have. One that does not is said on the card once the worker tries it (`agent/callbacks.py`).
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    queue: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    func: Annotated[str, Field(max_length=255)]

    @field_validator("func")
    @classmethod
    def _import_path(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) < 2 or not all(part.isidentifier() for part in parts):
            raise ValueError(
                "should be a dotted import path, module then function "
                "(e.g. examples.refund_agent.resume), which the agent's worker imports"
            )
        return value


class ApprovalRequestV1(BaseModel):
    """An approval request as an agent sends it.

    The idempotency key is `idempotency_key` when given, else `requester:run_id:step` (both
    `run_id` and `step` are then required). `payload` is at most 64 KiB as canonical JSON.
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    action: Annotated[str, Field(pattern=r"^[a-z0-9_.-]{1,64}$")]
    payload: dict[str, Any]
    summary: Annotated[str, Field(min_length=1, max_length=3000)]
    reason: Annotated[str, Field(max_length=20_000)] | None = None
    context: dict[str, Any] | None = None
    requester: Annotated[str, Field(min_length=1, max_length=128)]
    on_behalf_of: Annotated[str, Field(pattern=SLACK_USER_ID)] | None = None
    run_id: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    step: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    resume: Resume

    @field_validator("summary", "reason", "requester", "run_id", "step", "idempotency_key")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("contains a NUL character (U+0000)")
        return value

    @field_validator("payload", "context")
    @classmethod
    def _canonical_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(_canonical(value)) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"larger than {MAX_PAYLOAD_BYTES} bytes as canonical JSON")
        return value

    @model_validator(mode="after")
    def _has_key(self) -> ApprovalRequestV1:
        if self.idempotency_key is None:
            if self.run_id is None or self.step is None:
                raise ValueError("give idempotency_key, or both run_id and step")
            if any(":" in part for part in (self.requester, self.run_id, self.step)):
                raise ValueError(
                    "requester, run_id and step make the key requester:run_id:step, so they may "
                    "not contain ':' (give idempotency_key instead)"
                )
        return self

    @property
    def key(self) -> str:
        """The idempotency key."""
        return self.idempotency_key or f"{self.requester}:{self.run_id}:{self.step}"

    @property
    def payload_sha256(self) -> str:
        """SHA-256 of the payload's canonical JSON."""
        return payload_sha256(self.payload)


class IntakeMessage(BaseModel):
    """What `ApprovalClient.request` puts on the `countersign` queue for the intake job."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    v: int = 1
    request_id: Annotated[str, Field(pattern=r"^[0-9A-HJKMNP-TV-Z]{26}$")]
    request: ApprovalRequestV1


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 UTC with a `Z`, e.g. `2026-11-29T08:00:00.123456Z`, as times are written in the
    decision and the CLI's JSON; None stays None."""
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def parse(model: type[M], data: Any) -> M:
    """Validate `data` as `model`, raising `InvalidRequest` with every problem on one line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest(one_line(exc)) from None
    except RecursionError:
        raise InvalidRequest(f"request: nested deeper than {MAX_DEPTH} levels") from None


_MESSAGES = {
    "extra_forbidden": "unknown field",
    "model_type": "should be a JSON object",
    "dict_type": "should be a JSON object",
}


def one_line(exc: ValidationError, root: str = "request") -> str:
    """`'payload: should be a JSON object; action: Field required'` from a ValidationError;
    `root` names the whole document when the error is about it."""
    parts = []
    for error in exc.errors():
        where = ".".join(_field(p) for p in error["loc"]) or root
        message = _MESSAGES.get(error["type"], error["msg"])
        parts.append(f"{where}: {message.removeprefix('Value error, ')}")
    return "; ".join(parts).translate(_CONTROL)


def _field(part: str | int) -> str:
    """A field name as written in an error: plain when it is a plain name, else JSON-quoted (the
    agent chose it, and it may hold dots, spaces or line breaks)."""
    text = str(part)
    return text if text.isidentifier() or isinstance(part, int) else json.dumps(text)


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(32), 127]}
