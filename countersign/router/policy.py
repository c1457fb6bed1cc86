"""The policy file (DESIGN.md, "Policy file"): which channel an action class goes to, who may
approve it, when no human is needed, and the rules its reviewers work under.

The file has `version`, `unknown_actions`, `removed_actions`, `admins` (who sees the gates' numbers
on their App Home tab), `defaults` and `actions.<class>`;
each action class takes the keys of `ActionPolicy` (channel, approvers, self_approval,
auto_approve, review_when, always_review, require, key_fields, editable, edit_rule, reject_reason,
grant_ttl, timeout, on_timeout, escalate, reminders, limits), falling back to `defaults` key by key
(`limits` field by field). An action class the file does not name is refused unless
`unknown_actions: route` sends it by the defaults. Any other key is refused at load rather than
ignored, so a policy that asks for a rule this version does not enforce fails loudly instead of
silently approving less carefully than it says. A running process reloads the file under the rules
of `reload`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..defaults import GRANT_TTL_SECONDS
from ..exceptions import PolicyError, PolicyUnreadable, UnknownAction
from ..schema import ActionClass, SlackUserId, check_keys, one_line
from ..store import EditableField, Level, Rules
from ..store.rules import OnTimeout
from ..validation import Matches
from . import edits, keyfields
from .cards import MAX_KEY_FIELDS
from .gate import (
    EDIT_VARIABLES,
    GATE_VARIABLES,
    Gate,
    Requirement,
    Rule,
    check_variables,
    judge,
)
from .texts import counted

SLACK_CONVERSATION_ID = Matches(
    r"^[CGDU][A-Z0-9]{2,31}$",
    "a Slack channel id: C, G, D or U, then 2 to 31 capitals or digits (e.g. C0123ABC)",
)
SLACK_USERGROUP_ID = Matches(
    r"^S[A-Z0-9]{2,31}$", "a Slack user group id: S, then 2 to 31 capitals or digits (e.g. S0123ABC)"
)
_DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Intake limits when the file sets none: far above what one agent asks a human in normal use.
PER_MINUTE = 60
PENDING = 100


def duration_seconds(text: str) -> int:
    """Seconds in a policy duration such as `90s`, `15m`, `4h` or `2d`. Raises `ValueError`."""
    match = _DURATION.match(text)
    if match is None or int(match[1]) == 0:
        raise ValueError(f"{text!r} is not a duration like 90s, 15m, 4h or 2d")
    return int(match[1]) * _UNIT_SECONDS[match[2]]


Duration = Annotated[str, AfterValidator(lambda v: duration_seconds(v) and v)]


def _key_fields(names: list[str]) -> list[str]:
    """Key field names: distinct, visible, told apart (`schema.check_keys`), at most `MAX_KEY_FIELDS`."""
    if len(set(names)) < len(names):
        raise ValueError("names a field twice")
    check_keys(dict.fromkeys(names), "key_fields")
    return names


KeyFields = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=100)]],
    Field(max_length=MAX_KEY_FIELDS),
    AfterValidator(_key_fields),
]


class Approvers(BaseModel):
    """Who may decide: Slack user ids and user groups (resolved at intake through
    `usergroups.users.list`); at least one of the two."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: list[SlackUserId] = []
    usergroups: list[Annotated[str, SLACK_USERGROUP_ID]] = []

    @model_validator(mode="after")
    def _someone(self) -> Approvers:
        if not self.users and not self.usergroups:
            raise ValueError("name at least one approver in users or usergroups")
        return self


class EscalationLevel(BaseModel):
    """One escalation step: a new card in `channel` for `approvers` (each defaults to the level
    before), with its own clock."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: Annotated[str, SLACK_CONVERSATION_ID] | None = None
    approvers: Approvers | None = None
    timeout: Duration
    on_timeout: Literal["deny", "allow", "escalate"] = "deny"


class Limits(BaseModel):
    """Intake limits, per requester and action class: at most `per_minute` requests accepted in any
    60 seconds, and at most `pending` pending at once (whole numbers, at least 1). A request over
    either is dead-lettered at intake (`router/limits.py`). Unset fields fall back to `defaults`,
    then to 60 a minute and 100 pending."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_minute: Annotated[int, Field(strict=True, ge=1)] | None = None
    pending: Annotated[int, Field(strict=True, ge=1)] | None = None


@dataclass(frozen=True)
class IntakeLimits:
    """The limits in force for one action class: `per_minute` (requests accepted in any 60 s) and
    `pending` (pending at once), each per requester."""

    per_minute: int
    pending: int


