"""HTTP entry point: Bolt over WSGI (`POST /slack/events`) plus `GET /healthz`.

`countersign web` serves this under gunicorn with threaded workers; Bolt's built-in development
server is not for production, as its own docs say
(https://docs.slack.dev/tools/bolt-python/concepts/adapters).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from slack_bolt.adapter.wsgi import SlackRequestHandler
from sqlalchemy import text

from ..router.runtime import Runtime, current
from . import guard
from .app import create_app

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def create_wsgi(runtime: Runtime | None = None, ours: guard.Installation | None = None) -> WSGIApp:
    """The WSGI application: `/slack/events` to Bolt after `guard.refuse` (4xx for oversized,
    unsigned, stale or malformed requests, and for payloads meant for another installation than
    `ours`, asked of Slack when not given), `/healthz` to a database and Redis check."""
    runtime = runtime or current()
    bolt = SlackRequestHandler(create_app(runtime), path="/slack/events")
    secret = runtime.settings.SLACK_SIGNING_SECRET or ""
    ours = ours or guard.installation(runtime.slack)  # the one installation this bot serves

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz" and environ.get("REQUEST_METHOD") == "GET":
            status, body = healthz(runtime)
            return _json(start_response, status, body)
        if environ.get("PATH_INFO") == "/slack/events" and environ.get("REQUEST_METHOD") == "POST":
            refusal = guard.refuse(environ, secret, ours)
            if refusal is not None:
                return _json(start_response, refusal, {"error": refusal.split(" ", 1)[1].lower()})
        return bolt(environ, start_response)

    return application


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
