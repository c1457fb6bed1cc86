"""The agent side: ask for approval and exit, or wait for the decision in process; look a request up.

    client = ApprovalClient.from_env()
    request_id = client.request(action="issue_refund", payload={"amount": "120.00"}, ...)
    decision = client.wait(request_id, timeout=600)   # or request_and_wait(..., timeout=600)

`request()` answers before any worker has run: idempotency is decided at once in Redis
(`countersign.idempotency`), the intake message is kept in the database's intake outbox (so the id
survives Redis losing the job: `store.records`), then the intake job is enqueued for the router
worker.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from ..config import Settings, load_settings
from ..connections import Connections
from ..decision import Decision
from ..exceptions import RouterUnavailable, UnknownRequest
from ..idempotency import claim_or_find, is_request_id
from ..router.jobs import INTAKE_QUEUE, enqueue_intake, intake_job_id, json_queue, webhook_id
from ..schema import ALLOW_HTTP, ApprovalRequestV1, IntakeMessage, iso, parse
from ..store import OutboxEvent, Request, Store, standing_problem
from . import waiting


@dataclass(frozen=True)
class RequestState:
    """A request as the router knows it now.

    `status`: `queued` (accepted, intake not run yet) | `pending` | `approved` | `rejected` |
    `expired` | `dead_letter` (intake refused it: see `reason`). `request` has one shape whatever the
    status, `REQUEST_FIELDS`: the request as stored, or for a queued or dead-lettered one as it was
    sent (from its intake message), where what intake had not set yet (`payload_sha256`, `channel`,
    `approvers`, `policy_version`) is null, `created_at` is when it was accepted or dead-lettered, and
    a field the message lacks (or all, for a message without a request object) is null; null only for
    a request known from its RQ job alone. `decision` is the resume decision
    once decided, and `resume` its job: `{job_id, queue, func, confirmed_at, problem}` (`confirmed_at`:
    when the relay's sweep made sure the job was on its queue, or null before; the job was enqueued
    then or earlier, usually by the decision path at once, and may have run before it), or for a
    webhook `{webhook, webhook_id, attempts, next_attempt_at, delivered_at, problem}` (for a
    request that named no resume target, the first shape with `queue` and `func` null), where
    `problem` says why the agent has not run it while that is so (`ResumeFailed`,
    `ResumeNotTaken`, `WebhookFailing`, `WebhookDeadLettered`), or that the decision came again
    to a run started at `started_at` that has reported no outcome (`OutcomeUnknown`: check, then
    report it), else null. `audit` lists the events in the order they happened (their sequence in
    the database), each `{at, event, actor, detail}`. Times are ISO 8601 UTC with a `Z` (`schema.iso`).
    """

    request_id: str
    status: str
    request: dict[str, Any] | None = None
    card: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    reason: str | None = None
    audit: list[dict[str, Any]] = field(default_factory=list)
    resume: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (what `countersign show` prints)."""
        return asdict(self)


