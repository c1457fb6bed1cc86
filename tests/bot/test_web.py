"""The bot over real HTTP: Slack signature checks, malformed or foreign requests (a 4xx, never a
500, also for any signed payload hypothesis makes up), the health check, and acks that do not wait
for decisions."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis
from slack_sdk.signature import SignatureVerifier

from countersign.agent import ApprovalClient
from countersign.bot.app import DECISION_THREADS
from countersign.ports import free_port
from countersign.router.cards import APPROVE_ACTION
from countersign.sandbox import Sandbox
from countersign.store import Store
from countersign.store.engine import WRITE
from tests.helpers import wait_for
from tests.helpers.builders import edited_card, post_card, status
from tests.helpers.strategies import json_values


def test_forged_and_stale_requests_get_401_and_change_nothing(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")

    assert sb.send_signed(click, secret="not-the-signing-secret")[0] == 401
    assert sb.send_signed(click, timestamp=int(time.time()) - 301)[0] == 401  # Slack's 5-minute window
    assert status(store, request_id) == "pending"
    assert [e.event for e in store.audit_trail(request_id)] == ["requested", "card_posted"]

    assert sb.send_signed(click, timestamp=int(time.time()) - 60)[0] == 200  # inside the window


def test_healthz_reports_database_and_redis(bot: str) -> None:
    with urllib.request.urlopen(bot + "/healthz", timeout=5) as response:
        assert response.status == 200
        assert json.loads(response.read()) == {"ok": True, "database": "ok", "redis": "ok"}


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _declared_length_status(bot: str, length: int) -> int:
    """POST to /slack/events declaring a body of `length` bytes (sending only a few)."""
    host, port = bot.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.putrequest("POST", "/slack/events")
    connection.putheader("Content-Length", str(length))
    connection.putheader("X-Slack-Request-Timestamp", str(int(time.time())))
    connection.endheaders(b"payload=")
    status = connection.getresponse().status
    connection.close()
    return status


def test_malformed_slack_requests_get_a_4xx_never_a_500(sandbox: tuple[Sandbox, str], bot: str) -> None:
    sb, _ = sandbox
    url = bot + "/slack/events"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert (
        _post(
            url, b"payload=%7B%7D", {**form, "X-Slack-Request-Timestamp": "abc", "X-Slack-Signature": "v0=00"}
        )
        == 401
    )
    assert _post(url, b"payload=%7B%7D", form) == 401  # no timestamp, no signature
    assert _declared_length_status(bot, 2 * 1024 * 1024) == 413  # refused before the body is read
    timestamp = str(int(time.time()))
    body = b"payload=not-json"
    signature = SignatureVerifier(sb.signing_secret).generate_signature(timestamp=timestamp, body=body)
    assert (
        _post(url, body, {**form, "X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": signature})
        == 400
    )


@pytest.mark.parametrize("kind", ["view_submission", "view_closed"])
@pytest.mark.parametrize(
    "view",
    [{"callback_id": "countersign_edit_submit"}, {"callback_id": "x", "type": 7}, {"type": "modal"}],
    ids=["no_type", "type_not_text", "no_callback_id"],
)
def test_a_signed_view_payload_without_its_view_type_or_callback_gets_400(
    sandbox: tuple[Sandbox, str], bot: str, kind: str, view: dict[str, Any]
) -> None:
    payload = {"type": kind, "team": {"id": "T0SANDBOX"}, "user": {"id": "U0LEAD"}, "view": view}
    assert sandbox[0].send_signed(payload)[0] == 400


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payload=st.dictionaries(
        st.sampled_from(["type", "user", "actions", "view", "team", "trigger_id", "container", "channel"]),
        json_values,
        max_size=6,
    )
)
def test_any_signed_interactivity_payload_gets_an_answer_not_a_500(
    sandbox: tuple[Sandbox, str], bot: str, payload: dict[str, Any]
) -> None:
    status, _ = sandbox[0].send_signed(payload)
    assert status < 500, json.dumps(payload)[:500]
    status, _ = sandbox[0].send_signed(payload, timestamp=int(time.time()) - 400)
    assert status == 401


def test_a_payload_from_another_workspace_is_refused(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    click["team"] = {"id": "T0OTHER", "domain": "elsewhere"}
    assert sb.send_signed(click)[0] == 403
    assert status(store, request_id) == "pending"


def test_timestamps_that_are_not_plain_digits_get_401(bot: str) -> None:
    for timestamp in ("²", "¹²³", "9" * 5000):
        assert (
            _post(
                bot + "/slack/events",
                b"payload=%7B%7D",
                {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": "v0=00"},
            )
            == 401
        )


@contextmanager
def decisions_blocked(store: Store) -> Iterator[None]:
    """Hold a lock that keeps every decision from being written (reads go on), until the block ends:
    SQLite's write lock (`BEGIN IMMEDIATE`), or on PostgreSQL an EXCLUSIVE lock on the requests table,
    which the vote's `SELECT ... FOR UPDATE` waits for."""
    engine = store.engine.execution_options(**WRITE)
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql("LOCK TABLE approval_requests IN EXCLUSIVE MODE")
        yield


