"""HTTP entry point: Bolt over WSGI (`POST /slack/events`) plus `GET /healthz`.

`countersign web` serves this under gunicorn with threaded workers; Bolt's built-in development
server is not for production, as its own docs say
(https://docs.slack.dev/tools/bolt-python/concepts/adapters).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from slack_bolt.adapter.wsgi import SlackRequestHandler
from sqlalchemy import text

from ..router.runtime import Runtime, current
from .app import create_app

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
log = logging.getLogger(__name__)
# Slack's interactivity payloads are a few kB; a view submission with a full modal stays far below this.
MAX_BODY_BYTES = 1024 * 1024


def create_wsgi(runtime: Runtime | None = None) -> WSGIApp:
    """The WSGI application: `/slack/events` to Bolt, `/healthz` to a database and Redis check.

    Before Bolt sees a request: a body over `MAX_BODY_BYTES` gets 413, and a missing or
    non-numeric `X-Slack-Request-Timestamp` gets 401 like a bad signature (Bolt would answer 500).
    A request Bolt cannot parse even though it is signed gets 400, never a 500.
    """
    runtime = runtime or current()
    bolt = SlackRequestHandler(create_app(runtime), path="/slack/events")

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz" and environ.get("REQUEST_METHOD") == "GET":
            status, body = healthz(runtime)
            return _json(start_response, status, body)
        if environ.get("PATH_INFO") == "/slack/events":
            refusal = _refuse_early(environ)
            if refusal is not None:
                return _json(start_response, refusal, {"error": refusal.split(" ", 1)[1].lower()})
            try:
                return bolt(environ, start_response)
            except Exception:
                log.exception("could not handle a signed Slack request")
                return _json(start_response, "400 Bad Request", {"error": "malformed request"})
        return bolt(environ, start_response)

    return application


def _refuse_early(environ: dict[str, Any]) -> str | None:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return "400 Bad Request"
    if length > MAX_BODY_BYTES:
        return "413 Request Entity Too Large"
    if not str(environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", "")).isdigit():
        return "401 Unauthorized"
    return None


def _json(start_response: Callable[..., Any], status: str, body: dict[str, Any]) -> list[bytes]:
    start_response(status, [("Content-Type", "application/json")])
    return [json.dumps(body).encode()]


def healthz(runtime: Runtime) -> tuple[str, dict[str, Any]]:
    """`("200 OK", {"ok": true, ...})` when the database and Redis answer, else `503` naming what failed."""
    checks = {"database": _check(lambda: _select_one(runtime)), "redis": _check(runtime.redis.ping)}
    ok = all(value == "ok" for value in checks.values())
    return ("200 OK" if ok else "503 Service Unavailable"), {"ok": ok, **checks}


def _select_one(runtime: Runtime) -> None:
    with runtime.store.engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def _check(probe: Callable[[], Any]) -> str:
    try:
        probe()
    except Exception as exc:
        return f"failed: {type(exc).__name__}"
    return "ok"
