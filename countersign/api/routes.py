"""The `/v1` endpoints. Each reads or writes through the same domain functions as the Python SDK
(`ApprovalClient.request` and `.get`, `claim_execution`, `report_outcome`, `verify_grant`), so the
HTTP API keeps the SDK's idempotency rules, audit trail and checks: an HTTP agent claims the single
execution of an approval (`POST /v1/requests/{id}/execution`) as the RQ agent worker's
`execute_approved` does, by the same store function, with the same audit events and refusals.

The long poll (`GET /v1/requests/{id}/decision?wait=N`) reads the database, then, if undecided,
blocks on the request's decision bell (`countersign.bell`, redis.asyncio: no worker thread is held
while it waits) for up to `wait` seconds, at most `MAX_WAIT_SECONDS` (a longer `wait` is refused, 422,
rather than silently shortened), and reads the database again: no database polling loop. It is
`ApprovalClient.wait`'s wait (`agent/waiting.py`), so a Redis restart meanwhile is waited out and the
database read again when Redis answers (a ring lost with Redis costs nothing).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from ..agent import ApprovalClient, waiting
from ..agent.client import RequestState
from ..agent.execution import claim_execution, report_outcome, stored_refusal
from ..decision import Decision
from ..exceptions import ExecutionRefused, RequestDeadLettered, UnknownRequest
from ..grant import verify_grant
from ..router.runtime import Runtime
from ..schema import ALLOW_HTTP, ApprovalRequestV1, iso, loads, one_line, parse
from ..store.models import ApiToken, Outcome
from .auth import Token, may_create, must_own, requester_of, runtime
from .models import Accepted, Claimed, OutcomeReport, Problem, Recorded, Verification

MAX_WAIT_SECONDS = 60
"""The longest `wait` of one long poll, in seconds; a longer one is refused (422 naming it), as a
negative one is: an agent that asked for more would otherwise take a 204 for "no decision in my wait"."""
DEADLINE_GRACE_SECONDS = 1.0
"""How long past `wait` a long poll may take for its last database read before it answers 204."""
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem} for status in (401, 403, 404, 409, 413, 422, 503)
}


def _body(schema: str, description: str) -> dict[str, Any]:
    """The OpenAPI `requestBody` of a route that reads its body itself (`_json_body`), not through
    FastAPI (whose own reading would answer 400 for JSON it cannot read, before the token is
    checked): a JSON object of the component `schema`."""
    content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
    return {"requestBody": {"required": True, "description": description, "content": content}}


REQUEST_BODY = _body("ApprovalRequestV1", "the approval request (schema v1)")

router = APIRouter(prefix="/v1", responses=ERRORS)


def _json_body(root: str, what: str) -> Callable[..., Awaitable[dict[str, Any]]]:
    """A dependency of a POST route: its body as a JSON object, read strictly (`_json_object`: no key
    written twice, whichever route). The body must be labelled `Content-Type: application/json` (a
    `charset` parameter aside): `curl -d` alone labels it a form, and a body read as JSON whatever
    its label would be read by us as one thing and by a proxy or a log as another. Raises
    HTTPException 422 saying what was sent, naming `root` or `what` (`_json_object`); checked after
    the token (401 first)."""

    async def read(request: Request, _holder: Token) -> dict[str, Any]:
        sent = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if sent != "application/json":
            raise HTTPException(
                422, f"the body is not labelled JSON (Content-Type: {sent or 'none'}): send application/json"
            )
        return _json_object(await request.body(), root, what)

    return read


def _client(request: Request) -> ApprovalClient:
    client: ApprovalClient = request.app.state.client
    return client


@router.post("/requests", status_code=202, response_model=Accepted, openapi_extra=REQUEST_BODY)
async def create_request(
    data: Annotated[dict[str, Any], Depends(_json_body("request", "the approval request"))],
    request: Request,
    holder: Token,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> JSONResponse:
    """Accept an approval request (schema v1) for intake. The idempotency key is the
    `Idempotency-Key` header, else the body's `idempotency_key`, else `requester:run_id:step`. The
    same key with the same payload answers what the first call answered (202, the same
    `request_id`), as Stripe's idempotent replays do; with another action class or payload, 409."""
    if idempotency_key is not None and data.setdefault("idempotency_key", idempotency_key) != idempotency_key:
        raise HTTPException(422, "the Idempotency-Key header and the body's idempotency_key differ")
    request_id = await run_in_threadpool(_create, request, holder, data)
    return JSONResponse(
        Accepted(request_id=request_id).model_dump(), 202, {"Location": f"/v1/requests/{request_id}"}
    )


