"""The ASGI application of `countersign web`: the `/v1` API (FastAPI) and, mounted under it for
every other path, the Slack app (`bot/web.py`, WSGI) through a2wsgi's WSGI-in-ASGI bridge, whose
threads run Bolt as gunicorn's gthread workers did.

Every 4xx and 5xx of the API is JSON with one line, `{"error": "..."}`; a `/v1` body over
`MAX_BODY_BYTES` gets 413 before anything reads it. The OpenAPI document, at `/v1/openapi.json`, is
FastAPI's, from the same pydantic models the SDK validates with (`ApprovalRequestV1`, `Decision`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from a2wsgi import WSGIMiddleware
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.asyncio import Redis as AsyncRedis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..agent import ApprovalClient
from ..connections import REDIS_CONNECT_TIMEOUT_SECONDS
from ..decision import Decision
from ..exceptions import IdempotencyConflict, InvalidRequest, RouterUnavailable
from ..router.runtime import Runtime, current
from ..schema import ApprovalRequestV1, errors_line
from ..store.tokens import Tokens
from ..untrusted import escaped
from .models import OutcomeReport
from .routes import MAX_WAIT_SECONDS, router

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
MAX_BODY_BYTES = 256 * 1024
"""The largest `/v1` body: a request's payload and context (64 KiB each as canonical JSON), its
reason and summary, with room for JSON's escapes."""
REQUEST_PARTS = frozenset({"body", "query", "path", "header"})
"""The first part of a FastAPI validation error's location, which names where in the HTTP request
the field is, not the field: its 422 text leaves it out (`schema.errors_line`)."""
SLACK_THREADS = 8
"""Threads that run the Slack app (a2wsgi's pool), as many as a gthread worker had."""


def create_api(runtime: Runtime | None = None, slack: WSGIApp | None = None) -> FastAPI:
    """The ASGI app: `/v1` on `runtime` (default: the process's), every other path to the WSGI app
    `slack` (`bot.web.create_wsgi`) when given."""
    runtime = runtime or current()
    bell = AsyncRedis.from_url(
        runtime.settings.REDIS_URL,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=MAX_WAIT_SECONDS + 10,  # longer than the longest block on a bell
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await bell.aclose()

    app = FastAPI(
        title="countersign",
        version="1",
        summary="Ask a human in Slack before an agent's irreversible step; resume exactly what was approved.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.bell = bell
    app.state.tokens = Tokens(runtime.store.engine)
    app.state.client = ApprovalClient(
        runtime.redis, runtime.store, allow_http_webhooks=runtime.settings.COUNTERSIGN_WEBHOOK_ALLOW_HTTP
    )
    app.include_router(router)
    _answer_errors_in_one_line(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    if slack is not None:
        app.mount("/", WSGIMiddleware(slack, workers=SLACK_THREADS))  # type: ignore[arg-type]
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    return app


def _answer_errors_in_one_line(app: FastAPI) -> None:
    """Every error the API answers is `{"error": <one line>}`, the line `untrusted.escaped` (it may
    quote what an agent sent)."""

    def problem(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": escaped(message)}, status, headers)

    async def http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return problem(exc.status_code, str(exc.detail), exc.headers)

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)  # a body not labelled JSON is refused before
        return problem(422, errors_line(exc.errors(), "body", outer=REQUEST_PARTS))

    async def refused(_request: Request, exc: Exception) -> JSONResponse:
        status = {InvalidRequest: 422, IdempotencyConflict: 409, RouterUnavailable: 503}
        return problem(next(s for kind, s in status.items() if isinstance(exc, kind)), str(exc))

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    for kind in (InvalidRequest, IdempotencyConflict, RouterUnavailable):
        app.add_exception_handler(kind, refused)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the schemas of the bodies the routes read themselves (`ApprovalRequestV1`,
    which `POST /v1/requests` validates with the webhook check's settings, `OutcomeReport`, and the
    `Decision` that `POST /v1/grants/verify` takes) among its components."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        document = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        components = document.setdefault("components", {}).setdefault("schemas", {})
        for model in (ApprovalRequestV1, OutcomeReport, Decision):
            schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
            components.setdefault(model.__name__, schema)
        app.openapi_schema = document
    return app.openapi_schema


class BodyLimit:
    """ASGI middleware: a `/v1` request's body is read whole here, at most `limit` bytes, and
    replayed to the app; a larger one (as `Content-Length` declares it, or as it arrives) is
    answered 413 with `{"error": ...}`. Other paths pass untouched (the Slack app has its own limit)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        body = b"" if declared.isdigit() and int(declared) <= self.limit else None
        more = body is not None
        while more and body is not None:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            body = body if len(body) <= self.limit else None
        if body is None:
            refusal = JSONResponse({"error": f"the body is over {self.limit} bytes"}, 413)
            await refusal(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # the disconnect, when it comes
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
