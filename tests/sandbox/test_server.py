"""The HTTP front (``server``): the page, its JSON endpoints for clicks and modals, and
``python -m countersign.sandbox``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection, HTTPResponse, RemoteDisconnected
from pathlib import Path

import pytest
from slack_sdk import WebClient

from countersign.sandbox import Sandbox, SandboxServer
from tests.helpers import ctrl_c_reaches_it

from .builders import CHANNEL, SECRET, card, open_modal
from .harness import Receiver, http


def test_page_and_json_endpoints(
    client: WebClient, sb: Sandbox, server: SandboxServer, receiver: Receiver
) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    client.chat_postEphemeral(channel=CHANNEL, user="U0BOB", text="psst")

    status, content_type, body = http(server.url + "/")
    assert status == 200
    assert content_type.startswith("text/html")
    assert b"<html" in body
    assert b"/_sandbox/state" in body

    status, content_type, body = http(server.url + "/_sandbox/state")
    state = json.loads(body)
    assert (status, content_type.split(";")[0]) == (200, "application/json")
    assert {"id": "U0LEAD", "name": "lee.lead"} in state["users"]
    assert [c["id"] for c in state["channels"]] == [CHANNEL]
    assert state["channels"][0]["messages"] == sb.messages(CHANNEL)
    assert state["ephemerals"] == sb.ephemerals()

    assert json.loads(http(f"{server.url}/_sandbox/messages?channel={CHANNEL}")[2]) == sb.messages(CHANNEL)
    assert json.loads(http(f"{server.url}/_sandbox/ephemerals?user=U0BOB")[2]) == sb.ephemerals("U0BOB")

    click = {"channel": CHANNEL, "ts": ts, "action_id": "deny", "user": "U0LEAD"}
    status, _, body = http(server.url + "/_sandbox/click", click)
    answer = json.loads(body)
    assert (status, answer["status"], answer["body"]) == (200, 200, "")
    assert receiver.requests[0]["payload"]["user"]["id"] == "U0LEAD"
    assert http(server.url + "/_sandbox/click", {**click, "action_id": "nope"})[0] == 404


def test_page_click_reports_an_unreachable_bot(client: WebClient, sb: Sandbox, server: SandboxServer) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    status, _, body = http(
        server.url + "/_sandbox/click",
        {"channel": CHANNEL, "ts": ts, "action_id": "approve", "user": "U0BOB"},
    )
    assert status == 200
    assert json.loads(body)["status"] == 0


def test_page_modal_endpoints(
    client: WebClient, sb: Sandbox, server: SandboxServer, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    body = http(server.url + "/")[2]
    assert b"/_sandbox/submit" in body and b"/_sandbox/close" in body
    assert b"innerHTML" not in body

    opened = open_modal(client, trigger)
    assert json.loads(http(server.url + "/_sandbox/views?user=U0ALICE")[2]) == sb.views("U0ALICE")
    assert json.loads(http(server.url + "/_sandbox/state")[2])["views"] == sb.views()

    submit = {"view_id": opened["id"], "user": "U0ALICE", "values": {"amount": None}}
    status, _, answer = http(server.url + "/_sandbox/submit", submit)
    assert (status, json.loads(answer)["refused"]) == (
        200,
        {"amount": "Please complete this required field."},
    )
    assert http(server.url + "/_sandbox/submit", {**submit, "user": "U0BOB"})[0] == 404
    assert http(server.url + "/_sandbox/submit", {**submit, "values": {"nope": "1"}})[0] == 400

    status, _, answer = http(server.url + "/_sandbox/submit", {**submit, "values": {"amount": "10"}})
    assert (status, json.loads(answer)["status"]) == (200, 200)
    assert (
        receiver.requests[-1]["payload"]["view"]["state"]["values"]["amount"]["amount_input"]["value"] == "10"
    )
    assert sb.views() == []

    again = open_modal(client, trigger)
    status, _, answer = http(server.url + "/_sandbox/close", {"view_id": again["id"], "user": "U0ALICE"})
    assert (status, json.loads(answer)) == (200, {"status": None, "body": None})
    assert sb.views() == []


def test_command_line_prints_one_line_and_serves_until_interrupted() -> None:
    command = [sys.executable, "-m", "countersign.sandbox", "--port", "0", "--signing-secret", SECRET]
    repo = Path(__file__).resolve().parents[2]
    with subprocess.Popen(
        command,
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ctrl_c_reaches_it,
    ) as proc:  # its own session: Ctrl-C reaches pytest alone; `finally` stops it
        try:
            line = proc.stdout.readline().strip()
            assert re.fullmatch(r"sandbox: http://127\.0\.0\.1:\d+", line)
            url = line.removeprefix("sandbox: ")
            auth = WebClient(token="xoxb-1", base_url=url + "/api/").auth_test()
            assert auth["user_id"] == "U0BOT"
        finally:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    assert (proc.returncode, out, err) == (0, "", "")


def _auth_test(connection: HTTPConnection) -> HTTPResponse:
    connection.request("POST", "/api/auth.test", headers={"Authorization": "Bearer xoxb-1"})
    response = connection.getresponse()
    response.read()
    return response


def _connection(server: SandboxServer) -> HTTPConnection:
    host, port = server.url.removeprefix("http://").split(":")
    return HTTPConnection(host, int(port), timeout=10)


def test_web_api_keeps_the_connection_open_between_calls(server: SandboxServer) -> None:
    connection = _connection(server)
    try:
        answers = [_auth_test(connection) for _ in range(3)]
    finally:
        connection.close()
    assert [(a.status, a.version, a.getheader("Connection")) for a in answers] == [(200, 11, None)] * 3
    assert server.connections_accepted == 1


def test_closed_connections_end_from_the_server_side(server: SandboxServer) -> None:
    connection = _connection(server)
    try:
        _auth_test(connection)
        assert connection.sock is not None
        server.close_connections()
        assert connection.sock.recv(1) == b""  # end of file (the 10 s timeout bounds the wait)
    finally:
        connection.close()


def test_a_request_hung_up_on_is_not_answered_nor_run(sb: Sandbox, server: SandboxServer) -> None:
    connection = _connection(server)
    server.hang_up()
    try:
        with pytest.raises(RemoteDisconnected):
            _auth_test(connection)
        assert sb.calls() == []
        assert _auth_test(connection).status == 200  # http.client opened a new connection
    finally:
        connection.close()
    assert server.connections_accepted == 2


CONCURRENT_CLIENTS = 96


def test_many_clients_connecting_at_once_are_all_answered_none_reset(server: SandboxServer) -> None:
    """Clients that open their connection in the same instant, more than a listen backlog of 5 holds
    (`socketserver`'s default): each one is accepted and answered, none is reset or refused."""
    start = threading.Barrier(CONCURRENT_CLIENTS)

    def one_client(_: int) -> int | str:
        connection = _connection(server)
        try:
            start.wait(timeout=30)
            return _auth_test(connection).status
        except OSError as exc:  # ConnectionResetError, ConnectionRefusedError, BrokenPipeError, timeout
            return type(exc).__name__
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=CONCURRENT_CLIENTS) as pool:
        answers = list(pool.map(one_client, range(CONCURRENT_CLIENTS)))
    assert answers == [200] * CONCURRENT_CLIENTS
    assert server.connections_accepted == CONCURRENT_CLIENTS
