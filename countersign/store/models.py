"""SQLAlchemy 2 models: approval requests, the append-only audit log, the outbox, dead letters.

Times are UTC. They are written by the database clock (`utcnow()`), never by a process clock, so
web and worker machines may disagree about the time without changing a decision (DESIGN.md,
invariant 10).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal

from sqlalchemy import (
    JSON,
    ColumnElement,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    literal,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.functions import FunctionElement
from typing_extensions import TypedDict  # pydantic validates these (typing's needs Python 3.12)

from .facts import Columns, RequestFacts
from .rules import Rules, RulesType

JSONType = JSON().with_variant(JSONB(), "postgresql")
NullableJSON = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""JSON where Python's None is SQL NULL (not the JSON `null`), so `IS NULL` finds it."""


class Status(StrEnum):
    """Where a request is: `pending` until one decision (an `Outcome`) ends it."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class Outcome(StrEnum):
    """How a request ended: the decision's `outcome`."""

    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class Via(StrEnum):
    """Who decided: a reviewer in Slack, a policy rule, or the policy's timeout."""

    SLACK = "slack"
    POLICY = "policy"
    TIMEOUT = "timeout"


class TimeoutResult(StrEnum):
    """What an expired request's timeout decided (`on_timeout`): nothing runs, or the payload runs."""

    DENY = "deny"
    ALLOW = "allow"


class Execution(StrEnum):
    """How the approved action went: `started`, then `executed` or `failed`, at most once."""

    STARTED = "started"
    EXECUTED = "executed"
    FAILED = "failed"


class Decider(TypedDict):
    """A reviewer who decided: the Slack user id and the name Slack gave with the click."""

    slack_user_id: str
    name: str


Edit = TypedDict("Edit", {"field": str, "from": Any, "to": Any})
"""One field a reviewer changed in the Edit modal: its name, the agent's value and the reviewer's."""


def may_run(outcome: str | None, timeout_result: str | None) -> bool:
    """True for the decisions that let the payload run: approved, or expired with the policy's
    `on_timeout: allow`. The one rule for it, used by the store, the decision and the agent."""
    return outcome == Outcome.APPROVED or (
        outcome == Outcome.EXPIRED and timeout_result == TimeoutResult.ALLOW
    )