class ApprovalClient:
    """Enqueue approval requests and read their state. Thread-safe; cheap to keep for a process."""

    def __init__(self, redis: Redis, store: Store, *, allow_http_webhooks: bool = False) -> None:
        self._redis = redis
        self._store = store
        self._checks = {ALLOW_HTTP: allow_http_webhooks}  # COUNTERSIGN_WEBHOOK_ALLOW_HTTP
        self._intake = json_queue(INTAKE_QUEUE, redis)

    @classmethod
    def from_env(cls, settings: Settings | None = None) -> ApprovalClient:
        """A client on `REDIS_URL` and `DATABASE_URL` from the environment (or `settings`), taking
        `http://` webhooks on any host when `COUNTERSIGN_WEBHOOK_ALLOW_HTTP` is set. Raises
        `ConfigError` (one line naming `DATABASE_URL` and `countersign db upgrade`) when
        `DATABASE_URL` (or its default, `sqlite:///countersign.db`) names a SQLite file that does not
        exist, rather than creating it empty; nothing else is connected to yet."""
        connections = Connections(settings or load_settings())
        connections.check_sqlite_file()
        return cls.on(connections)

    @classmethod
    def on(cls, connections: Connections) -> ApprovalClient:
        """A client on a process's `connections` (e.g. `connections.current()`, which a resume job
        shares), with `COUNTERSIGN_WEBHOOK_ALLOW_HTTP` from its settings."""
        allow_http = connections.settings.COUNTERSIGN_WEBHOOK_ALLOW_HTTP
        return cls(connections.redis, connections.store, allow_http_webhooks=allow_http)

    def request(self, request: dict[str, Any] | ApprovalRequestV1 | None = None, **fields: Any) -> str:
        """Enqueue an approval request and return its request id (a ULID string).

        Give the request as a dict (schema v1, DESIGN.md) or as keyword arguments. Raises
        `InvalidRequest` (one line naming each bad field), `IdempotencyConflict`, or
        `RouterUnavailable` when Redis or the database is unreachable (then nothing or the same
        request was accepted: calling again with the same key is safe), `SchemaOutOfDate` when the
        database was never migrated (`countersign db upgrade`).
        """
        if not isinstance(request, ApprovalRequestV1):
            request = parse(ApprovalRequestV1, {**(request or {}), **fields}, self._checks)
        try:
            request_id, new = claim_or_find(
                self._redis, request.requester, request.key, request.action, request.payload_sha256
            )
            message = IntakeMessage(request_id=request_id, request=request).model_dump(mode="json")
            self._store.accept(request_id, message)
            enqueue_intake(self._redis, request_id, request.action, message, new=new)
        except RedisError as exc:
            raise RouterUnavailable(
                f"Redis is unreachable ({type(exc).__name__}); retry with the same key"
            ) from exc
        except SQLAlchemyError as exc:
            raise waiting.database_error(self._store, exc, "retry with the same key") from exc
        return request_id

    def wait(self, request_id: str, *, timeout: float) -> Decision:
        """Block until `request_id` is decided, at most `timeout` seconds, and return its decision.

        The `Decision` is the one a resume job gets: `outcome` `approved` (`payload` is what may run,
        with its `grant`; `edits` lists a reviewer's changes, `edited` says so), `rejected`
        (`reason`), or `expired` (`timeout_result`; `may_run` when the policy's `on_timeout:
        allow` let it proceed). Run an approval through `execute_approved(decision, fn)`, as a
        resume job would: once, only with a valid grant. A request not taken by intake yet is
        waited for too.

        The database is read once; while undecided, the wait blocks on the request's bell (a Redis
        list the decision path rings after its commit: `countersign.bell`) and reads again when it
        rings: no polling. A dropped Redis connection or a Redis restart is waited out until the
        deadline, then the database is read again.

        Raises `WaitTimeout` (a `TimeoutError`, as `concurrent.futures.Future.result(timeout)`
        does; not None, which a caller could take for a decision) when it is still undecided at the
        deadline: nothing changed, the request stays pending, and the agent may wait again or be
        resumed later. Raises `RequestDeadLettered` when intake refused it (`reason`),
        `UnknownRequest` for an id the router never saw, and `RouterUnavailable` when the database
        cannot be read. The timeout is required: only the agent knows how long its process may
        stay up.
        """
        wait = waiting.steps(request_id, timeout, waiting.longest_block(self._redis))
        return waiting.run(wait, self._redis, self.read_decision)

    def request_and_wait(
        self, request: dict[str, Any] | ApprovalRequestV1 | None = None, *, timeout: float, **fields: Any
    ) -> Decision:
        """`request(...)`, then `wait(request_id, timeout=timeout)`: the decision. Raises what both
        raise; a `WaitTimeout` carries the `request_id` to wait on again."""
        return self.wait(self.request(request, **fields), timeout=timeout)

    def read_decision(self, request_id: str) -> Decision | str:
        """One read of `request_id` (`waiting.read`): its decision, or the id of the undecided
        request to wait on."""
        return waiting.read(self._store, self.get, request_id)

    def get(self, request_id: str) -> RequestState:
        """The current state of `request_id`. Raises `UnknownRequest` (a `LookupError`) if the router
        never saw it (or `request_id` is not a request id's form: `is_request_id`),
        `RouterUnavailable` when the database cannot be read, `SchemaOutOfDate` when the
        database was never migrated (`countersign db upgrade`)."""
        if not is_request_id(request_id):
            raise UnknownRequest(request_id)
        try:
            return self._state(request_id)
        except SQLAlchemyError as exc:
            raise waiting.database_error(self._store, exc, "read it again") from exc

    def _state(self, request_id: str) -> RequestState:
        store = self._store
        row = store.get(request_id)
        audit = [
            {"at": iso(e.at), "event": e.event, "actor": e.actor, "detail": e.detail}
            for e in store.audit_trail(request_id)
        ]
        if row is not None:
            event = store.outbox_event(request_id)
            return RequestState(
                request_id=row.id,
                status=row.status,
                request=_request_view(row),
                card={"channel": row.channel, "ts": row.card_ts} if row.card_ts else None,
                decision=event.body if event else None,
                audit=audit,
                resume=_resume_view(row, event) if event else None,
            )
        original = next(
            (e.detail["original"] for e in store.audit_trail(request_id) if e.event == "duplicate_of"), None
        )
        if original is not None:
            return self._state(original)
        letter = store.get_dead_letter(request_id)
        if letter is not None:
            sent = _sent_view(letter.received, letter.at)
            return RequestState(request_id, "dead_letter", reason=letter.reason, request=sent, audit=audit)
        accepted = store.intake_message(request_id)
        if accepted is not None:
            return RequestState(
                request_id, "queued", request=_sent_view(accepted.message, accepted.accepted_at)
            )
        if store.get(request_id) is not None:  # intake took it between the first read and this one
            return self._state(request_id)
        if self._intake.fetch_job(intake_job_id(request_id)):
            return RequestState(request_id, "queued")
        raise UnknownRequest(request_id)


