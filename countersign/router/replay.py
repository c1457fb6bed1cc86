"""Policy replay (`countersign policy replay`): every recorded request run through a candidate
policy's rules, to see what it would have let through before it is loaded. Nothing is written.

A request "let through" is one the candidate would have auto-approved that a human rejected (the
reason to refuse the candidate) or edited before approving.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..exceptions import PolicyError, UnknownAction
from ..store import Request, Status, Via
from .gate import facts_of
from .policy import Policy
from .texts import counted

SHOWN = 20
"""At most this many request ids listed per finding."""


@dataclass
class Replay:
    """What the candidate would have done with `requests` recorded requests: `auto_approved` (and
    `auto_approved_then`: how many the recorded policy did), the ids of those a human `rejected`
    or `edited` that it would have let through, those whose first-level channel (`rerouted`) or
    quorum (`requorumed`) would change, and those of classes it cannot route (`unroutable`)."""

    requests: int = 0
    auto_approved: int = 0
    auto_approved_then: int = 0
    rejected: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    rerouted: list[str] = field(default_factory=list)
    requorumed: list[str] = field(default_factory=list)
    unroutable: list[str] = field(default_factory=list)

    @property
    def lets_through_a_rejection(self) -> bool:
        """True when the candidate would have auto-approved a request a human rejected."""
        return bool(self.rejected)

    def lines(self) -> list[str]:
        """The report `countersign policy replay` prints."""
        return [
            f"{counted(self.requests, 'recorded request')} replayed",
            f"would auto-approve {self.auto_approved} "
            f"(the recorded policy auto-approved {self.auto_approved_then})",
            _listed("would have let through, rejected by a human", self.rejected),
            _listed("would have let through, edited by a human", self.edited),
            _listed("first-level channel would change", self.rerouted),
            _listed("quorum would change", self.requorumed),
            _listed("action class the candidate cannot route", self.unroutable),
        ]


def _listed(what: str, ids: list[str]) -> str:
    more = f" (+{len(ids) - SHOWN} more)" if len(ids) > SHOWN else ""
    return f"{what}: {len(ids)}" + (f": {', '.join(ids[:SHOWN])}{more}" if ids else "")


def replay(candidate: Policy, requests: Iterable[Request]) -> Replay:
    """Run each recorded request through `candidate` (`Policy.route` and `Policy.gate` over the
    request's payload, confidence, requester and action, as intake does) and tally the result."""
    result = Replay()
    for request in requests:
        result.requests += 1
        result.auto_approved_then += request.decided_via == Via.POLICY and request.status == Status.APPROVED
        try:
            route = candidate.route(request.action)
        except (PolicyError, UnknownAction):  # a class the candidate refuses or cannot route
            result.unroutable.append(request.id)
            continue
        gate = candidate.gate(request.action, facts_of(request))
        if route.channel != (request.rules.level(0).channel or request.channel):
            result.rerouted.append(request.id)
        if gate.approvals != request.required_approvals:
            result.requorumed.append(request.id)
        if gate.review:
            continue
        result.auto_approved += 1
        if request.decided_via == Via.SLACK and request.status == Status.REJECTED:
            result.rejected.append(request.id)
        elif request.decided_via == Via.SLACK and request.edits:
            result.edited.append(request.id)
    return result
