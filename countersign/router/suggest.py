"""Graduation advice (`countersign policy suggest`): for each action class, the narrowest
auto-approve rule the recorded human decisions support, with the evidence, or why none.

For a numeric payload field (a number, or a string that reads as one, in every human decision of
the class), the supported bound is the largest value a human approved unedited below the smallest
value a human rejected or edited, rounded down to a plain number (1, 2, 2.5 or 5 times a power of
ten): the rule `double(payload.FIELD) <= BOUND` then covers only values humans always approved as
they were, and never reaches a value a human stopped. Nothing is suggested for a class marked
`always_review`, nor on fewer than `min_decisions` human decisions in range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..store import ApprovalRequest, Status, Via
from .policy import Policy

MIN_DECISIONS = 200
"""Default evidence needed: human decisions inside the suggested range."""


@dataclass(frozen=True)
class Suggestion:
    """For `action`: the `rule` (CEL) with its evidence (`decisions` human decisions in range, all
    approved unedited), or `rule` None and `why` nothing is suggested."""

    action: str
    rule: str | None
    decisions: int = 0
    why: str = ""

    def lines(self, policy: Policy) -> list[str]:
        """The suggestion as a diff against the policy file's entry for `action`."""
        if self.rule is None:
            return [f"# {self.action}: nothing suggested: {self.why}"]
        label = f"history: {self.decisions} human decisions in this range, 0 rejected, 0 edited"
        current = policy.setting(self.action, "auto_approve")
        old = [f"-    auto_approve: {{rule: {current.rule!r}}}"] if current is not None else []
        return [
            f"   {self.action}:",
            *old,
            "+    auto_approve:",
            f"+      rule: {self.rule!r}",
            f"+      label: {label!r}",
        ]


def plain_floor(value: float) -> float | None:
    """The largest of 1, 2, 2.5 and 5 times a power of ten that is at most `value` (> 0), else None."""
    if value <= 0:
        return None
    power = 10 ** math.floor(math.log10(value))
    return float(max(m * power for m in (1, 2, 2.5, 5, 10) if m * power <= value))


def suggest(
    policy: Policy, requests: Iterable[ApprovalRequest], min_decisions: int = MIN_DECISIONS
) -> list[Suggestion]:
    """One `Suggestion` per action class among the human-decided `requests` (see the module
    docstring), sorted by class."""
    decided: dict[str, list[ApprovalRequest]] = {}
    for request in requests:
        if request.decided_via == Via.SLACK and request.status in (Status.APPROVED, Status.REJECTED):
            decided.setdefault(request.action, []).append(request)
    return [_one(policy, action, rows, min_decisions) for action, rows in sorted(decided.items())]


def _one(policy: Policy, action: str, rows: list[ApprovalRequest], min_decisions: int) -> Suggestion:
    if policy.setting(action, "always_review"):
        return Suggestion(action, None, why="always_review: no rule may approve it without a human")
    best: Suggestion | None = None
    for name in _numeric_fields(rows):
        found = _bound(action, name, rows)
        if found.rule is not None and (best is None or found.decisions > best.decisions):
            best = found
    if best is None:
        return Suggestion(action, None, why="no numeric payload field bounds what humans approved")
    if best.decisions < min_decisions:
        return Suggestion(
            action,
            None,
            best.decisions,
            f"thin evidence: {best.decisions} human decisions in range, need {min_decisions}",
        )
    return best


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _numeric_fields(rows: list[ApprovalRequest]) -> list[str]:
    """The top-level payload fields that read as a number in every row."""
    names = set(rows[0].payload)
    for row in rows:
        names &= {name for name, value in row.payload.items() if _number(value) is not None}
    return sorted(names)


def _bound(action: str, name: str, rows: list[ApprovalRequest]) -> Suggestion:
    """The rule on field `name` below every value a human stopped, with its evidence."""
    stopped = [_number(row.payload[name]) or 0.0 for row in rows if not _clean(row)]
    first_stop = min(stopped, default=math.inf)
    below = [
        value for row in rows if _clean(row) and (value := _number(row.payload[name]) or 0.0) < first_stop
    ]
    bound = plain_floor(max(below)) if below else None
    if bound is None:
        return Suggestion(action, None, why=f"no approval below the first rejection or edit of {name}")
    inside = sum(1 for row in rows if (_number(row.payload[name]) or 0.0) <= bound)
    return Suggestion(action, f"double(payload.{name}) <= {bound!r}", inside)


def _clean(row: ApprovalRequest) -> bool:
    """A human approved it as the agent asked (no edit)."""
    return row.status == Status.APPROVED and not row.edits
