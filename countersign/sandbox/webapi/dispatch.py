"""Answering one Web API call: record it, check the token, apply an injected fault, run the method."""

from __future__ import annotations

import time

from countersign.sandbox import buckets
from countersign.sandbox.modals import ViewError
from countersign.sandbox.types import Fault
from countersign.sandbox.webapi.answers import ApiError, ApiResponse, ratelimited
from countersign.sandbox.webapi.arguments import Params, parse_params
from countersign.sandbox.webapi.methods import METHODS
from countersign.sandbox.workspace import Workspace


def _token(authorization: str, params: Params) -> str | None:
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return params.get("token") or None


def _fault_response(fault: Fault) -> ApiResponse | None:
    """The answer an injected fault gives instead of running the method; None for a pure delay."""
    status, error, retry_after = fault["status"], fault["error"], fault["retry_after"]
    if status == 429:
        return ApiError(
            error or "ratelimited",
            429,
            headers={"Retry-After": str(1 if retry_after is None else retry_after)},
        ).response
    if status == 200 and error is None:
        return None
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return ApiError(error or "internal_error", status, headers=headers).response


def _over_tier(ws: Workspace, method: str) -> int:
    """Seconds to wait when ``method`` is over its calls a minute (``ws.method_limits``), else 0."""
    per_minute = (ws.method_limits or {}).get(method)
    if not per_minute:
        return 0
    return buckets.take(ws.state.method_buckets, method, per_minute / 60, float(per_minute), ws.clock())


def _answer(ws: Workspace, method: str, params: Params, authorization: str) -> ApiResponse:
    handler = METHODS.get(method)
    if handler is None:
        return ApiResponse({"ok": False, "error": "unknown_method"}, status=404)
    token = _token(authorization, params)
    if token is None:
        raise ApiError("not_authed")
    if not str(token).startswith("xoxb-") or ws.bot_token not in (None, token):
        raise ApiError("invalid_auth")
    with ws.state.lock:
        fault = ws.state.take_fault(method)
        wait = _over_tier(ws, method)
    if wait:
        return ratelimited(wait).response
    if fault is not None:
        if fault["delay_seconds"]:
            time.sleep(fault["delay_seconds"])
        response = _fault_response(fault)
        if response is not None:
            return response
    with ws.state.lock:
        try:
            return handler(ws, params)
        except ViewError as error:
            if error.messages:
                raise ApiError(error.error, response_metadata={"messages": error.messages}) from None
            raise ApiError(error.error) from None


def handle(
    ws: Workspace, method: str, *, content_type: str, body: bytes, query: str, authorization: str
) -> ApiResponse:
    """Answer one Web API call to ``/api/<method>`` and record it (``Sandbox.calls``).

    The token comes from ``Authorization: Bearer <token>`` or a ``token`` argument: missing → ``not_authed``,
    not a bot token (``xoxb-``), or another than ``Workspace.bot_token`` when that is set → ``invalid_auth``
    (https://docs.slack.dev/authentication/tokens). An
    unknown method is HTTP 404 ``unknown_method``. A fault queued by ``Sandbox.inject`` is applied after
    the token check, before the method runs; then a method over its tier's calls a minute
    (``Workspace.method_limits``) answers 429 ``ratelimited`` with ``Retry-After``.
    """
    response: ApiResponse | None
    try:
        params = parse_params(content_type, body, query)
    except ApiError as error:
        params, response = {}, error.response
    else:
        response = None
    with ws.state.lock:
        recorded = {k: v for k, v in params.items() if k != "token"}
        call = ws.state.record_call(method, recorded, ws.clock())
    if response is None:
        try:
            response = _answer(ws, method, params, authorization)
        except ApiError as error:
            response = error.response
    with ws.state.lock:
        call["status"] = response.status
        call["error"] = None if response.body.get("ok") else response.body.get("error")
    return response
