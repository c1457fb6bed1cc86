"""A Slack Web API client that keeps its connections alive: slack_sdk's `WebClient` sending through a
urllib3 connection pool.

slack_sdk 3.x's sync `WebClient` sends each call with `urllib.request.urlopen`, which opens a new
connection (a TCP and, to Slack, a TLS handshake) and asks the server to close it after the answer
(`Connection: close`). It has no public hook for another transport: its `AsyncWebClient` takes an
aiohttp session, the sync one nothing (slack_sdk's base_client; python-slack-sdk PR #662 moved the
sync client to urllib). Every call's HTTP goes through one method,
`BaseClient._perform_urllib_http_request_internal(url, req)`, which answers `{"status", "headers",
"body"}` or raises what urlopen raises; `PooledWebClient` overrides that method and nothing else,
so slack_sdk still builds the request, parses the answer and runs its retry handlers around each
attempt. slack_sdk has kept that method's name and shape through 3.x; `tests/test_slackhttp.py`
fails if a call stops going through it.
"""

from __future__ import annotations

import io
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPException, HTTPMessage
from typing import Any

import urllib3
from slack_sdk import WebClient
from slack_sdk.errors import SlackRequestError

#: Connections kept open per host: the most Slack calls one process makes at once (the web process's
#: decision threads, `bot.app.DECISION_THREADS`). More calls at once each open a connection of their
#: own, closed after its answer.
POOL_CONNECTIONS = 16


class PooledWebClient(WebClient):
    """A `slack_sdk.WebClient` (same arguments, same methods, answers and errors) whose calls reuse
    kept-alive HTTP connections from one pool, shared by the threads that use the client.

    As with urlopen: `timeout` (seconds) bounds the connect and each wait for data; `ssl` (an
    `ssl.SSLContext`, default the system's trusted certificates) verifies Slack's certificate;
    `proxy` (or `HTTPS_PROXY`, which `WebClient` reads) is used for hosts not in `NO_PROXY`, its
    `user:password@` sent as Basic proxy authorization. A 2xx answer is returned, any other status
    raised as `urllib.error.HTTPError` (redirects are not followed; Slack's Web API answers without
    them). A call that gets no answer raises `urllib.error.URLError` (reason: the socket's error,
    e.g. `http.client.RemoteDisconnected` when a kept-alive connection was closed by the server as
    the request went out), which slack_sdk's `ConnectionErrorRetryHandler` retries; a read that
    times out raises `TimeoutError`, which it does not.

    The pool is per process: a forked child opens its own connections and never writes on its
    parent's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pools_lock = threading.Lock()
        self._pools: tuple[int, urllib3.PoolManager, urllib3.ProxyManager | None] | None = None

    def _perform_urllib_http_request_internal(self, url: str, req: urllib.request.Request) -> dict[str, Any]:
        """One attempt of one call: `req` (built by slack_sdk) sent to `url`, answered as
        `{"status": int, "headers": http.client.HTTPMessage, "body": str}` (bytes for a gzip file).
        Raises as the class says."""
        if not url.lower().startswith(("http://", "https://")):
            raise SlackRequestError(f"Invalid URL detected: {url}")
        headers = {name: str(value) for name, value in req.header_items()}
        try:
            response = self._pool(url).urlopen(
                req.get_method(),
                url,
                body=req.data,
                headers=headers,
                timeout=self.timeout,
                retries=False,
                redirect=False,
            )
        except urllib3.exceptions.HTTPError as error:
            raise _as_urlopen_error(error) from error
        message = HTTPMessage()
        for name, value in response.headers.items():
            message[name] = value
        data = response.data
        if not 200 <= response.status < 300:
            raise urllib.error.HTTPError(
                url, response.status, response.reason or "", message, io.BytesIO(data)
            )
        if message.get_content_type() == "application/gzip":  # admin.analytics.getFile
            return {"status": response.status, "headers": message, "body": data}
        return {
            "status": response.status,
            "headers": message,
            "body": data.decode(message.get_content_charset() or "utf-8"),
        }

    def _pool(self, url: str) -> urllib3.PoolManager:
        """This process's pool for `url`: through the proxy unless there is none or the host is in
        `NO_PROXY`."""
        pools = self._pools
        if pools is None or pools[0] != os.getpid():
            with self._pools_lock:
                pools = self._pools
                if pools is None or pools[0] != os.getpid():  # a parent's pools stay the parent's
                    pools = self._pools = (os.getpid(), *self._new_pools())
        _, direct, proxied = pools
        if proxied is None or urllib.request.proxy_bypass(urllib.parse.urlsplit(url).hostname or ""):
            return direct
        return proxied

    def _new_pools(self) -> tuple[urllib3.PoolManager, urllib3.ProxyManager | None]:
        direct = urllib3.PoolManager(maxsize=POOL_CONNECTIONS, ssl_context=self.ssl)
        if not self.proxy:
            return direct, None
        auth = urllib3.util.parse_url(self.proxy).auth
        proxy_headers = urllib3.make_headers(proxy_basic_auth=urllib.parse.unquote(auth)) if auth else None
        proxied = urllib3.ProxyManager(
            self.proxy, proxy_headers=proxy_headers, maxsize=POOL_CONNECTIONS, ssl_context=self.ssl
        )
        return direct, proxied


def _as_urlopen_error(error: urllib3.exceptions.HTTPError) -> Exception:
    """What urlopen raises where urllib3 raised `error`: `TimeoutError` for a read that timed out;
    the `http.client.HTTPException` for an answer that is not HTTP or was cut short (`IncompleteRead`);
    `URLError` with the socket's error (or a description) for anything else."""
    if isinstance(error, urllib3.exceptions.ReadTimeoutError):
        return TimeoutError(str(error))
    causes = [arg for arg in error.args if isinstance(arg, BaseException)] + [error.__cause__]
    cause = next((c for c in causes if isinstance(c, Exception)), None)
    if isinstance(cause, HTTPException) and not isinstance(cause, OSError):
        return cause
    return urllib.error.URLError(cause or str(error))
