"""The gate: whether a request needs a human, decided at intake by its action class's CEL rules
(`always_review`, `auto_approve`, `review_when`), and how many approvals it needs (`require`).

A rule may carry a `label`, the words reviewers see for it; the CEL itself is for the policy's
authors (the Details modal, the audit trail, the log, `countersign policy check`). A rule that
cannot be evaluated (an error, a missing field, a value that is not a boolean) fails closed: the
request is reviewed, and a failing `require.when` asks for the largest quorum listed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Annotated, Any

import cel
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from ..validation import Matches
from . import texts

MAX_LABEL = 150


CEL_FUNCTIONS = frozenset(
    {
        *("int", "uint", "double", "string", "bytes", "timestamp", "duration", "dyn", "type"),
        *("size", "contains", "startsWith", "endsWith", "matches"),
        *("getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek"),
        *("getHours", "getMinutes", "getSeconds", "getMilliseconds"),
        *("of", "none", "hasValue", "value", "orValue", "or"),  # optional.of(x).orValue(y)
    }
)
"""The functions the `cel` library evaluates when it is given no functions (as the rules are): the
Rust `cel` crate's standard library (`cel.stdlib`'s docstring lists it; `max`, `abs`, `lowerAscii`
and the other cel-go extensions are not in it), its timestamp and duration accessors, and
`optional`. The macros (`has`, `all`, `exists`, `exists_one`, `map`, `filter`) are not calls."""


def _cel(expression: str) -> str:
    """`expression` if the `cel` library compiles it and it calls no function outside
    `CEL_FUNCTIONS` (the library has no type checker; `Program.functions()` is its own static list
    of the calls, operators named `_+_`, `!_`, `@in`), else ValueError. A misspelt function would
    otherwise fail only when evaluated, a rule that fails closed on every request."""
    try:
        program = cel.compile(expression)
    except ValueError as exc:
        raise ValueError(f"not a valid CEL expression ({str(exc).splitlines()[0]})") from None
    unknown = [name for name in program.functions() if name[:1].isalpha() and name not in CEL_FUNCTIONS]
    if unknown:
        raise ValueError(f"CEL has no function {', '.join(unknown)} (a typo?)")
    return expression


GATE_VARIABLES = ("payload", "confidence", "requester", "action")
"""The variables of the gate's rules (`auto_approve`, `review_when`, `require[].when`): `facts_of`."""

EDIT_VARIABLES = ("original", "edited")
"""The variables of an `edit_rule`: the payload before and after the reviewer's edit (`edits.check`)."""

_BOUND = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
"""The names a comprehension macro binds (`x` in `payload.items.all(x, x > 0)`), which the `cel`
library's `Program.variables()` reports as variables too."""


def check_variables(expression: str, variables: Collection[str]) -> None:
    """Raise ValueError naming each variable `expression` (a CEL expression `_cel` accepted) reads
    that is neither one of `variables` nor bound by a macro in it. A misspelt variable (`paylod`)
    would otherwise fail only when evaluated, a rule that fails closed on every request."""
    bound = set(_BOUND.findall(expression))
    read = cel.compile(expression).variables()
    unknown = [name for name in read if name not in variables and name not in bound]
    if unknown:
        raise ValueError(
            f"CEL has no variable {', '.join(unknown)} here (a typo? the variables are "
            f"{', '.join(variables)})"
        )


CelExpression = Annotated[str, AfterValidator(_cel)]
Label = Annotated[
    str, Field(min_length=1, max_length=MAX_LABEL), Matches(r"^[^\r\n]+$", "one line, without line breaks")
]


class Rule(BaseModel):
    """A CEL rule and the words reviewers see for it: written as the CEL string alone, or as
    `{rule: CEL, label: text}` (one line, at most 150 characters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: CelExpression
    label: Label | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, value: Any) -> Any:
        return {"rule": _cel(value)} if isinstance(value, str) else value


class Requirement(BaseModel):
    """Quorum: when the CEL expression `when` holds, `approvals` distinct approvers must approve;
    `label` is what reviewers read instead of `when`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    when: CelExpression
    approvals: Annotated[int, Field(ge=1, le=10)]
    label: Label | None = None


HELD, NOT_HELD = ": ", " did not hold: "
"""What follows a rule's key in `Verdict.technical`, when it held and when it did not."""


@dataclass(frozen=True)
class Verdict:
    """One rule's result: `key` (`auto_approve`, `review_when`, `require[N].when`), the `rule` as
    written and its `label`, and whether it `held` (None: it could not be evaluated, see `error`)."""

    key: str
    rule: str
    label: str | None
    held: bool | None
    error: str | None = None

    def technical(self) -> str:
        """The result with the rule as written, e.g. `auto_approve did not hold: payload.x < 5`."""
        if self.held is None:
            return f"{self.key} could not be evaluated ({self.rule}): {self.error}"
        return f"{self.key}{HELD if self.held else NOT_HELD}{self.rule}"