class ActionPolicy(BaseModel):
    """Rules for one action class; unset fields fall back to `defaults`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: Annotated[str, SLACK_CONVERSATION_ID] | None = None
    approvers: Approvers | None = None
    key_fields: KeyFields | None = None
    editable: dict[str, EditableField] | None = None
    edit_rule: Rule | None = None
    reject_reason: Literal["required", "optional"] | None = None
    grant_ttl: Duration | None = None
    self_approval: StrictBool | None = None
    auto_approve: Rule | None = None
    review_when: Rule | None = None
    always_review: StrictBool | None = None
    require: list[Requirement] | None = None
    timeout: Duration | None = None
    on_timeout: Literal["deny", "allow", "escalate"] | None = None
    escalate: list[EscalationLevel] | None = None
    reminders: list[Duration] | None = None
    limits: Limits | None = None

    @field_validator("auto_approve", "review_when", "require", "edit_rule")
    @classmethod
    def _known_variables(cls, value: Any, info: ValidationInfo) -> Any:
        """Each rule reads only its kind's CEL variables (`gate.GATE_VARIABLES`, or
        `gate.EDIT_VARIABLES` for `edit_rule`); raises ValueError naming a misspelt one."""
        variables = EDIT_VARIABLES if info.field_name == "edit_rule" else GATE_VARIABLES
        for rule in value if isinstance(value, list) else [value] if value else []:
            check_variables(rule.when if isinstance(rule, Requirement) else rule.rule, variables)
        return value


class PolicyFile(BaseModel):
    """The whole file as written. `unknown_actions`: what happens to a request whose action class
    `actions` does not name: `refuse` (the default; it is dead-lettered) or `route` (by `defaults`).
    `removed_actions`: action classes this version drops on purpose; a running process takes a new
    version only if it still names every class of the one in force or lists it here (a file cut
    short loses classes: `reload.PolicyHolder`). `admins`: Slack users and user groups (resolved as
    approvers are, `directory.approvers`) whose App Home tab also shows the gates' numbers, who may
    use `/countersign stats` and `/countersign show` on any request (`router/commands.py`); none
    when unset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Annotated[int, Field(strict=True, ge=0)]
    unknown_actions: Literal["refuse", "route"] = "refuse"
    removed_actions: list[ActionClass] = []
    admins: Approvers | None = None
    defaults: ActionPolicy = ActionPolicy()
    actions: dict[ActionClass, ActionPolicy] = {}

    @model_validator(mode="after")
    def _removed_are_gone(self) -> PolicyFile:
        both = sorted(set(self.removed_actions) & set(self.actions))
        if both:
            raise ValueError(f"removed_actions lists {', '.join(both)}, which actions still names")
        return self