def _enum(kind: type[StrEnum], length: int) -> Enum:
    """A `StrEnum` column stored as its values in a VARCHAR (no database enum type, no CHECK)."""
    return Enum(kind, native_enum=False, length=length, values_callable=lambda e: [m.value for m in e])


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC `datetime` on every backend.

    PostgreSQL stores `timestamptz`; SQLite has no time zones, so the value is stored as naive UTC
    text and tagged UTC again when read.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; countersign stores UTC-aware datetimes only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class utcnow(FunctionElement[datetime]):
    """The database's current UTC time, with microseconds on every backend."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(utcnow, "postgresql")
def _pg_utcnow(element: utcnow, compiler: Any, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(utcnow, "sqlite")
def _sqlite_utcnow(element: utcnow, compiler: Any, **kw: Any) -> str:
    return "strftime('%Y-%m-%d %H:%M:%f', 'now')"


class utcnow_plus(FunctionElement[datetime]):
    """The database's current UTC time plus a whole number of seconds (negative: minus), or plus an
    integer SQL expression's seconds (e.g. read from a row).

    Whole seconds are a bound parameter, so statements using this stay in SQLAlchemy's compiled
    statement cache instead of being compiled again on every call."""

    type = UTCDateTime()
    inherit_cache = True

    def __init__(self, seconds: int | ColumnElement[int]) -> None:
        super().__init__(seconds if isinstance(seconds, ColumnElement) else literal(int(seconds), Integer()))


@compiles(utcnow_plus, "postgresql")
def _pg_utcnow_plus(element: utcnow_plus, compiler: Any, **kw: Any) -> str:
    return f"(CURRENT_TIMESTAMP + make_interval(secs => {compiler.process(element.clauses, **kw)}))"


@compiles(utcnow_plus, "sqlite")
def _sqlite_utcnow_plus(element: utcnow_plus, compiler: Any, **kw: Any) -> str:
    seconds = compiler.process(element.clauses, **kw)
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', ({seconds}) || ' seconds')"


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSONType,
        list[Any]: JSONType,
        datetime: UTCDateTime(),
    }


# Partial indexes for the sweep (migration 0005): only the few pending rows it may have to act on.
CARDS_DUE = "status = 'pending' AND card_ts IS NULL"
REMINDERS_DUE = "status = 'pending' AND next_reminder_at IS NOT NULL"
CARD_REFRESH_DUE = "card_refresh_due_at IS NOT NULL"  # migration 0007
RESUME_PROBLEM = "problem IS NOT NULL"  # migration 0008
WEBHOOKS_DUE = "next_attempt_at IS NOT NULL"  # migration 0011
PENDING = "status = 'pending'"  # migration 0009: one requester's pending requests of a class
DECIDING = "event IN ('approved', 'rejected', 'vote')"  # migration 0014: what a reviewer decided
REQUESTERS_KEY = "uq_approval_requests_requester_idempotency_key"  # migration 0016: a key is its requester's


def _where(predicate: str) -> dict[str, Any]:
    """The keyword arguments of a partial `Index` on both backends."""
    return {"postgresql_where": text(predicate), "sqlite_where": text(predicate)}


class ApprovalRequest(RequestFacts, Base):
    """One approval request: the frozen payload, where its card is, and its state.

    `status` moves `pending → approved | rejected | expired` only through `Store` (each one
    conditional UPDATE). `required_approvals` distinct approvers must approve (quorum, in `votes`);
    `expires_at` is when the current escalation `level` times out (database clock): its timeout
    counted from when the level began, or from the time its card waits for in a busy channel, until
    the card is posted, then from the card's posting (`level_started_at`, from which reminders
    count, moves there too); a card waiting for its time, untried, does not time out
    (`sql.CLOCK_RUNNING`); `timeout_result` (`deny` | `allow`) is the policy's answer when it
    does (`deny` for a level whose card was never posted). `approvers` (Slack
    user ids of the current level, user groups resolved) and `rules` (`Rules`) are the policy's,
    snapshotted at intake; `earlier_approvers` are those of the levels the request escalated from
    (each level's `approvers` as it was left, distinct, in order), so a member of an earlier level's
    user group is told apart from a stranger without asking Slack (`review.was_approver`).
    `channel` is where the current level's card goes, then where it is: the level's channel (a
    channel id, or a user id for a DM) until the card is posted, then the id of the conversation
    Slack posted it in (a DM's `D…` id for a user id; `Store.attach_card`), which chat.update and
    conversations.history need. `payload` never changes; `approved_payload` is what may run (the
    payload, or the reviewer's edit, with the diff in `edits`). `execution` is `started` →
    `executed` | `failed`, at most once.
    """

    __tablename__ = "approval_requests"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(255))  # unique per requester (migration 0016)
    action: Mapped[str] = mapped_column(String(64), index=True)
    payload: Mapped[dict[str, Any]]
    payload_sha256: Mapped[str] = mapped_column(String(64))
    summary: Mapped[str] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    context: Mapped[dict[str, Any] | None]
    requester: Mapped[str] = mapped_column(String(255))
    on_behalf_of: Mapped[str | None] = mapped_column(String(32))
    run_id: Mapped[str | None] = mapped_column(String(255))
    step: Mapped[str | None] = mapped_column(String(255))
    confidence: Mapped[float | None] = mapped_column(Float)
    resume_queue: Mapped[str | None] = mapped_column(String(255))
    resume_func: Mapped[str | None] = mapped_column(String(255))
    resume_webhook: Mapped[str | None] = mapped_column(Text)  # migration 0011; else queue and func
    status: Mapped[Status] = mapped_column(_enum(Status, 16), index=True)
    channel: Mapped[str] = mapped_column(String(32))
    approvers: Mapped[list[Any]]
    policy_version: Mapped[int] = mapped_column(Integer)
    policy_sha256: Mapped[str] = mapped_column(String(64))
    card_ts: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    decided_at: Mapped[datetime | None]
    decided_by: Mapped[list[Decider] | None] = mapped_column(JSONType)
    decided_via: Mapped[Via | None] = mapped_column(_enum(Via, 16))
    decision_reason: Mapped[str | None] = mapped_column(Text)
    rules: Mapped[Rules] = mapped_column(RulesType(), server_default="{}")
    approved_payload: Mapped[dict[str, Any] | None]
    edits: Mapped[list[Edit] | None] = mapped_column(JSONType)
    grant_expires_at: Mapped[datetime | None]
    execution: Mapped[Execution | None] = mapped_column(_enum(Execution, 16))
    execution_detail: Mapped[str | None] = mapped_column(Text)
    executed_at: Mapped[datetime | None]
    review_reason: Mapped[str | None] = mapped_column(Text)
    required_approvals: Mapped[int] = mapped_column(Integer, server_default="1")
    expires_at: Mapped[datetime | None]
    level: Mapped[int] = mapped_column(Integer, server_default="0")
    level_started_at: Mapped[datetime | None]
    reminders_sent: Mapped[int] = mapped_column(Integer, server_default="0")
    timeout_result: Mapped[TimeoutResult | None] = mapped_column(_enum(TimeoutResult, 8))
    next_reminder_at: Mapped[datetime | None]
    card_lease_until: Mapped[datetime | None]
    card_attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    card_refresh_due_at: Mapped[datetime | None]
    earlier_approvers: Mapped[list[Any]] = mapped_column(JSONType, server_default="[]")  # migration 0017

    __table_args__ = (
        UniqueConstraint("requester", "idempotency_key", name=REQUESTERS_KEY),
        Index("ix_approval_requests_pending_expiry", "status", "expires_at"),
        Index("ix_approval_requests_cards_due", "level_started_at", **_where(CARDS_DUE)),
        Index("ix_approval_requests_reminders_due", "next_reminder_at", **_where(REMINDERS_DUE)),
        Index("ix_approval_requests_card_refresh_due", "card_refresh_due_at", **_where(CARD_REFRESH_DUE)),
        Index("ix_approval_requests_pending_requester", "action", "requester", **_where(PENDING)),
        Index(  # PostgreSQL only (migration 0005): whose approvals are pending (`Store.queue_for`)
            "ix_approval_requests_pending_approvers",
            "approvers",
            postgresql_using="gin",
            postgresql_ops={"approvers": "jsonb_path_ops"},
            postgresql_where=text("status = 'pending'"),
        ).ddl_if(dialect="postgresql"),
    )


class Vote(Base):
    """One approver's vote on a request that needs a quorum; one row per approver and request."""

    __tablename__ = "votes"

    request_id: Mapped[str] = mapped_column(ForeignKey("approval_requests.id"), primary_key=True)
    slack_user_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    vote: Mapped[Outcome] = mapped_column(_enum(Outcome, 16))
    at: Mapped[datetime] = mapped_column(server_default=utcnow())


class AuditEvent(Base):
    """One line of the append-only audit log: what happened to a request, who did it, and when.

    Rows are only ever inserted (`Store` has no update or delete for them).
    """

    __tablename__ = "audit_events"
    __table_args__ = (  # migration 0014: a reviewer's decisions (`Store.decided_by_user`, the Home tab)
        Index("ix_audit_events_decided_by", "actor", "request_id", **_where(DECIDING)),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), index=True)
    event: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str | None] = mapped_column(String(255))
    detail: Mapped[dict[str, Any]]
    at: Mapped[datetime] = mapped_column(server_default=utcnow())


class ResumeFailed(TypedDict):
    """`OutboxEvent.problem` of a resume job that raised before the agent recorded anything (its
    function could not be imported, or raised before `execute_approved` claimed the run): RQ's
    `error` (`"<exception type>: <message>"`) and how many more times RQ will run it."""

    event: Literal["resume_failed"]
    error: str
    retries_left: int


class ResumeNotTaken(TypedDict):
    """`OutboxEvent.problem` of a resume job no worker has taken from `queue` in `waited_seconds`."""

    event: Literal["resume_not_taken"]
    queue: str
    waited_seconds: int


class WebhookFailing(TypedDict):
    """`OutboxEvent.problem` of a webhook that has not taken the decision yet: the last attempt's
    `error` (`"HTTP 500"`, `"no answer in 5 s"`, …), how many `attempts` were made, and when
    countersign stops trying (`give_up_at`, ISO 8601 UTC)."""

    event: Literal["webhook_failing"]
    error: str
    attempts: int
    give_up_at: str


class WebhookDeadLettered(TypedDict):
    """`OutboxEvent.problem` of a webhook countersign gave up on: the last `error` and how many
    `attempts` were made. Nothing tries it again."""

    event: Literal["webhook_dead_lettered"]
    error: str
    attempts: int


class OutcomeUnknown(TypedDict):
    """`OutboxEvent.problem` of an approved action whose run started (`started_at`, ISO 8601 UTC) and
    has reported no outcome, found when the decision came again (its worker died or was stopped
    while running it, or it still runs): it is not run again, and someone must check whether it happened, then
    report the outcome (which clears this)."""

    event: Literal["outcome_unknown"]
    started_at: str


ResumeProblem = ResumeFailed | ResumeNotTaken | WebhookFailing | WebhookDeadLettered | OutcomeUnknown
"""Why the agent has not run a decision, or (`OutcomeUnknown`) whether it did is not known
(`OutboxEvent.problem`); its `event` tells which."""


class OutboxEvent(Base):
    """A resume event written in the same transaction as the decision, published after commit.

    `job_id` is unique, so a request can never have two resume events; `published_at` is set by the
    relay's sweep once it has made sure the RQ job is on the agent's queue (the job was enqueued then
    or before, usually by the decision path at once, and may have run already: `show` calls it
    `confirmed_at`). `problem` says why the agent has not run it while that is
    so (`ResumeFailed` or `ResumeNotTaken`, each also an audit event of that name), and is cleared
    when the agent's worker claims or reports the execution, or the job finishes (audited
    `resume_taken`).

    A webhook event (`webhook`, the URL; `queue` and `func` are then None) is POSTed by the
    router's sweep (`router/webhooks.py`), not enqueued: `next_attempt_at` is when its next attempt
    is due (database clock; pushed out while one runs, as its lease), `attempts` how many were
    started; `published_at` is when it was delivered. Delivered or dead-lettered, its
    `next_attempt_at` is None. Its `problem` is `WebhookFailing` or `WebhookDeadLettered`.
    """

    __tablename__ = "outbox"
    __table_args__ = (
        Index("ix_outbox_problem", "id", **_where(RESUME_PROBLEM)),  # migration 0008
        Index("ix_outbox_webhooks_due", "next_attempt_at", **_where(WEBHOOKS_DUE)),  # migration 0011
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(ForeignKey("approval_requests.id"), index=True)
    queue: Mapped[str | None] = mapped_column(String(255))
    func: Mapped[str | None] = mapped_column(String(255))
    webhook: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    next_attempt_at: Mapped[datetime | None]
    job_id: Mapped[str] = mapped_column(String(64), unique=True)
    body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    published_at: Mapped[datetime | None]
    problem: Mapped[ResumeProblem | None] = mapped_column(NullableJSON)


def standing_problem(request: Columns, problem: ResumeProblem | None) -> ResumeProblem | None:
    """The `problem` noted on `request`'s resume event, unless it is an `outcome_unknown` its outcome
    has answered since: a refusal racing with the outcome's statement may note it just after that
    statement cleared the problems (PostgreSQL reads them at its start)."""
    answered = problem is not None and problem["event"] == "outcome_unknown"
    return None if answered and request.execution != Execution.STARTED else problem


class IntakeOutbox(Base):
    """An intake message an agent was given a request id for, kept until intake has taken it (see
    `store.records`); `accepted_at` is the database clock's."""

    __tablename__ = "intake_outbox"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    message: Mapped[dict[str, Any]]
    accepted_at: Mapped[datetime] = mapped_column(server_default=utcnow(), index=True)


class DeadLetter(Base):
    """An intake message that could not become an approval request, kept whole with the reason."""

    __tablename__ = "dead_letters"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    received: Mapped[Any] = mapped_column(JSONType)
    at: Mapped[datetime] = mapped_column(server_default=utcnow())


class ApiToken(Base):
    """A per-agent API token of the HTTP API (migration 0012): only the SHA-256 of its secret is
    kept (`store/tokens.py` says why that suffices); it acts as `requester` for `actions` (action
    classes) until `revoked_at`, and its requests may name only `resume_queues` as their resume
    queue (migration 0015; None for a token created before it: any queue but countersign's own)."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    requester: Mapped[str] = mapped_column(String(128))
    actions: Mapped[list[Any]]
    resume_queues: Mapped[list[Any] | None]
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    revoked_at: Mapped[datetime | None]


class PolicyVersion(Base):
    """A policy version the router took (migration 0018, `store/policies.py`), at start or on a
    reload: its `version:`, SHA-256 and action classes; `id` orders them."""

    __tablename__ = "policy_versions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    actions: Mapped[list[Any]]
    taken_at: Mapped[datetime] = mapped_column(server_default=utcnow())


class AuditSeal(Base):
    """One link of the audit chain (migration 0013, `store/chain.py`): audit event `event_id` sealed
    as the `seq`-th event, with the SHA-256 of its content (`event_sha256`, RFC 8785 canonical JSON
    without its id), the previous link's `hash` (`prev_hash`; 64 zeros for the first) and its own
    `hash` = SHA-256(`prev_hash` + canonical JSON of the event with its id). `sealed_at` is the
    database clock's."""

    __tablename__ = "audit_seals"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    event_id: Mapped[int] = mapped_column(Integer, unique=True)
    event_sha256: Mapped[str] = mapped_column(String(64))
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    sealed_at: Mapped[datetime] = mapped_column(server_default=utcnow())