STORED_FIELDS = (
    "action",
    "payload",
    "payload_sha256",
    "summary",
    "reason",
    "context",
    "requester",
    "on_behalf_of",
    "run_id",
    "step",
    "idempotency_key",
    "confidence",
    "channel",
    "approvers",
    "policy_version",
)
REQUEST_FIELDS = (*STORED_FIELDS, "resume", "created_at")
"""The keys of `RequestState.request`, in this order, whatever the request's status."""
SET_BY_INTAKE = ("payload_sha256", "channel", "approvers", "policy_version")


def _sent_view(message: Any, at: datetime) -> dict[str, Any]:
    """`RequestState.request` of a request known from its intake message (queued, or kept whole as a
    dead letter, so possibly malformed): its `request` object's `REQUEST_FIELDS`, null where it has
    none and for those intake sets (`SET_BY_INTAKE`), and `at` (when it was accepted or
    dead-lettered) as `created_at`."""
    sent = message.get("request") if isinstance(message, dict) else None
    sent = sent if isinstance(sent, dict) else {}
    view = {name: None if name in SET_BY_INTAKE else sent.get(name) for name in REQUEST_FIELDS}
    return view | {"created_at": iso(at)}


def _request_view(row: Request) -> dict[str, Any]:
    view = {name: getattr(row, name) for name in STORED_FIELDS}
    if row.resume_webhook:
        view["resume"] = {"webhook": row.resume_webhook}
    elif row.resume_queue:
        view["resume"] = {"queue": row.resume_queue, "func": row.resume_func}
    else:
        view["resume"] = None  # none named: the agent waits in process
    view["created_at"] = iso(row.created_at)
    return view


def _resume_view(row: Request, event: OutboxEvent) -> dict[str, Any]:
    problem = standing_problem(row, event.problem)
    if event.webhook:
        return {
            "webhook": event.webhook,
            "webhook_id": webhook_id(event.request_id),
            "attempts": event.attempts,
            "next_attempt_at": iso(event.next_attempt_at),
            "delivered_at": iso(event.published_at),
            "problem": problem,
        }
    return {
        "job_id": event.job_id,
        "queue": event.queue,
        "func": event.func,
        "confirmed_at": iso(event.published_at),  # the sweep's mark, not the enqueue: see RequestState
        "problem": problem,
    }
