"""Who calls the API: a per-agent token (`Authorization: Bearer cst_…`, `countersign token create`),
and what it may do. A token creates requests only as its own requester and for its action classes,
and reads and reports only on its own requester's requests; any other request is answered as if it
did not exist (404), so a token learns nothing of others' request ids."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..router.runtime import Runtime
from ..schema import ApprovalRequestV1, QueueResume
from ..store.models import ApiToken
from ..store.tokens import Tokens

_BEARER = HTTPBearer(auto_error=False, description="A token from `countersign token create`.")
UNAUTHORISED = {"WWW-Authenticate": "Bearer"}


def runtime(request: Request) -> Runtime:
    """The process's runtime (database, Redis, settings), set by `create_api`."""
    found: Runtime = request.app.state.runtime
    return found


def token(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
) -> ApiToken:
    """The live token the request carries. Raises 401 when there is none, or it is unknown or revoked."""
    if credentials is None:
        raise HTTPException(401, "send a token: Authorization: Bearer <token>", UNAUTHORISED)
    tokens: Tokens = request.app.state.tokens
    found = tokens.token_for(credentials.credentials)
    if found is None:
        raise HTTPException(401, "the token is unknown or revoked", UNAUTHORISED)
    return found


Token = Annotated[ApiToken, Depends(token)]


def may_create(holder: ApiToken, request: ApprovalRequestV1) -> None:
    """Raise 403 unless `holder` may send `request`: its own requester, one of its action classes,
    and, for a resume by RQ, one of its resume queues (`ApiToken.resume_queues`: None for a token
    from before migration 0015, which may name any queue but countersign's own, which the schema
    refuses for every request). The queue is where the agent's own worker runs `func(decision)`: a
    token that could name another agent's queue could make that agent's worker run its decision
    (DESIGN.md, "HTTP API")."""
    if request.requester != holder.requester:
        raise HTTPException(
            403, f"this token acts as requester {holder.requester!r}, not {request.requester!r}"
        )
    if request.action not in holder.actions:
        raise HTTPException(
            403,
            f"this token may not request action class {request.action!r} "
            f"(it may: {', '.join(holder.actions)})",
        )
    queues = holder.resume_queues
    if isinstance(request.resume, QueueResume) and queues is not None and request.resume.queue not in queues:
        allowed = f"it may: {', '.join(queues)}" if queues else "it may resume by webhook or not at all"
        raise HTTPException(
            403,
            f"this token may not name resume queue {request.resume.queue!r} ({allowed}; "
            "`countersign token create --resume-queue QUEUE` makes one that may)",
        )


def requester_of(shown: dict[str, Any] | None) -> str | None:
    """The requester of a request as `RequestState.request` shows it (one shape whatever its status),
    or None (a request known from its RQ job alone, or a message that named none)."""
    requester = (shown or {}).get("requester")
    return str(requester) if requester is not None else None


def must_own(holder: ApiToken, request_id: str, requester: str | None) -> None:
    """Raise 404 unless the request `request_id` (whose requester is `requester`) is `holder`'s."""
    if requester != holder.requester:
        raise HTTPException(404, f"no approval request {request_id!r} for this token")
