"""The policy file: which channel an action class goes to and who may approve it.

This version reads `version`, `defaults` and `actions.<class>` with `channel`, `approvers.users`,
`editable`, `edit_rule`, `reject_reason`, `grant_ttl` and `self_approval` (DESIGN.md, "Policy
file"). Any other key is refused at load rather than ignored, so a policy that asks for a rule this
version does not enforce fails loudly instead of silently approving less carefully than it says.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, Literal

import cel
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .schema import SLACK_USER_ID, one_line

SLACK_CONVERSATION_ID = r"^[CGDU][A-Z0-9]{2,31}$"
DEFAULT_GRANT_TTL_SECONDS = 15 * 60
_DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> int:
    """Seconds in a policy duration such as `90s`, `15m`, `4h` or `2d`. Raises `ValueError`."""
    match = _DURATION.match(text)
    if match is None or int(match[1]) == 0:
        raise ValueError(f"{text!r} is not a duration like 90s, 15m, 4h or 2d")
    return int(match[1]) * _UNIT_SECONDS[match[2]]


def _cel(expression: str) -> str:
    try:
        cel.compile(expression)
    except ValueError as exc:
        raise ValueError(f"not a valid CEL expression ({str(exc).splitlines()[0]})") from None
    return expression


def _decimal(text: str) -> str:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a decimal number") from None
    if not value.is_finite():
        raise ValueError(f"{text!r} is not a finite decimal number")
    return text


Duration = Annotated[str, AfterValidator(lambda v: duration_seconds(v) and v)]
CelExpression = Annotated[str, AfterValidator(_cel)]
DecimalText = Annotated[str, AfterValidator(_decimal)]


class PolicyError(ValueError):
    """The policy file cannot be used; `str(err)` names the file, and the action class and field."""


class Approvers(BaseModel):
    """Who may decide: at least one Slack user id (user groups arrive with the policy engine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: Annotated[list[Annotated[str, Field(pattern=SLACK_USER_ID)]], Field(min_length=1)]
    usergroups: list[str] = []

    @field_validator("usergroups")
    @classmethod
    def _no_usergroups_yet(cls, value: list[str]) -> list[str]:
        if value:
            raise ValueError("user groups are not supported by this version yet; list users instead")
        return value


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


class ActionPolicy(BaseModel):
    """Rules for one action class; unset fields fall back to `defaults`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: Annotated[str, Field(pattern=SLACK_CONVERSATION_ID)] | None = None
    approvers: Approvers | None = None
    editable: dict[str, EditableField] | None = None
    edit_rule: CelExpression | None = None
    reject_reason: Literal["required", "optional"] | None = None
    grant_ttl: Duration | None = None
    self_approval: bool | None = None


class PolicyFile(BaseModel):
    """The whole file as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Annotated[int, Field(strict=True, ge=0)]
    defaults: ActionPolicy = ActionPolicy()
    actions: dict[Annotated[str, Field(pattern=r"^[a-z0-9_.-]{1,64}$")], ActionPolicy] = {}


@dataclass(frozen=True)
class Route:
    """Where one request goes and the rules its reviewers work under, snapshotted at intake.

    `channel`: channel id (or user id, for a DM); `approvers`: Slack user ids; `rules`: JSON-ready
    `{"editable": {field: EditableField as dict}, "edit_rule": str | None,
    "reject_reason": "required" | "optional", "grant_ttl": seconds, "self_approval": bool}`.
    """

    channel: str
    approvers: tuple[str, ...]
    rules: dict[str, Any]


@dataclass(frozen=True)
class Policy:
    """A loaded policy: the validated file, its `version` and the SHA-256 of its bytes."""

    file: PolicyFile
    path: Path
    sha256: str

    @property
    def version(self) -> int:
        """The `version` the file declares."""
        return self.file.version

    def route(self, action: str) -> Route:
        """Channel and approvers for `action`, from `actions.<action>` over `defaults`.

        Raises `PolicyError` when either is configured nowhere: such a request could be seen by
        no one or approved by no one.
        """
        own, defaults = self.file.actions.get(action, ActionPolicy()), self.file.defaults

        def pick(name: str) -> Any:
            value = getattr(own, name)
            return value if value is not None else getattr(defaults, name)

        channel, approvers = pick("channel"), pick("approvers")
        if channel is None:
            raise PolicyError(f"{self.path}: no channel for action class {action!r} (set defaults.channel)")
        if approvers is None or not approvers.users:
            raise PolicyError(f"{self.path}: no approvers for action class {action!r}")
        editable = pick("editable") or {}
        rules = {
            "editable": {name: spec.model_dump(exclude_none=True) for name, spec in editable.items()},
            "edit_rule": pick("edit_rule"),
            "reject_reason": pick("reject_reason") or "optional",
            "grant_ttl": duration_seconds(pick("grant_ttl") or f"{DEFAULT_GRANT_TTL_SECONDS}s"),
            "self_approval": bool(pick("self_approval")),
        }
        return Route(channel=channel, approvers=tuple(approvers.users), rules=rules)


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping (YAML forbids it; PyYAML
    would silently keep the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        if twice:
            raise yaml.constructor.ConstructorError(
                None, None, f"key written twice: {', '.join(twice)}", node.start_mark
            )
        return super().construct_mapping(node, deep=deep)


def load_policy(path: Path | str) -> Policy:
    """Read and validate a policy file. Raises `PolicyError` naming the file and the field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = yaml.load(raw, Loader=_StrictLoader)  # a SafeLoader subclass
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    try:
        file = PolicyFile.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(f"{path}: {one_line(exc, root='policy')}") from None
    return Policy(file=file, path=path, sha256=hashlib.sha256(raw).hexdigest())
