"""What the store's transitions return: who won, and what the caller should do next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from .models import Decider
from .rows import Event, Request


class ResumeEvent(NamedTuple):
    """The outbox row a decision writes: the resume job's RQ id and its single argument, the decision
    (JSON-ready). The store asks the caller for it (`resume(decided request)`), in the transaction."""

    job_id: str
    body: dict[str, Any]


NotExecutableWhy = Literal[
    "unknown_request",
    "not_approved",
    "already_executed",
    "already_failed",
    "outcome_unknown",
    "grant_expired",
]


@dataclass(frozen=True)
class Decided:
    """`Store.decide` won: the request is now in `request.status`; `event` is its resume event."""

    request: Request
    event: Event


@dataclass(frozen=True)
class Counted:
    """`Store.vote` counted the vote but the quorum is not reached yet: `approvals` so far
    (`[{slack_user_id, name}]`); `repeated` when this approver had already voted."""

    request: Request
    approvals: list[Decider]
    repeated: bool = False


@dataclass(frozen=True)
class TimedOut:
    """A reviewer acted after the request's deadline: nothing changed; the policy's timeout decides."""

    request: Request


@dataclass(frozen=True)
class Refused:
    """`Store.vote` refused the voter (the caller's `refuse` check, on the locked row): nothing
    changed but a `refused` audit event; `why` is its refusal code (e.g. `not_an_approver`)."""

    request: Request
    why: str


@dataclass(frozen=True)
class AlreadyDecided:
    """`Store.decide` lost: the request had already left `pending`; `request` shows who decided what."""

    request: Request


@dataclass(frozen=True)
class NotExecutable:
    """`Store.claim_execution` refused: nothing runs; `why` says why (audited `execution_refused`)."""

    why: NotExecutableWhy
