"""Every error countersign raises, under one base, `CountersignError`.

Each message is one line a person can act on. The classes that are also a built-in kind keep it as a
second base (`InvalidRequest` is a `ValueError`, `UnknownRequest` a `LookupError`), so callers that
caught the built-in keep working.
"""

from __future__ import annotations


class CountersignError(Exception):
    """The base of every countersign error."""


class ConfigError(CountersignError):
    """A setting is missing or malformed; `str(err)` is one line naming the variable."""


class SchemaOutOfDate(CountersignError):
    """The database is not at the schema this version of countersign needs."""


class InvalidRequest(CountersignError, ValueError):
    """An approval request that does not match schema v1; `str(err)` is one line naming each field."""


class UnknownAction(InvalidRequest):
    """The request's action class is not named in the policy, which refuses unknown classes
    (`unknown_actions: refuse`, the default); `str(err)` names it and the known classes."""


class UnknownRequest(CountersignError, LookupError):
    """No approval request (nor dead letter, nor queued intake) has this id."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"no approval request {request_id!r}")
        self.request_id = request_id


class IdempotencyConflict(CountersignError):
    """The idempotency key was already used with another action class or payload; nothing was
    enqueued."""

    def __init__(self, key: str, request_id: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was already used with another action class or payload "
            f"(request {request_id})"
        )
        self.key = key
        self.request_id = request_id


class ServiceUnavailable(CountersignError):
    """A database, Redis or Slack that a command needs does not answer, or fails: a failure at run
    time (the same command may work later), not a bad setting; `str(err)` is one line naming the
    setting (`DATABASE_URL`, `REDIS_URL`, `SLACK_API_URL`) and what to do. The CLI exits 1."""


class RouterUnavailable(ServiceUnavailable):
    """Redis could not be reached; retry later with the same idempotency key (it is safe)."""


class ExecutionRefused(CountersignError):
    """An approved action may not run (again): `why` is `malformed_decision` | `unknown_request` |
    `not_approved` | `already_executed` (it ran, and reported success) | `already_failed` (it ran,
    and raised or reported failure) | `outcome_unknown` (a run started before has reported no
    outcome: if none comes, someone must check) | `grant_expired` | `bad_signature` |
    `payload_mismatch`. None of them lets the same decision run when it is tried again (a request
    `not_approved` yet runs with the decision its approval brings); `consequence` says, in words,
    whether the action ever started and what to do."""

    def __init__(self, request_id: str, why: str) -> None:
        super().__init__(f"request {request_id}: execution refused ({why})")
        self.request_id = request_id
        self.why = why

    @property
    def consequence(self) -> str:
        """What the refusal means for the action, and what to do: whether it started before (and
        how it went) or never ran; in each case the same decision does not run again."""
        return _CONSEQUENCES.get(self.why, "nothing ran, and trying again would be refused too")


_CONSEQUENCES = {
    "already_executed": "the action already ran and succeeded; not run again",
    "already_failed": "the action already ran and failed; not run again",
    "outcome_unknown": "the action started and its outcome is unknown; not run again",
    "not_approved": (
        "nothing ran: the request is not approved (still pending, or rejected or expired); wait for "
        "its decision and claim with it only when it is approved and carries a grant"
    ),
    "unknown_request": "nothing ran: countersign holds no request with this id",
    "malformed_decision": "nothing ran: send the decision as countersign gave it",
    "bad_signature": (
        "nothing ran: the grant is missing or not signed by this router (COUNTERSIGN_SECRET); send "
        "the decision as countersign gave it"
    ),
    "payload_mismatch": "nothing ran: the payload is not the one approved; run the decision's own payload",
    "grant_expired": (
        "nothing ran, and trying again would be refused too: the grant expired; send a new request "
        "to ask again"
    ),
}


class PolicyError(CountersignError, ValueError):
    """The policy file cannot be used; `str(err)` names the file, and the action class and field."""


class PolicyUnreadable(PolicyError):
    """The policy file cannot be read at all (missing, a directory, no permission): bad input, like
    any file a command is given that is not there, even to `policy check`, whose answer for a file
    it read is whether the policy is valid."""


class IntakeLimitReached(CountersignError):
    """Intake refused a request over the policy's `limits` (requests a minute, or pending at once,
    per requester and action class); `str(err)` names the limit, and when to send it again."""


class RetryLater(CountersignError):
    """Slack (or the channel's pace) asks to wait `seconds` before trying again; `why`, when given,
    is what Slack answered (its error code, e.g. `ratelimited`, or the network error's name)."""

    def __init__(self, seconds: float, why: str = "") -> None:
        super().__init__(f"retry in {seconds:g} s" + (f" ({why})" if why else ""))
        self.seconds = seconds
        self.why = why


class BadSlackBody(CountersignError, ValueError):
    """A signed request to `/slack/events` whose body is not the one form Slack sends interactions in
    (`bot.body.parse`); `str(err)` says what is wrong. Answered 400; nothing changes."""


class UnknownToken(CountersignError, LookupError):
    """No live API token has this id (or secret); `str(err)` says which and what to do."""


class UsageError(CountersignError):
    """A command-line value is malformed (e.g. `--payload` is not JSON)."""


class StackError(CountersignError):
    """A part of the local stack (`countersign run`) could not start; the message says which."""


class WaitTimeout(CountersignError, TimeoutError):
    """`wait` gave up after `seconds` with the request still undecided (pending, or queued for
    intake). Nothing changed: the request stays pending, so the agent may wait again with the same
    `request_id` or be resumed later. Also a built-in `TimeoutError`, as `Future.result(timeout)`
    and `asyncio.wait_for` raise."""

    def __init__(self, request_id: str, seconds: float) -> None:
        super().__init__(f"request {request_id} is still undecided after {seconds:g} s; wait again later")
        self.request_id = request_id
        self.seconds = seconds


class RequestDeadLettered(CountersignError):
    """Intake refused the request (it never reached a reviewer and will not be decided): `reason` is
    the dead letter's, e.g. an action class the policy does not name, or an intake limit. Sending it
    again with the same idempotency key is allowed once the cause is fixed."""

    def __init__(self, request_id: str, reason: str) -> None:
        super().__init__(f"request {request_id} was refused at intake: {reason}")
        self.request_id = request_id
        self.reason = reason
