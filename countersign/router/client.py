"""The agent side: ask for approval and exit; look a request up later.

    client = ApprovalClient.from_env()
    request_id = client.request(action="issue_refund", payload={"amount": "120.00"}, ...)

`request()` answers before any worker has run. Idempotency is decided at once with an atomic Redis
`SET NX` of the idempotency key → `{request_id, payload_sha256}`; the database's unique constraint
on the key stays the final guard when Redis has forgotten it (DESIGN.md, "Idempotency at
request()"). Same key and payload → the same id and no second card; same key, other payload →
`IdempotencyConflict` and nothing changes, as Stripe's idempotency keys behave
(https://docs.stripe.com/api/idempotent_requests).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq import Retry
from rq.exceptions import DuplicateJobError
from ulid import ULID

from ..config import Settings, load_settings
from ..store import ExecutionRefused, Store
from .execution import approved_action, execute_approved, report_outcome
from .runtime import INTAKE_QUEUE, Runtime, json_queue
from .schema import ApprovalRequestV1, IntakeMessage, InvalidRequest, parse

IDEMPOTENCY_TTL_SECONDS = 7 * 24 * 3600
INTAKE_RETRY = Retry(max=5, interval=[1, 5, 30, 60, 300])
INTAKE_TIMEOUT_SECONDS = 60

__all__ = [
    "ApprovalClient",
    "ExecutionRefused",
    "IdempotencyConflict",
    "InvalidRequest",
    "RequestState",
    "RouterUnavailable",
    "approved_action",
    "execute_approved",
    "report_outcome",
]


class IdempotencyConflict(Exception):
    """The idempotency key was already used with a different payload; nothing was enqueued."""

    def __init__(self, key: str, request_id: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was already used with a different payload (request {request_id})"
        )
        self.key = key
        self.request_id = request_id


class RouterUnavailable(Exception):
    """Redis could not be reached; retry later with the same idempotency key (it is safe)."""


@dataclass(frozen=True)
class RequestState:
    """A request as the router knows it now.

    `status`: `queued` (accepted, intake not run yet) | `pending` | `approved` | `rejected` |
    `dead_letter` (intake refused it: see `reason`). `decision` is the resume decision once decided.
    """

    request_id: str
    status: str
    request: dict[str, Any] | None = None
    card: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    reason: str | None = None
    audit: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (what `countersign show` prints)."""
        return asdict(self)


def intake_job_id(request_id: str) -> str:
    """The RQ job id of a request's intake job."""
    return f"intake-{request_id}"


def _idempotency_redis_key(key: str) -> str:
    return "countersign:idempotency:" + hashlib.sha256(key.encode()).hexdigest()


def _claim(request_id: str, payload_sha256: str) -> str:
    return json.dumps({"request_id": request_id, "payload_sha256": payload_sha256})


def remember_key(redis: Redis, key: str, request_id: str, payload_sha256: str) -> None:
    """Point the idempotency key at `request_id` again (after Redis forgot it), for 7 days."""
    redis.set(_idempotency_redis_key(key), _claim(request_id, payload_sha256), ex=IDEMPOTENCY_TTL_SECONDS)


class ApprovalClient:
    """Enqueue approval requests and read their state. Thread-safe; cheap to keep for a process."""

    def __init__(self, redis: Redis, store: Store) -> None:
        self._redis = redis
        self._store = store
        self._queue = json_queue(INTAKE_QUEUE, redis)

    @classmethod
    def from_env(cls, settings: Settings | None = None) -> ApprovalClient:
        """A client on `REDIS_URL` and `DATABASE_URL` from the environment (or `settings`)."""
        runtime = Runtime(settings or load_settings())
        return cls(runtime.redis, runtime.store)

    def request(self, request: dict[str, Any] | ApprovalRequestV1 | None = None, **fields: Any) -> str:
        """Enqueue an approval request and return its request id (a ULID string).

        Give the request as a dict (schema v1, DESIGN.md) or as keyword arguments. Raises
        `InvalidRequest` (one line naming each bad field), `IdempotencyConflict`, or
        `RouterUnavailable` when Redis is unreachable (then nothing or the same request was
        enqueued: calling again with the same key is safe).
        """
        if not isinstance(request, ApprovalRequestV1):
            request = parse(ApprovalRequestV1, {**(request or {}), **fields})
        try:
            request_id = self._claim_key(request)
            message = IntakeMessage(request_id=request_id, request=request)
            self._enqueue_intake(message)
        except RedisError as exc:
            raise RouterUnavailable(
                f"Redis is unreachable ({type(exc).__name__}); retry with the same key"
            ) from exc
        return request_id

    def _claim_key(self, request: ApprovalRequestV1) -> str:
        redis_key = _idempotency_redis_key(request.key)
        claim = _claim(str(ULID()), request.payload_sha256)
        for _ in range(3):  # the key may expire between SET NX and GET
            if self._redis.set(redis_key, claim, nx=True, ex=IDEMPOTENCY_TTL_SECONDS):
                return json.loads(claim)["request_id"]
            held = self._redis.get(redis_key)
            if held is not None:
                earlier = json.loads(held)
                if earlier["payload_sha256"] != request.payload_sha256:
                    raise IdempotencyConflict(request.key, earlier["request_id"])
                return earlier["request_id"]
        raise RouterUnavailable("idempotency key kept expiring while being claimed")

    def _enqueue_intake(self, message: IntakeMessage) -> None:
        with contextlib.suppress(DuplicateJobError):  # the same request is already queued or running
            self._queue.enqueue(
                "countersign.router.intake.intake",
                message.model_dump(mode="json"),
                job_id=intake_job_id(message.request_id),
                unique=True,
                retry=INTAKE_RETRY,
                job_timeout=INTAKE_TIMEOUT_SECONDS,
                description=f"intake {message.request.action} {message.request_id}",
            )

    def get(self, request_id: str) -> RequestState:
        """The current state of `request_id`. Raises `LookupError` if the router never saw it."""
        store = self._store
        row = store.get(request_id)
        audit = [
            {"at": e.at.isoformat(), "event": e.event, "actor": e.actor, "detail": e.detail}
            for e in store.audit_trail(request_id)
        ]
        if row is not None:
            return RequestState(
                request_id=row.id,
                status=row.status,
                request=_request_view(row),
                card={"channel": row.channel, "ts": row.card_ts} if row.card_ts else None,
                decision=event.body if (event := store.outbox_event(request_id)) else None,
                audit=audit,
            )
        original = next(
            (e.detail["original"] for e in store.audit_trail(request_id) if e.event == "duplicate_of"), None
        )
        if original is not None:
            return self.get(original)
        letter = store.get_dead_letter(request_id)
        if letter is not None:
            return RequestState(
                request_id, "dead_letter", reason=letter.reason, request=letter.received, audit=audit
            )
        if self._queue.fetch_job(intake_job_id(request_id)) is not None:
            return RequestState(request_id, "queued")
        raise LookupError(f"no approval request {request_id!r}")


def _request_view(row: Any) -> dict[str, Any]:
    names = (
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
    view = {name: getattr(row, name) for name in names}
    view["resume"] = {"queue": row.resume_queue, "func": row.resume_func}
    view["created_at"] = row.created_at.isoformat()
    return view
