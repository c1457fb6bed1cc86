"""HTTP entry point: Bolt over WSGI (`POST /slack/events`) plus `GET /healthz`.

`countersign web` serves this under gunicorn with threaded workers; Bolt's built-in development
server is not for production, as its own docs say
(https://docs.slack.dev/tools/bolt-python/concepts/adapters).

Transport is this module's: it reads each body once (at most `MAX_BODY_BYTES`), has `guard.check`
verify and parse it once, and hands Bolt that parsed payload, so the checks and Bolt cannot read two
different payloads from one body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.adapter.wsgi.http_request import WsgiHttpRequest
from sqlalchemy import text

from ..router.runtime import Runtime, current
from . import guard
from .app import create_app

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
MAX_BODY_BYTES = 1024 * 1024  # interactivity payloads are a few kB; a full modal stays far below this
EVENTS_PATH = "/slack/events"


def create_wsgi(runtime: Runtime | None = None, ours: guard.Installation | None = None) -> WSGIApp:
    """The WSGI application: `/slack/events` to Bolt through `GuardedHandler` (4xx for oversized,
    unsigned, stale or malformed requests, and for payloads meant for another installation than
    `ours`, asked of Slack when not given), `/healthz` to a database and Redis check."""
    runtime = runtime or current()
    secret = runtime.settings.SLACK_SIGNING_SECRET or ""
    ours = ours or guard.installation(runtime.slack)  # the one installation this bot serves
    bolt = GuardedHandler(create_app(runtime), secret, ours)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz" and environ.get("REQUEST_METHOD") == "GET":
            status, body = healthz(runtime)
            start_response(status, [("Content-Type", "application/json")])
            return [json.dumps(body).encode()]
        return bolt(environ, start_response)

    return application


class GuardedHandler(SlackRequestHandler):
    """Bolt's WSGI adapter, except that each `POST /slack/events` body is read here, checked by
    `guard.check` with `secret` (the signing secret) against `ours`, and either refused (JSON
    `{"error": why}` with the refusal's status) or its payload dispatched to the Bolt `app`."""

    def __init__(self, app: App, secret: str, ours: guard.Installation) -> None:
        super().__init__(app, path=EVENTS_PATH)
        self.secret = secret
        self.ours = ours

    def dispatch(self, request: WsgiHttpRequest) -> BoltResponse:
        """Bolt's answer to the payload of `request`, or the refusal's."""
        raw = _read_body(request.environ)
        headers = {name: str(value) for name, value in request.get_headers().items()}
        checked = raw if isinstance(raw, guard.Refusal) else guard.check(raw, headers, self.secret, self.ours)
        if isinstance(checked, guard.Refusal):
            return BoltResponse(status=checked.status, body={"error": checked.why})
        return self.app.dispatch(_verified(checked, headers))


def _read_body(environ: dict[str, Any]) -> bytes | guard.Refusal:
    """The request's body, as many bytes as `Content-Length` says; 400 when that is not a number
    and 413 over `MAX_BODY_BYTES` (refused before anything is read)."""
    declared = str(environ.get("CONTENT_LENGTH") or "0")
    if not (declared.isascii() and declared.isdigit() and len(declared) <= 12):
        return guard.Refusal(400, "Content-Length is not a number of bytes")
    if int(declared) > MAX_BODY_BYTES:
        return guard.Refusal(413, f"the body is over {MAX_BODY_BYTES} bytes")
    return bytes(environ["wsgi.input"].read(int(declared))) if int(declared) else b""


def _verified(payload: dict[str, Any], headers: dict[str, str]) -> BoltRequest:
    """Bolt's request for `payload`, the very object `guard.check` read.

    Bolt's `mode` says how a body reached it: "http" is raw text that Bolt parses and verifies
    itself; "socket_mode" is a payload already parsed by a transport that authenticated it
    (`slack_bolt.request.BoltRequest`, whose request verification skips it). The second is what this
    adapter hands over. Only the headers Slack sends go with it, not Bolt's internal
    `x-slack-bolt-lazy-*` ones, which a client could set to steer Bolt's lazy listeners.
    """
    slack: dict[str, str | Sequence[str]] = {
        name: value for name, value in headers.items() if not name.startswith("x-slack-bolt-")
    }
    return BoltRequest(body=payload, headers=slack, mode="socket_mode")


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