@dataclass(frozen=True)
class Route:
    """Where one request goes and the rules its reviewers work under, snapshotted at intake.

    `channel`: channel id (or user id, for a DM); `approvers`: who may decide at the first level
    (user ids and user groups, resolved by the caller); `rules`: what the store keeps with the
    request (`rules.levels[0]` is the first card, each later level an escalation).
    """

    channel: str
    approvers: Approvers
    rules: Rules


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

    def setting(self, action: str, name: str) -> Any:
        """The value of key `name` for `action` (its own, else the defaults', else None); `action`
        may be `defaults`."""
        return self._pick(action)(name)

    def snapshot(self, action: str) -> Rules:
        """The rules a request of class `action` is stored with (`defaults`: those of the classes the
        file does not name). Raises `PolicyError` as `route` does, but never `UnknownAction`."""
        return self._route(action).rules

    def _pick(self, action: str) -> Callable[[str], Any]:
        own, defaults = self.file.actions.get(action, ActionPolicy()), self.file.defaults

        def pick(name: str) -> Any:
            value = getattr(own, name)
            return value if value is not None else getattr(defaults, name)

        return pick

    def route(self, action: str) -> Route:
        """Channel, approvers and rules for `action`, from `actions.<action>` over `defaults`.

        Raises `UnknownAction` when the file does not name `action` and refuses unknown action
        classes, and `PolicyError` when the channel or approvers are configured nowhere (such a
        request could be seen or approved by no one) or the escalation chain is incomplete.
        """
        self.must_know(action)
        return self._route(action)

    def must_know(self, action: str) -> None:
        """Raise `UnknownAction` (one line naming `action` and the file's action classes) when the
        file does not name `action` and refuses unknown action classes (`unknown_actions: refuse`)."""
        if action not in self.file.actions and self.file.unknown_actions == "refuse":
            raise UnknownAction(self._unknown(action))

    def admit(self, action: str, payload: dict[str, Any]) -> Route:
        """`route(action)`, for a request whose `payload` every card can show with its key fields
        first, and whose fields declared under `editable` keep their declarations (money as a decimal
        string, within `places`, `min`, `max`, `max_length`). Raises what `route` raises, and
        `InvalidRequest` when the payload would hide a key field (`keyfields.check`) or breaks an
        `editable` declaration (`edits.check_payload`, the Edit modal's own check)."""
        route = self.route(action)
        keyfields.check(action, payload, route.rules.key_fields)
        edits.check_payload(action, payload, route.rules.editable)
        return route

    def _unknown(self, action: str) -> str:
        known = sorted(self.file.actions)
        listed = ", ".join(known[:20]) + (f" (+{len(known) - 20} more)" if len(known) > 20 else "")
        return (
            f"action class {action!r} is not named in policy v{self.version} ({self.path}), which refuses "
            f"unknown action classes; known: {listed or 'none'}"
        )

    def _route(self, action: str) -> Route:
        pick = self._pick(action)
        channel, approvers = pick("channel"), pick("approvers")
        if channel is None:
            raise PolicyError(f"{self.path}: no channel for action class {action!r} (set defaults.channel)")
        if approvers is None:
            raise PolicyError(f"{self.path}: no approvers for action class {action!r}")
        editable, edit_rule = pick("editable") or {}, pick("edit_rule")
        grant_ttl = pick("grant_ttl")
        rules = Rules(
            key_fields=pick("key_fields") or [],
            editable=editable,
            edit_rule=edit_rule and edit_rule.rule,
            edit_rule_label=edit_rule and edit_rule.label,
            reject_reason=pick("reject_reason") or "optional",
            grant_ttl_seconds=duration_seconds(grant_ttl) if grant_ttl else GRANT_TTL_SECONDS,
            self_approval=bool(pick("self_approval")),
            reminders_seconds=[duration_seconds(r) for r in pick("reminders") or []],
            levels=self._levels(action, channel, approvers, pick),
        )
        self._check_key_fields(action, rules)
        return Route(channel=channel, approvers=approvers, rules=rules)

    def _check_key_fields(self, action: str, rules: Rules) -> None:
        """Raise `PolicyError` for a key field a reviewer may edit to more text than a card shows."""
        for name in rules.key_fields:
            spec = rules.editable.get(name)
            if spec is not None and spec.type == "text" and spec.max_length > keyfields.room(name):
                raise PolicyError(
                    f"{self.path}: actions.{action}.editable.{name}: a key field, which a card shows whole, "
                    f"so its max_length may be at most {keyfields.room(name)}"
                )

    def _levels(
        self, action: str, channel: str, approvers: Approvers, pick: Callable[[str], Any]
    ) -> list[Level]:
        """The escalation chain, each level inheriting channel and approvers from the one before.
        Raises `PolicyError` for a chain that cannot work as written."""
        timeout = pick("timeout")
        levels = [
            _level(
                channel,
                approvers,
                duration_seconds(timeout) if timeout else None,
                pick("on_timeout") or "deny",
            )
        ]
        for step in pick("escalate") or []:
            channel, approvers = step.channel or channel, step.approvers or approvers
            levels.append(_level(channel, approvers, duration_seconds(step.timeout), step.on_timeout))
        self._check_chain(action, levels, max((r.approvals for r in pick("require") or []), default=1))
        return levels

    def _check_chain(self, action: str, levels: list[Level], quorum: int) -> None:
        def fail(message: str) -> PolicyError:
            return PolicyError(f"{self.path}: actions.{action}: {message}")

        if levels[0].timeout_seconds is None and (levels[0].on_timeout != "deny" or len(levels) > 1):
            raise fail("on_timeout and escalate need a timeout")
        for number, level in enumerate(levels):
            at = "" if number == 0 else f"escalate[{number - 1}]."
            if not level.usergroups and len(level.users) < quorum:
                raise fail(
                    f"{at}approvers names {counted(len(level.users), 'user')} but require asks for up to "
                    f"{counted(quorum, 'approval')}"
                )
            last = number + 1 == len(levels)
            if level.on_timeout == "escalate" and last:
                raise fail(f"{at}on_timeout is escalate, but no escalate level follows")
            if level.on_timeout != "escalate" and not last:
                raise fail(
                    f"escalate levels after level {number} are never reached (its on_timeout is "
                    f"{level.on_timeout})"
                )

    def limits(self, action: str) -> IntakeLimits:
        """The intake limits of `action`: `actions.<action>.limits` over `defaults.limits`, field
        by field, over the built-in 60 a minute and 100 pending."""
        own = self.file.actions.get(action, ActionPolicy()).limits or Limits()
        defaults = self.file.defaults.limits or Limits()

        def pick(name: str, built_in: int) -> int:
            return next((v for v in (getattr(own, name), getattr(defaults, name)) if v is not None), built_in)

        return IntakeLimits(per_minute=pick("per_minute", PER_MINUTE), pending=pick("pending", PENDING))

    def gate(self, action: str, facts: dict[str, Any]) -> Gate:
        """Whether a request of class `action` needs review, and why, by the class's rules over
        `facts` (`{"payload", "confidence", "requester", "action"}`, the CEL variables); see
        `gate.judge`. A rule that cannot be evaluated fails closed."""
        return judge(action, self._pick(action), facts)

    def summary(self) -> str:
        """A human-readable summary of every action class's route (for `countersign policy check`)."""
        lines = [f"{self.path}: policy version {self.version}, sha256 {self.sha256[:12]}…"]
        for action in sorted(self.file.actions):
            lines.append(f"  {action}: {self.describe(action)}")
        others = self.describe("defaults") if self.file.unknown_actions == "route" else "refused"
        lines.append(f"  any other action class: {others} (unknown_actions: {self.file.unknown_actions})")
        return "\n".join(lines)

    def rules(self, action: str) -> list[tuple[str, str, str | None]]:
        """The CEL rules `action` is gated and edited by: `(key, rule as written, label or None)`."""
        pick = self._pick(action)
        found = [
            (key, rule.rule, rule.label) for key in ("auto_approve", "review_when") if (rule := pick(key))
        ]
        found += [(f"require[{n}].when", r.when, r.label) for n, r in enumerate(pick("require") or [])]
        edit_rule = pick("edit_rule")
        return found + ([("edit_rule", edit_rule.rule, edit_rule.label)] if edit_rule else [])

    def describe(self, action: str) -> str:
        """The escalation chain of `action` on one line, e.g. `C0FIN (U0A; after 14400 s: deny)`."""
        return " → ".join(_describe(level) for level in self._route(action).rules.levels)


