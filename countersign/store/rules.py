"""The rules a request is reviewed under: the policy's answer for its action class, snapshotted at
intake and stored with the request (column `approval_requests.rules`, JSON).

A later policy version never changes the rules of a request already routed. Durations are whole
seconds. The JSON keys are the stored format: `grant_ttl`, `reminders` and a level's `timeout` are
seconds.
"""

from __future__ import annotations

import functools
import json
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import JSON, Dialect, TypeDecorator
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeEngine

from ..defaults import GRANT_TTL_SECONDS

OnTimeout = Literal["deny", "allow", "escalate"]
RULES_CACHED = 256
"""Distinct stored rules kept parsed (`RulesType`): a policy's action classes and levels."""


def _decimal(text: str) -> str:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a decimal number") from None
    if not value.is_finite():
        raise ValueError(f"{text!r} is not a finite decimal number")
    return text


DecimalText = Annotated[str, AfterValidator(_decimal)]


class EditableField(BaseModel):
    """A payload field a reviewer may change in the Edit modal.

    `decimal`: a decimal string (money), with at most `places` decimal places and within
    `min`/`max` (decimal strings). `integer`: a whole number within `min`/`max`. `text`: a string of
    at most `max_length` characters.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["decimal", "integer", "text"]
    places: Annotated[int, Field(ge=0, le=18)] | None = None
    min: DecimalText | None = None
    max: DecimalText | None = None
    max_length: Annotated[int, Field(ge=1, le=3000)] = 3000

    @model_validator(mode="after")
    def _consistent(self) -> EditableField:
        if self.type == "text" and (self.min, self.max, self.places) != (None, None, None):
            raise ValueError("min, max and places apply to decimal and integer fields only")
        if self.min is not None and self.max is not None and Decimal(self.min) > Decimal(self.max):
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class Level(BaseModel):
    """One card in the escalation chain: where it goes, who may decide (user ids and user groups,
    resolved when the level starts), how long it waits and what its timeout does."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    channel: str
    users: list[str] = []
    usergroups: list[str] = []
    timeout_seconds: int | None = Field(None, alias="timeout")
    on_timeout: OnTimeout = "deny"


_NO_LEVEL = Level(channel="")


class Rules(BaseModel):
    """The rules of one request: the payload's `key_fields` (shown first on every card, never
    folded), editable fields and the edit rule (CEL, and the `edit_rule_label` reviewers see instead
    of it), whether a rejection needs a reason, how long a grant lasts,
    whether the human the agent acts for may approve, the reminder offsets, the escalation levels
    (`levels[0]` is the first card) and `review_rule`: the policy rule that sent the request to
    review or approved it, as written (CEL) with any evaluation error (for Details and the audit
    trail; reviewers read the request's `review_reason`)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    key_fields: list[str] = []
    editable: dict[str, EditableField] = {}
    edit_rule: str | None = None
    edit_rule_label: str | None = None
    review_rule: str | None = None
    reject_reason: Literal["required", "optional"] = "optional"
    grant_ttl_seconds: int = Field(GRANT_TTL_SECONDS, alias="grant_ttl")
    self_approval: bool = False
    reminders_seconds: list[int] = Field([], alias="reminders")
    levels: list[Level] = []

    def level(self, number: int) -> Level:
        """Escalation level `number`, or the last one past the end (a request with no levels, from
        before escalation existed, behaves as one level that denies on timeout)."""
        return self.levels[min(number, len(self.levels) - 1)] if self.levels else _NO_LEVEL

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form (see the module docstring)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class RulesType(TypeDecorator[Rules]):
    """`Rules` in a JSON column (JSONB on PostgreSQL)."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(JSONB() if dialect.name == "postgresql" else JSON())

    def process_bind_param(self, value: Rules | None, dialect: Dialect) -> dict[str, Any] | None:
        return None if value is None else value.to_json()

    def process_result_value(self, value: dict[str, Any] | None, dialect: Dialect) -> Rules:
        return _parsed(json.dumps(value or {}, sort_keys=True))


@functools.lru_cache(maxsize=RULES_CACHED)
def _parsed(stored: str) -> Rules:
    """The `Rules` of a stored JSON text, validated once for all the rows that hold the same rules
    (most requests of an action class do, as a policy version gives them the same): a batch of
    expiries reads hundreds of rows, and pydantic's validation was most of the cost of loading one.
    `Rules` is frozen, so the rows can share it."""
    return Rules.model_validate_json(stored)
