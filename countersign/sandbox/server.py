"""HTTP front of the sandbox: the Web API at ``/api/<method>``, the page at ``/`` and its JSON helpers.

Routes:

- ``GET|POST /api/<method>``: Slack Web API (``webapi.dispatch.handle``); point
  ``WebClient(base_url=server.url + "/api/")`` here.
- ``GET /``: the card viewer page (``page.html``).
- ``GET /_sandbox/state``: ``Sandbox.snapshot()``; ``GET /_sandbox/messages?channel=C``,
  ``GET /_sandbox/ephemerals?user=U`` and ``GET /_sandbox/views?user=U``: the ``Sandbox.messages`` /
  ``Sandbox.ephemerals`` / ``Sandbox.views`` lists.
- ``POST /_sandbox/click`` with JSON ``{channel, ts, action_id, user}``: ``Sandbox.click``, answered as
  ``{"status": <bot HTTP status>, "body": <bot body>, "elapsed_milliseconds": <int>}`` (status 0 when the
  bot is unreachable or no Request URL is set); 404 ``{"error"}`` for an unknown message or button.
- ``POST /_sandbox/submit`` with JSON ``{view_id, user, values: {block_id: text | null}}``:
  ``Sandbox.submit_view``, answered like a click; when Slack's client checks refuse the submission,
  ``{"status": 0, "body": "", "refused": {block_id: message}}``. 404 for a view not on the user's screen,
  400 for values naming blocks that are not inputs.
- ``POST /_sandbox/close`` with JSON ``{view_id, user}``: ``Sandbox.close_view``, answered as
  ``{"status", "body"}`` of the ``view_closed`` delivery (``null`` for both when none was sent).
- ``POST /_sandbox/command`` with JSON ``{user, channel, text}``: ``Sandbox.run_command`` (``/countersign
  text`` typed by ``user`` in ``channel``), answered like a click.
- ``POST /_sandbox/home_opened`` with JSON ``{user}``: ``Sandbox.open_home`` (the ``app_home_opened``
  event), and ``POST /_sandbox/click_home`` with JSON ``{user, block_id, action_id}``:
  ``Sandbox.click_home`` (a button on the user's Home tab); both answered like a click.
- ``POST /_sandbox/response/<key>``: the ``response_url`` of a click or a slash command
  (``webapi.response_urls.respond``).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from types import TracebackType
from typing import Any

from countersign.sandbox.identity import RESPONSE_URL_PATH
from countersign.sandbox.limits import METHOD_CALLS_PER_MINUTE
from countersign.sandbox.modals import SubmissionRefused
from countersign.sandbox.sandbox import Sandbox
from countersign.sandbox.webapi.answers import ApiError, ApiResponse
from countersign.sandbox.webapi.arguments import parse_params
from countersign.sandbox.webapi.dispatch import handle
from countersign.sandbox.webapi.response_urls import respond

#: How often (seconds) a served sandbox checks for ``shutdown()``; bounds how long shutdown takes.
SHUTDOWN_POLL_SECONDS = 0.05
#: How long (seconds) a served sandbox keeps an idle connection open for the client's next request.
KEEP_ALIVE_SECONDS = 60.0
Reply = tuple[int, str, bytes]
"""HTTP status, Content-Type, body."""


def _json_reply(data: Any, status: int = 200) -> Reply:
    return status, "application/json; charset=utf-8", json.dumps(data).encode()


def _page(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    html = resources.files(__package__).joinpath("page.html").read_bytes()
    return 200, "text/html; charset=utf-8", html


def _state(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    return _json_reply(sb.snapshot())


def _messages(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    return _json_reply(sb.messages(query.get("channel")))


def _ephemerals(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    return _json_reply(sb.ephemerals(query.get("user")))


def _views(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    return _json_reply(sb.views(query.get("user")))


def _request(body: bytes, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The JSON object posted by the page when it has every key in ``keys``; None otherwise."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    return request if isinstance(request, dict) and all(key in request for key in keys) else None


def _submit(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    request = _request(body, ("view_id", "user"))
    values = request.get("values", {}) if request else None
    if request is None or not isinstance(values, dict):
        return _json_reply({"error": "expected JSON {view_id, user, values: {block_id: text}}"}, 400)
    try:
        return _timed_delivery(
            lambda: sb.submit_view(str(request["view_id"]), str(request["user"]), values), "the submission"
        )
    except SubmissionRefused as refused:
        return _json_reply({"status": 0, "body": "", "refused": refused.errors, "elapsed_milliseconds": 0})
    except ValueError as error:
        return _json_reply({"error": str(error)}, 400)


def _close(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    request = _request(body, ("view_id", "user"))
    if request is None:
        return _json_reply({"error": "expected JSON {view_id, user}"}, 400)
    try:
        answer = sb.close_view(str(request["view_id"]), str(request["user"]))
    except LookupError as error:
        return _json_reply({"error": str(error)}, 404)
    except (OSError, RuntimeError, http.client.HTTPException) as error:
        answer = (0, f"could not deliver view_closed: {error}")
    status, text = answer if answer else (None, None)
    return _json_reply({"status": status, "body": text})


def _click(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    try:
        request = json.loads(body)
        args = [str(request[key]) for key in ("channel", "ts", "action_id", "user")]
    except (ValueError, TypeError, KeyError):
        return _json_reply({"error": "expected JSON {channel, ts, action_id, user}"}, 400)
    return _timed_delivery(lambda: sb.click(*args), "the click")


def _delivered(body: bytes, keys: tuple[str, ...], act: Callable[..., tuple[int, str]], what: str) -> Reply:
    """The page's JSON object with `keys` handed to `act` (their values as strings, in order) and
    answered as `_timed_delivery` does; 400 when a key is missing."""
    request = _request(body, keys)
    if request is None:
        return _json_reply({"error": f"expected JSON {{{', '.join(keys)}}}"}, 400)
    values = [str(request[key]) for key in keys]
    return _timed_delivery(lambda: act(*values), what)


def _command(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    return _delivered(body, ("user", "channel", "text"), sb.run_command, "the command")


def _home_opened(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    return _delivered(body, ("user",), sb.open_home, "the app_home_opened event")


def _click_home(sb: Sandbox, query: dict[str, str], body: bytes) -> Reply:
    return _delivered(body, ("user", "block_id", "action_id"), sb.click_home, "the click")


def _timed_delivery(deliver: Callable[[], tuple[int, str]], what: str) -> Reply:
    """Deliver a click or submission to the bot and answer the page with the bot's status, body and
    how long it took (404 for an unknown message or view; status 0 when it could not be delivered)."""
    started = time.monotonic()
    try:
        status, text = deliver()
    except LookupError as error:
        return _json_reply({"error": str(error)}, 404)
    except (OSError, RuntimeError, http.client.HTTPException) as error:
        status, text = 0, f"could not deliver {what}: {error}"
    elapsed_milliseconds = round((time.monotonic() - started) * 1000)
    return _json_reply({"status": status, "body": text, "elapsed_milliseconds": elapsed_milliseconds})


Route = Callable[[Sandbox, dict[str, str], bytes], Reply]
_ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/"): _page,
    ("GET", "/_sandbox/state"): _state,
    ("GET", "/_sandbox/messages"): _messages,
    ("GET", "/_sandbox/ephemerals"): _ephemerals,
    ("GET", "/_sandbox/views"): _views,
    ("POST", "/_sandbox/click"): _click,
    ("POST", "/_sandbox/submit"): _submit,
    ("POST", "/_sandbox/close"): _close,
    ("POST", "/_sandbox/command"): _command,
    ("POST", "/_sandbox/home_opened"): _home_opened,
    ("POST", "/_sandbox/click_home"): _click_home,
}


class _Server(ThreadingHTTPServer):
    """Serves each connection in its own thread, keeping it open between requests (HTTP/1.1), and
    counts and tracks the connections it accepted."""

    daemon_threads = True
    # The listen backlog: connections the kernel completes before `accept` takes them. socketserver's
    # default is 5; clients connecting at once beyond it had their handshake dropped (or answered with
    # a SYN cookie the full queue then drops): with 32 client threads one was reset, with 96 several
    # hung until their timeout. Servers listen with the system's maximum (nginx 511, Python's
    # `asyncio` 100); the kernel caps it at `net.core.somaxconn` (listen(2)).
    request_queue_size = socket.SOMAXCONN

    def __init__(self, address: tuple[str, int], sandbox: Sandbox) -> None:
        super().__init__(address, _Handler)
        self.sandbox = sandbox
        self.accepted = 0
        self.hang_ups = 0
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        with self.lock:
            self.accepted += 1
            self.open.add(connection)
        return connection, address

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.open.discard(request)
        super().shutdown_request(request)

    def hang_up_now(self) -> bool:
        """Whether the request just read is one `SandboxServer.hang_up` asked to go unanswered."""
        with self.lock:
            if self.hang_ups:
                self.hang_ups -= 1
                return True
            return False

    def close_connections(self) -> None:
        """End every open connection from the server's side (a FIN to the client; each connection's
        thread then ends)."""
        with self.lock:
            connections = list(self.open)
        for connection in connections:
            with contextlib.suppress(OSError):  # the client may have closed it meanwhile
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client hung up first (e.g. it timed out during an injected delay)."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # Keep-alive, as Slack's Web API does: every answer has a Content-Length, and the connection
    # stays open for the client's next request until it closes it, it sends `Connection: close`, or
    # it stays idle `KEEP_ALIVE_SECONDS`.
    protocol_version = "HTTP/1.1"
    timeout = KEEP_ALIVE_SECONDS

    def setup(self) -> None:
        super().setup()
        # An answer goes out as two writes (headers, then body); without TCP_NODELAY, Nagle's
        # algorithm holds the body until the client acknowledges the headers, which a kept-alive
        # connection's client delays (about 40 ms on Linux). Web servers set it (nginx `tcp_nodelay`).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if isinstance(self.connection, ssl.SSLSocket):  # served over TLS: the handshake, on this thread
            self.connection.do_handshake()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: the sandbox prints only its start line."""

    def _dispatch(self, verb: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.hang_up_now():
            self.close_connection = True
            return
        sb = self.server.sandbox
        if url.path.startswith("/api/"):
            self._send_api(self._call_api(url, body))
        elif verb == "POST" and url.path.startswith(RESPONSE_URL_PATH):
            self._send_api(self._respond(url, body))
        elif (verb, url.path) in _ROUTES:
            query = dict(urllib.parse.parse_qsl(url.query))
            self._send(*_ROUTES[(verb, url.path)](sb, query, body))
        else:
            self._send(*_json_reply({"error": "not_found"}, 404))

    def _call_api(self, url: urllib.parse.SplitResult, body: bytes) -> ApiResponse:
        return handle(
            self.server.sandbox,
            url.path.removeprefix("/api/"),
            content_type=self.headers.get("Content-Type", ""),
            body=body,
            query=url.query,
            authorization=self.headers.get("Authorization", ""),
        )

    def _respond(self, url: urllib.parse.SplitResult, body: bytes) -> ApiResponse:
        try:
            params = parse_params(self.headers.get("Content-Type", ""), body, url.query)
        except ApiError as error:
            return error.response
        return respond(self.server.sandbox, url.path.removeprefix(RESPONSE_URL_PATH), params)

    def _send_api(self, response: ApiResponse) -> None:
        status, content_type, body = _json_reply(response.body, response.status)
        self._send(status, content_type, body, response.headers)

    def _send(
        self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class SandboxServer:
    """A sandbox being served in a daemon thread. ``url`` is ``"http://HOST:PORT"`` (``https://`` over
    TLS, its self-signed certificate at ``certificate``, a PEM file); call ``shutdown()``."""

    def __init__(self, httpd: _Server, thread: threading.Thread, certificate: str | None = None) -> None:
        self._httpd = httpd
        self._thread = thread
        self.certificate = certificate
        self.url = _url(httpd)

    @property
    def connections_accepted(self) -> int:
        """How many TCP connections the server has accepted since it started (for tests of clients
        that keep connections alive)."""
        return self._httpd.accepted

    def close_connections(self) -> None:
        """Close the server's side of every open connection, as a server ending idle keep-alive
        connections (or restarting) does; the next request opens a new one."""
        self._httpd.close_connections()

    def hang_up(self, times: int = 1) -> None:
        """Read the next `times` requests (any path) and close their connections without answering:
        what a client sees when a server closes a keep-alive connection just as a request on it
        arrives (`http.client.RemoteDisconnected`). Nothing is recorded for such a request."""
        with self._httpd.lock:
            self._httpd.hang_ups += times

    def shutdown(self) -> None:
        """Stop serving, close the listening socket and every open connection, and wait for the
        serving thread."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        self._thread.join()

    def __enter__(self) -> SandboxServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()


def _url(httpd: _Server) -> str:
    """``"http://HOST:PORT"`` (``https://`` over TLS) where ``httpd`` listens."""
    host, port = httpd.socket.getsockname()[:2]  # an AF_INET socket's name is (str, int)
    scheme = "https" if isinstance(httpd.socket, ssl.SSLSocket) else "http"
    return f"{scheme}://{host}:{port}"


def _self_signed(host: str, directory: str) -> tuple[str, str]:
    """A certificate for ``host`` (an IP address) and its key, made by the ``openssl`` command in
    ``directory``: ``(certificate PEM path, key PEM path)``. Raises ``subprocess.CalledProcessError``."""
    certificate, key = os.path.join(directory, "sandbox.pem"), os.path.join(directory, "sandbox.key")
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    command += ["-days", "1", "-subj", f"/CN={host}", "-addext", f"subjectAltName=IP:{host}"]
    subprocess.run(
        [*command, "-keyout", key, "-out", certificate],
        check=True,
        capture_output=True,
    )
    return certificate, key


def _bind(sb: Sandbox, host: str, port: int) -> _Server:
    httpd = _Server((host, port), sb)
    sb.base_url = _url(httpd)
    return httpd


def serve(
    sb: Sandbox, host: str = "127.0.0.1", port: int = 0, tls_directory: str | None = None
) -> SandboxServer:
    """Serve ``sb`` on ``host:port`` (0 = any free port) in a daemon thread and return the running server.

    With ``tls_directory``, serve HTTPS as Slack does, with a self-signed certificate for ``host`` (an
    IP address) made there (``SandboxServer.certificate``; needs the ``openssl`` command); each
    connection's TLS handshake runs on its own thread, as its requests do."""
    httpd = _bind(sb, host, port)
    certificate = None
    if tls_directory is not None:
        certificate, key = _self_signed(host, tls_directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, key)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        sb.base_url = _url(httpd)
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
        name="countersign-sandbox",
        daemon=True,
    )
    thread.start()
    return SandboxServer(httpd, thread, certificate)


def run(
    host: str, port: int, signing_secret: str, interactivity_url: str | None = None, quiet: bool = False
) -> None:
    """Serve a fresh sandbox in the foreground until interrupted (Ctrl-C), with Slack's per-method
    rate limits on (``limits.METHOD_CALLS_PER_MINUTE``).

    Prints exactly one line, ``sandbox: http://HOST:PORT``, once listening; with `quiet`, none (the
    caller says where the page is, as `countersign run` does).
    """
    sandbox = Sandbox(signing_secret, interactivity_url, method_limits=METHOD_CALLS_PER_MINUTE)
    httpd = _bind(sandbox, host, port)
    if not quiet:
        print(f"sandbox: {httpd.sandbox.base_url}", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--host``, ``--port``, ``--signing-secret`` (default ``$SLACK_SIGNING_SECRET``),
    ``--interactivity-url`` (the bot's Request URL). Returns the exit status."""
    parser = argparse.ArgumentParser(prog="countersign-sandbox", description="Local stand-in for Slack.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3001)
    parser.add_argument("--signing-secret", default=os.environ.get("SLACK_SIGNING_SECRET"))
    parser.add_argument(
        "--interactivity-url", default=None, help="the bot's Request URL, e.g. .../slack/events"
    )
    args = parser.parse_args(argv)
    if not args.signing_secret:
        parser.error("a signing secret is required (--signing-secret or $SLACK_SIGNING_SECRET)")
    run(args.host, args.port, args.signing_secret, args.interactivity_url)
    return 0