def _json_object(body: bytes, root: str, what: str) -> dict[str, Any]:
    """The body as a JSON object, read by `schema.loads` (a key written twice is refused, so no two
    readers of it can disagree on a value). Raises HTTPException 422 naming `root` (the object's name
    in errors) or `what` (what the body should be)."""
    try:
        data = loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HTTPException(422, f"the body is not JSON (send {what} as a JSON object)") from None
    except ValueError as unreadable:  # a key twice, an integer too long, nesting too deep
        raise HTTPException(422, f"{root}: {unreadable}") from None
    if not isinstance(data, dict):
        raise HTTPException(422, f"{root}: should be a JSON object")
    return data


def _create(request: Request, holder: ApiToken, data: dict[str, Any]) -> str:
    rt = runtime(request)
    checked = parse(ApprovalRequestV1, data, {ALLOW_HTTP: rt.settings.COUNTERSIGN_WEBHOOK_ALLOW_HTTP})
    may_create(holder, checked)
    if rt.settings.COUNTERSIGN_POLICY is not None:  # refused now rather than dead-lettered at intake
        rt.policy.admit(checked.action, checked.payload)
    return _client(request).request(checked)


def _owned(request: Request, holder: ApiToken, request_id: str) -> RequestState:
    """The state of `holder`'s request `request_id`; 404 when there is none."""
    try:
        state = _client(request).get(request_id)
    except UnknownRequest:
        raise HTTPException(404, f"no approval request {request_id!r} for this token") from None
    must_own(holder, request_id, requester_of(state.request))
    return state


def _must_own(request: Request, holder: ApiToken, request_id: str) -> None:
    """Raise 404 unless request `request_id` is `holder`'s, reading its stored `requester` alone (one
    statement: a claim, an outcome and a grant's check need no more); a request with no row (not
    stored yet, dead-lettered, a duplicate's id) as `_owned` finds it, so each answer is `_owned`'s.
    Raises `RouterUnavailable` (503) when the database cannot be read, as `ApprovalClient.get`."""
    store = runtime(request).store
    try:
        requester = store.requester_of(request_id)
    except SQLAlchemyError as exc:
        raise waiting.database_error(store, exc, "try again") from exc
    if requester is None:
        _owned(request, holder, request_id)
    else:
        must_own(holder, request_id, requester)


@router.get("/requests/{request_id}", response_model=RequestState)
def get_request(request_id: str, request: Request, holder: Token) -> dict[str, Any]:
    """The request, its status, card, decision (its grant's signature left out) and audit trail,
    as `countersign show` prints them."""
    shown = _owned(request, holder, request_id).as_dict()
    grant = (shown["decision"] or {}).get("grant")
    if grant:
        grant["signature"] = f"hidden (GET /v1/requests/{request_id}/decision gives it)"
    return shown


@router.get(
    "/requests/{request_id}/decision",
    response_model=Decision,
    responses={204: {"description": "Not decided within `wait` seconds: ask again."}},
)
async def get_decision(
    request_id: str,
    request: Request,
    holder: Token,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT_SECONDS,
            allow_inf_nan=False,
            description=f"seconds to wait for the decision (at most {MAX_WAIT_SECONDS})",
        ),
    ] = 0,
) -> Response:
    """The decision (200), with its grant when the payload may run, or 204 when there is none after
    waiting up to `wait` seconds. 409 when intake refused the request (it will never be decided).
    The wait is `ApprovalClient.wait`'s (`agent/waiting.py`) on an asyncio Redis client: a Redis
    restart during it is waited out, and the database read again once Redis answers; a Redis that
    hangs costs no more than `wait` + `DEADLINE_GRACE_SECONDS`."""
    state = await run_in_threadpool(_owned, request, holder, request_id)
    if state.decision is None and state.status != "dead_letter" and wait > 0:
        bell = request.app.state.bell
        steps = waiting.steps(request_id, wait, waiting.longest_block(bell))
        with suppress(TimeoutError, RequestDeadLettered):  # WaitTimeout is a TimeoutError
            # a hung Redis would hold one step until the client's socket timeout: bound the whole wait
            await asyncio.wait_for(
                waiting.run_async(steps, bell, _client(request).read_decision),
                wait + DEADLINE_GRACE_SECONDS,
            )
            state = await run_in_threadpool(_owned, request, holder, request_id)
    if state.status == "dead_letter":
        raise HTTPException(409, f"intake refused the request; it will never be decided: {state.reason}")
    if state.decision is None:
        return Response(status_code=204)
    return JSONResponse(state.decision)