LET_THROUGH = ("auto_approve" + HELD, "review_when" + NOT_HELD)
"""How every `Gate.reason` of a request the gate lets through without review begins (`judge`)."""


def let_through(reason: str | None) -> bool:
    """Whether `reason`, a `Gate.reason` as stored (`Rules.review_rule`), is the gate's for a
    request it let through without review (`auto_approve` held, or `review_when` did not): how the
    card sweep tells a pending row an older version stored and died before approving by policy
    from one awaiting its card (DESIGN.md, invariant 12). No reason of a reviewed request begins so:
    that one starts `always_review`, `no auto_approve`, `auto_approve did not hold` or `could not`,
    or `review_when:` or `could not`."""
    return reason is not None and reason.startswith(LET_THROUGH)


@dataclass(frozen=True)
class Gate:
    """Whether a request needs a human.

    `review`; `approvals`: how many distinct approvers must approve; `says`: why, in the words
    reviewers see on the card (rule labels, or plain words, never CEL); `reason`: the same with the
    rules as written and any evaluation error (audit trail, Details, log, and the decision's
    `reason` when the policy approves); `errors`: each rule that could not be evaluated, and why.
    """

    review: bool
    reason: str
    approvals: int = 1
    says: str = ""
    errors: tuple[str, ...] = ()


def evaluate(expression: str, facts: dict[str, Any]) -> tuple[bool | None, str | None]:
    """The CEL expression's value over `facts`: `(True or False, None)`, or `(None, error)` when
    it fails or its value is not a boolean (`error`: one line, e.g. `KeyError: 'amount'`)."""
    try:
        value = cel.evaluate(expression, facts)
    except Exception as exc:  # any CEL failure means "unknown", and callers fail closed
        first = (str(exc).splitlines() or [""])[0]
        return None, texts.clip(f"{type(exc).__name__}: {first}", 300)
    if isinstance(value, bool):
        return value, None
    return None, texts.clip(f"the value is {type(value).__name__} {value!r}, not a boolean", 300)


def _verdict(key: str, rule: str, label: str | None, facts: dict[str, Any]) -> Verdict:
    held, error = evaluate(rule, facts)
    return Verdict(key, rule, label, held, error)


def judge(action: str, pick: Callable[[str], Any], facts: dict[str, Any]) -> Gate:
    """The gate for a request of class `action`, by the rules `pick(key)` returns for it, over
    `facts` (`{"payload", "confidence", "requester", "action"}`, the CEL variables).
    `always_review` wins over everything; otherwise the request is approved by policy when
    `auto_approve` holds, or when `review_when` is set and does not hold."""
    if pick("always_review"):
        review, verdict = True, None
        reason, says = f"always_review: every {action} needs a human", texts.always_reviewed(action)
    else:
        review, verdict = _review(pick("auto_approve"), pick("review_when"), facts)
        every = f"no auto_approve or review_when: every {action} needs a human"
        reason = verdict.technical() if verdict else every
        says = (
            texts.rule_result(verdict.key, verdict.held, verdict.label)
            if verdict
            else texts.reviewed_every(action)
        )
    if not review:
        return Gate(False, reason, says=says)
    approvals, quorum = _quorum(pick("require") or [], facts)
    verdicts = [v for v in (verdict, quorum) if v is not None]
    errors = tuple(f"{v.key}: {v.error}" for v in verdicts if v.held is None)
    if quorum is None:
        return Gate(True, reason, approvals, says, errors)
    why = quorum.rule if quorum.held else quorum.technical()
    said = texts.quorum_reason(approvals, quorum.held, quorum.label)
    return Gate(True, f"{reason}; {approvals} approvals because {why}", approvals, f"{says}; {said}", errors)


def _review(
    auto: Rule | None, review_when: Rule | None, facts: dict[str, Any]
) -> tuple[bool, Verdict | None]:
    """Whether a human reviews, and the verdict of the rule that decided (None: no rule is set)."""
    if auto is not None:
        verdict = _verdict("auto_approve", auto.rule, auto.label, facts)
        if verdict.held is not False or review_when is None:
            return verdict.held is not True, verdict
    if review_when is not None:
        verdict = _verdict("review_when", review_when.rule, review_when.label, facts)
        return verdict.held is not False, verdict
    return True, None


def _quorum(requirements: list[Requirement], facts: dict[str, Any]) -> tuple[int, Verdict | None]:
    """How many approvals the request needs, and the verdict of the requirement that said so (None:
    the default of one)."""
    for index, requirement in enumerate(requirements):
        verdict = _verdict(f"require[{index}].when", requirement.when, requirement.label, facts)
        if verdict.held is None:
            return max(r.approvals for r in requirements), verdict
        if verdict.held:
            return requirement.approvals, verdict
    return 1, None


def facts_of(request: Any) -> dict[str, Any]:
    """The CEL variables of a request's rules (`Policy.gate`): `{"payload", "confidence",
    "requester", "action"}` of `request` (an `ApprovalRequestV1` at intake, or a recorded
    `Request` when a policy is replayed)."""
    return {name: getattr(request, name) for name in GATE_VARIABLES}
