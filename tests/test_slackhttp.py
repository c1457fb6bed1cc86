"""The router's Slack client keeps its connections alive (`countersign.slackhttp`): calls through
`Runtime.slack` to the sandbox over real HTTP (and HTTPS) share one connection, and a connection the
server dropped costs no call."""

from __future__ import annotations

import ssl
import threading
import urllib.error
from collections.abc import Iterator
from http.client import RemoteDisconnected
from pathlib import Path
from unittest import mock

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from countersign.config import Settings
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox, SandboxServer, serve
from countersign.slackhttp import PooledWebClient

CHANNEL = "C0APPROVALS"


@pytest.fixture
def sb() -> Sandbox:
    return Sandbox(signing_secret="s3cret")


@pytest.fixture
def server(sb: Sandbox) -> Iterator[SandboxServer]:
    running = serve(sb)
    yield running
    running.shutdown()


@pytest.fixture
def slack(server: SandboxServer) -> WebClient:
    """The client the router's workers and web process use."""
    return Runtime(Settings(SLACK_BOT_TOKEN="xoxb-test", SLACK_API_URL=server.url + "/api/")).slack


def _post_and_update(slack: WebClient, n: int) -> None:
    for _ in range(n):
        ts = slack.chat_postMessage(channel=CHANNEL, text="Approval needed")["ts"]
        slack.chat_update(channel=CHANNEL, ts=ts, text="Approved")


def test_calls_share_one_connection(slack: WebClient, sb: Sandbox, server: SandboxServer) -> None:
    _post_and_update(slack, 5)
    assert len(sb.messages(CHANNEL)) == 5
    assert server.connections_accepted == 1


def test_calls_go_through_the_one_method_the_client_overrides(slack: WebClient) -> None:
    """slack_sdk's internal method `PooledWebClient` overrides is still the one every call takes."""
    with mock.patch.object(PooledWebClient, "_perform_urllib_http_request_internal", autospec=True) as send:
        send.return_value = {"status": 200, "headers": {}, "body": '{"ok": true}'}
        assert slack.auth_test()["ok"]
    assert send.call_count == 1


def test_threads_share_the_pool(slack: WebClient, sb: Sandbox, server: SandboxServer) -> None:
    threads = [threading.Thread(target=_post_and_update, args=(slack, 5)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(sb.messages(CHANNEL)) == 20
    assert server.connections_accepted <= 4


def test_a_connection_the_server_closed_while_idle_is_replaced(
    slack: WebClient, sb: Sandbox, server: SandboxServer
) -> None:
    _post_and_update(slack, 1)
    server.close_connections()
    _post_and_update(slack, 1)
    assert len(sb.messages(CHANNEL)) == 2
    assert server.connections_accepted == 2


def test_a_sandbox_restarted_on_the_same_port_is_reached_again(slack: WebClient, sb: Sandbox) -> None:
    first = serve(sb)
    slack.base_url = first.url + "/api/"
    _post_and_update(slack, 1)
    first.shutdown()  # closes the kept-alive connection too
    port = int(first.url.rsplit(":", 1)[1])
    with serve(sb, port=port):
        _post_and_update(slack, 1)
    assert len(sb.messages(CHANNEL)) == 2


def test_a_request_hung_up_on_is_retried_by_slack_sdk(
    slack: WebClient, sb: Sandbox, server: SandboxServer
) -> None:
    """The kept-alive connection is closed by the server as the request goes out: slack_sdk's
    ConnectionErrorRetryHandler sends it again on a new connection."""
    slack.auth_test()
    server.hang_up()
    assert slack.chat_postMessage(channel=CHANNEL, text="Approval needed")["ok"]
    assert len(sb.messages(CHANNEL)) == 1
    assert server.connections_accepted == 2


def test_without_retry_handlers_a_hang_up_raises_what_urlopen_raises(
    sb: Sandbox, server: SandboxServer
) -> None:
    slack = PooledWebClient(token="xoxb-test", base_url=server.url + "/api/", retry_handlers=[])
    slack.auth_test()
    server.hang_up()
    with pytest.raises(urllib.error.URLError) as raised:
        slack.chat_postMessage(channel=CHANNEL, text="Approval needed")
    assert isinstance(raised.value.reason, RemoteDisconnected)
    assert sb.messages(CHANNEL) == []


def test_slack_errors_and_statuses_read_as_with_urlopen(slack: WebClient, sb: Sandbox) -> None:
    sb.inject("chat.postMessage", status=503)  # retried once by ServerErrorRetryHandler
    assert slack.chat_postMessage(channel=CHANNEL, text="x")["ok"]
    sb.inject("chat.postMessage", status=429, times=2)
    with pytest.raises(SlackApiError) as raised:
        slack.chat_postMessage(channel=CHANNEL, text="x")
    assert raised.value.response.status_code == 429
    assert int(raised.value.response.headers["Retry-After"]) >= 1
    sb.inject("chat.update", error="message_not_found")
    with pytest.raises(SlackApiError) as refused:
        slack.chat_update(channel=CHANNEL, ts="1.2", text="x")
    assert refused.value.response["error"] == "message_not_found"


def test_a_refused_connection_raises_what_urlopen_raises() -> None:
    slack = PooledWebClient(token="xoxb-test", base_url="http://127.0.0.1:9/api/", retry_handlers=[])
    with pytest.raises(urllib.error.URLError) as raised:
        slack.auth_test()
    assert isinstance(raised.value.reason, ConnectionRefusedError)


def test_over_tls_with_the_given_context_calls_share_one_connection(sb: Sandbox, tmp_path: Path) -> None:
    with serve(sb, tls_directory=str(tmp_path)) as server:
        assert server.url.startswith("https://") and server.certificate
        untrusting = PooledWebClient(token="xoxb-test", base_url=server.url + "/api/", retry_handlers=[])
        with pytest.raises(urllib.error.URLError) as raised:
            untrusting.auth_test()
        assert isinstance(raised.value.reason, ssl.SSLCertVerificationError)
        trusting = PooledWebClient(
            token="xoxb-test",
            base_url=server.url + "/api/",
            ssl=ssl.create_default_context(cafile=server.certificate),
        )
        _post_and_update(trusting, 3)
        assert server.connections_accepted == 2  # the refused handshake, then one for all six calls


def test_a_proxy_is_used_for_hosts_not_in_no_proxy(
    sb: Sandbox, server: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox stands in for the proxy: it answers the absolute URL a proxy is sent."""
    monkeypatch.setenv("NO_PROXY", "")
    slack = PooledWebClient(token="xoxb-test", base_url="http://slack.invalid/api/", proxy=server.url)
    assert slack.auth_test()["ok"]
    monkeypatch.setenv("NO_PROXY", "slack.invalid")
    with pytest.raises(urllib.error.URLError):
        PooledWebClient(
            token="xoxb-test", base_url="http://slack.invalid/api/", proxy=server.url, retry_handlers=[]
        ).auth_test()