@router.post(
    "/requests/{request_id}/outcome",
    response_model=Recorded,
    openapi_extra=_body("OutcomeReport", "how the approved action went"),
)
def post_outcome(
    request_id: str,
    data: Annotated[dict[str, Any], Depends(_json_body("outcome", "the outcome"))],
    request: Request,
    holder: Token,
) -> Recorded:
    """Record how the approved action went, once (audited, shown on the card), as
    `report_outcome` does: after a claim (`POST …/execution`), or for an action run without one.
    409 when it was already recorded or the request is not approved."""
    try:
        report = OutcomeReport.model_validate(data)
    except ValidationError as exc:
        raise HTTPException(422, one_line(exc, root="outcome")) from None
    _must_own(request, holder, request_id)
    if not report_outcome(request_id, report.ok, report.detail, runtime(request)):
        raise HTTPException(409, "the outcome is already recorded, or the request is not approved")
    return Recorded(recorded=True)


@router.post(
    "/requests/{request_id}/execution",
    response_model=Claimed,
    openapi_extra=_body("Decision", "the decision as GET …/decision gives it"),
)
def post_execution(
    request_id: str,
    decision: Annotated[dict[str, Any], Depends(_json_body("decision", "the decision"))],
    request: Request,
    holder: Token,
) -> Claimed:
    """Claim the single execution of the approved payload before running it, as the RQ agent worker
    does (`claim_execution`): the grant checked (signed by this router for exactly this payload, not
    expired by the database clock), then one conditional UPDATE, so of two claims exactly one
    succeeds (audited `execution_started`, the card says it started). 409 with the reason otherwise
    (audited `execution_refused`, `why` as `ExecutionRefused`'s: e.g. `not_approved` for a request
    still pending, `already_executed`, `already_failed`, `outcome_unknown`, `grant_expired`,
    `payload_mismatch`, `bad_signature`), then what to do: run nothing. 422 for a body that is no
    decision, or another request's."""
    _must_be_a_decision(decision)
    if decision["request_id"] != request_id:
        raise HTTPException(422, f"decision: request_id is {decision['request_id']!r}, not {request_id!r}")
    _must_own(request, holder, request_id)
    try:
        claim_execution(decision, runtime(request))
    except ExecutionRefused as refused:
        raise HTTPException(409, f"{refused}: {refused.consequence}") from None
    return Claimed(claimed=True, request_id=request_id)


@router.post(
    "/grants/verify",
    response_model=Verification,
    openapi_extra=_body("Decision", "a decision as GET …/decision gives it"),
)
async def verify(
    decision: Annotated[dict[str, Any], Depends(_json_body("decision", "the decision"))],
    request: Request,
    holder: Token,
) -> Verification:
    """Whether the decision's grant lets its payload run now: signed by this router
    (`COUNTERSIGN_SECRET`), for exactly this payload (RFC 8785 hash), not expired (database clock).
    It does not claim the single execution: claim it (`POST /v1/requests/{id}/execution`) before
    running the action, and report the outcome once the action ran. The body is read
    strictly (422 for a key written twice): the payload hashed here must be the one the caller
    runs, whichever of two values its own JSON reader would keep. 422 too for a body that is no
    decision (`_must_be_a_decision`), and 404 for a decision of a request that is not the token's
    requester's, as every other route answers it: no `why` tells another requester's grant apart."""
    return await run_in_threadpool(_verify, request, holder, decision)


def _verify(request: Request, holder: ApiToken, decision: dict[str, Any]) -> Verification:
    _must_be_a_decision(decision)
    shown = str(decision["request_id"])
    _must_own(request, holder, shown)
    rt: Runtime = runtime(request)
    try:
        verify_grant(rt.settings.COUNTERSIGN_SECRET or "", decision)
    except ExecutionRefused as refused:
        return Verification(valid=False, request_id=shown, why=stored_refusal(rt, shown) or refused.why)
    expires_at = str(decision["grant"]["expires_at"])
    now = iso(request.app.state.tokens.clock())
    if now is None or expires_at <= now:
        return Verification(valid=False, request_id=shown, why="grant_expired", expires_at=expires_at)
    return Verification(valid=True, request_id=shown, expires_at=expires_at)


def _must_be_a_decision(decision: dict[str, Any]) -> None:
    """Raise HTTPException 422 for a body that is no decision at all: without a string `request_id`
    or an `outcome` of `Outcome`, naming each. A decision's own faults (no grant, a forged one, an
    edited payload) are answered 200 with `why`, as `verify_grant` finds them."""
    outcomes = [o.value for o in Outcome]
    problems = []
    if not isinstance(decision.get("request_id"), str):
        problems.append("request_id: " + ("should be a string" if "request_id" in decision else "missing"))
    if decision.get("outcome") not in outcomes:
        wrong = f"should be {', '.join(outcomes[:-1])} or {outcomes[-1]}"
        problems.append("outcome: " + (wrong if "outcome" in decision else "missing"))
    if problems:
        send = "send the decision as GET /v1/requests/{id}/decision gives it"
        raise HTTPException(422, f"decision: {'; '.join(problems)} ({send})")
