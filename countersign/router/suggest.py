"""Graduation advice (`countersign policy suggest`): for each action class, the narrowest
auto-approve rule the recorded human decisions support, with the evidence, or why none.

The evidence is the class's human decisions the policy in force would still send to a human
(`Policy.gate`, its own evaluation); decisions it already auto-approves add nothing. For a numeric
payload field (a number, or a string that reads as one, in every human decision of the class), the
supported range runs from the lowest value a human approved unedited to the largest such value
below the smallest value a human rejected or edited, the top rounded down to a plain number (1, 2,
2.5 or 5 times a power of ten) unless that falls below the lowest. The suggested rule is the
current rule, kept whole (its bounds, its other conditions, its label), OR that range, narrowed
further by every other payload field that had one value throughout it (e.g. `payload.currency == "USD"`):

    (CURRENT) || (double(payload.F) >= LOW && double(payload.F) <= HIGH && payload.G == "V")

so it only ever adds values humans always approved as they were: never a value below or above the
ones seen (a negative amount nobody sent), never one a human stopped. Nothing is suggested for a
class marked `always_review`, nor on fewer than `min_decisions` human approvals in the range.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..store import Request, Status, Via
from .gate import Rule, facts_of
from .policy import Policy

MIN_DECISIONS = 200
"""Default evidence needed: human approvals inside the suggested range."""

_PLAIN_TEXT = re.compile(r"^[\w .@:/-]{1,100}$")
"""Field values written into a suggested rule as a CEL string literal as they are."""


@dataclass(frozen=True)
class Suggestion:
    """For `action`: the `rule` (CEL) with its evidence (`decisions` human approvals, unedited, in
    the added range, described by `evidence`), or `rule` None and `why` nothing is suggested."""

    action: str
    rule: str | None
    decisions: int = 0
    why: str = ""
    evidence: str = ""

    def lines(self, policy: Policy) -> list[str]:
        """The suggestion as a diff against the policy file's entry for `action`; the current
        rule's label (what reviewers read) is kept, the evidence is a comment line."""
        if self.rule is None:
            return [f"# {self.action}: nothing suggested: {self.why}"]
        current = policy.setting(self.action, "auto_approve")
        old = [f"-    auto_approve: {_written(current)}"] if current is not None else []
        label = [f"+      label: {current.label!r}"] if current is not None and current.label else []
        notes = [f"# {self.action}: {self.evidence}"]
        if label:
            notes.append(
                f"# {self.action}: the label is kept; reword it if it no longer says what the rule does"
            )
        return [
            f"   {self.action}:",
            *old,
            "+    auto_approve:",
            f"+      rule: {self.rule!r}",
            *label,
            *notes,
        ]


def _written(rule: Rule) -> str:
    """`rule` as the policy file may write it: `{rule: ..., label: ...}`, without a label it has not."""
    label = f", label: {rule.label!r}" if rule.label else ""
    return f"{{rule: {rule.rule!r}{label}}}"


def plain_floor(value: float) -> float | None:
    """The largest of 1, 2, 2.5 and 5 times a power of ten that is at most `value` (> 0), else None."""
    if value <= 0:
        return None
    power = 10 ** math.floor(math.log10(value))
    return float(max(m * power for m in (1, 2, 2.5, 5, 10) if m * power <= value))


def suggest(
    policy: Policy, requests: Iterable[Request], min_decisions: int = MIN_DECISIONS
) -> list[Suggestion]:
    """One `Suggestion` per action class among the human-decided `requests` (see the module
    docstring), sorted by class."""
    decided: dict[str, list[Request]] = {}
    for request in requests:
        if request.decided_via == Via.SLACK and request.status in (Status.APPROVED, Status.REJECTED):
            decided.setdefault(request.action, []).append(request)
    return [_one(policy, action, rows, min_decisions) for action, rows in sorted(decided.items())]


def _one(policy: Policy, action: str, rows: list[Request], min_decisions: int) -> Suggestion:
    if policy.setting(action, "always_review"):
        return Suggestion(action, None, why="always_review: no rule may approve it without a human")
    reviewed = [row for row in rows if policy.gate(action, facts_of(row)).review]
    if not reviewed:
        return Suggestion(
            action, None, why=f"the current rule already auto-approves all {len(rows)} human decisions"
        )
    found = [_range(policy, action, name, reviewed) for name in _numeric_fields(rows)]
    best = max(found, key=lambda one: (one.rule is not None, one.decisions), default=None)
    if best is None:
        return Suggestion(action, None, why="no numeric payload field bounds what humans approved")
    if best.rule is not None and best.decisions < min_decisions:
        return Suggestion(
            action, None, best.decisions, f"thin evidence: {best.evidence}, need {min_decisions}"
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


def _numeric_fields(rows: list[Request]) -> list[str]:
    """The top-level payload fields that read as a number in every row."""
    names = set(rows[0].payload)
    for row in rows:
        names &= {name for name, value in row.payload.items() if _number(value) is not None}
    return sorted(names)


def _value(row: Request, name: str) -> float:
    return _number(row.payload[name]) or 0.0


def _range(policy: Policy, action: str, name: str, reviewed: list[Request]) -> Suggestion:
    """The current rule OR the range of field `name` humans always approved as asked, below every
    value a human stopped, among the `reviewed` decisions (those the current policy sends to a
    human); `why` says what was counted when there is no such range."""
    first_stop = min((_value(row, name) for row in reviewed if not _clean(row)), default=math.inf)
    clean = [row for row in reviewed if _clean(row) and _value(row, name) < first_stop]
    stop = f" below the first rejection or edit at {first_stop!r}" if first_stop < math.inf else ""
    if not clean:
        return Suggestion(
            action, None, why=f"no human approved {name} unedited{stop} among {len(reviewed)} reviewed"
        )
    low = min(_value(row, name) for row in clean)
    top = max(_value(row, name) for row in clean)
    rounded = plain_floor(top) or top
    high = rounded if rounded >= low else top
    inside = [row for row in clean if _value(row, name) <= high]
    field = f"double(payload.{name})"
    added = " && ".join([f"{field} >= {low!r}", f"{field} <= {high!r}", *_same(inside, name)])
    current = policy.setting(action, "auto_approve")
    rule = f"({current.rule}) || ({added})" if current is not None else added
    evidence = (
        f"{len(inside)} human decisions with {name} from {low!r} to {high!r} (not auto-approved by "
        f"the current policy), 0 rejected, 0 edited"
    )
    return Suggestion(action, rule, len(inside), evidence=evidence)


def _same(rows: list[Request], numeric: str) -> list[str]:
    """`payload.G == "V"` for each other top-level field that was the same plain string in every row."""
    conditions = []
    for name in sorted(set(rows[0].payload) - {numeric}):
        values = {str(row.payload.get(name)) for row in rows if isinstance(row.payload.get(name), str)}
        everywhere = all(isinstance(row.payload.get(name), str) for row in rows)
        if everywhere and len(values) == 1 and _PLAIN_TEXT.match(value := values.pop()):
            conditions.append(f'payload.{name} == "{value}"')
    return conditions


def _clean(row: Request) -> bool:
    """A human approved it as the agent asked (no edit)."""
    return row.status == Status.APPROVED and not row.edits