def test_clicks_are_acked_while_earlier_decisions_are_still_being_written(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """Every click is acked (200) while no decision can be written, and none is decided yet; the final
    waits check that each click's decision is written once the database lets it (every request ends
    approved) and its card rewritten (so no decision is still writing to Slack when the test ends)."""
    sb, _ = sandbox
    cards = []
    for n in range(DECISION_THREADS + 1):  # more clicks than decisions run at once (and than Bolt's 5)
        redis.delete("countersign:pace:C0FINANCE")
        cards.append(post_card(client, redis, sb, run_id=f"r{n}"))
    with decisions_blocked(store):
        answers = [sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")[0] for _, card in cards]
        assert answers == [200] * len(cards)
        assert {status(store, request_id) for request_id, _ in cards} == {"pending"}
    for request_id, _ in cards:
        wait_for(lambda r=request_id: status(store, r) == "approved", what=f"{request_id} approved")
    for _, card in cards:
        wait_for(lambda ts=card["ts"]: edited_card(sb, ts), what=f"card {card['ts']} rewritten")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # process behaviour, not SQL
def test_countersign_web_asks_slack_once_before_its_workers_boot_and_starts_quietly(
    env: dict[str, str], sandbox: tuple[Sandbox, str], tmp_path: Path
) -> None:
    """`countersign web` under gunicorn: the installation is asked of Slack (auth.test, bots.info) once,
    in the master before the workers boot (a failure there is one line: tests/test_cli.py), not by each
    worker; no worker logs Bolt's warning about a token given with a client; and the stop logs no error."""
    sb, _ = sandbox
    port = free_port()
    log = tmp_path / "web.log"
    with log.open("w") as output:
        web = subprocess.Popen(
            [sys.executable, "-m", "countersign.cli", "web", "--workers", "2", "--host", "127.0.0.1"],
            env={**os.environ, **env, "PORT": str(port)},
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,  # Ctrl-C reaches pytest alone; `finally` stops it
        )
    try:
        wait_for(lambda: _healthy(port), timeout=60, what="countersign web to answer /healthz")
        wait_for(lambda: log.read_text().count("Booting worker") == 2, timeout=30, what="both workers")
        assert [len(sb.calls("auth.test")), len(sb.calls("bots.info"))] == [1, 1]
    finally:
        web.terminate()
        web.wait(timeout=30)
    text = log.read_text()
    assert "token` will be unused" not in text and "Traceback" not in text, text
    assert "[ERROR]" not in text, text  # e.g. "Worker (pid:…) was sent SIGTERM!" at the stop


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return bool(json.loads(response.read())["ok"])
    except OSError:
        return False


# A gunicorn worker of `countersign web` setting up its signals, with a stop (SIGTERM, as `countersign
# run` sends the web process group) arriving at the worst moment: just as uvicorn's `init_signals` has
# put SIGTERM back to its default action, before ours replaces it.
STOP_WHILE_BOOTING = """
import os, signal
from gunicorn.config import Config
from gunicorn.glogging import Logger
from countersign.bot.server import Worker

config = Config()
worker = Worker(1, os.getppid(), [], None, 30, config, Logger(config))
set_handler = signal.signal

def stop_arrives_at_the_default(signum, handler):
    previous = set_handler(signum, handler)
    if signum == signal.SIGTERM and handler == signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGTERM)
    return previous

signal.signal = stop_arrives_at_the_default
worker.init_signals()
print("the stop was lost", flush=True)
"""


def test_a_web_worker_stopped_while_it_sets_up_its_signals_exits_normally() -> None:
    """gunicorn logs a worker that a signal ended as an error ("Worker (pid:…) was sent SIGTERM!"):
    a stop that arrives while the booting worker sets up its handlers ends it with status 0, and is
    not lost either."""
    ended = subprocess.run(
        [sys.executable, "-c", STOP_WHILE_BOOTING], capture_output=True, text=True, timeout=60, check=False
    )
    assert (ended.returncode, ended.stdout) == (0, ""), ended.stderr