def _level(channel: str, approvers: Approvers, timeout: int | None, on_timeout: OnTimeout) -> Level:
    return Level(
        channel=channel,
        users=approvers.users,
        usergroups=approvers.usergroups,
        timeout_seconds=timeout,
        on_timeout=on_timeout,
    )


def _describe(level: Level) -> str:
    who = ", ".join(level.users + level.usergroups)
    clock = "" if level.timeout_seconds is None else f"; after {level.timeout_seconds} s: {level.on_timeout}"
    return f"{level.channel} ({who}{clock})"


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
    """Read and validate a policy file. Raises `PolicyUnreadable` for a file that cannot be read,
    else `PolicyError` naming the file and the field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyUnreadable(f"{path}: cannot read ({exc.strerror})") from None
    return parse_policy(path, raw)


def parse_policy(path: Path, raw: bytes) -> Policy:
    """Validate `raw`, the bytes of the policy file `path` (named in errors). Raises `PolicyError`
    naming the file and the field."""
    try:
        data = yaml.load(raw, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    if data is None:
        raise PolicyError(
            f"{path}: the policy file is empty; it should be a YAML mapping (version, actions, …)"
        )
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else "single value"
        raise PolicyError(f"{path}: should be a YAML mapping (version, actions, …), not a {kind}")
    try:
        file = PolicyFile.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(f"{path}: {one_line(exc, root='policy')}") from None
    policy = Policy(file=file, path=path, sha256=hashlib.sha256(raw).hexdigest())
    for action in file.actions:
        policy.route(action)  # every named action class must resolve to a channel, approvers, a full chain
    if file.unknown_actions == "route" and not (file.defaults.channel and file.defaults.approvers):
        raise PolicyError(
            f"{path}: unknown_actions is route, so defaults needs a channel and approvers for the "
            "action classes the file does not name"
        )
    if file.defaults.channel and file.defaults.approvers:
        policy._route("defaults")  # and so must the defaults, which unnamed action classes use
    return policy
