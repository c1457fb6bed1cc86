"""The `/v1` HTTP API over real HTTP (uvicorn, httpx), on real Redis, SQLite and PostgreSQL, with
the sandbox as Slack: creation and its idempotency under concurrent POSTs, token scope, the JSON
refusals, the long poll woken by the decision bell, the outcome report, grant verification, the
OpenAPI document, and the Slack app still served beside it."""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from countersign.api.app import MAX_BODY_BYTES
from countersign.api.routes import DEADLINE_GRACE_SECONDS
from countersign.config import load_settings
from countersign.router.cards import APPROVE_ACTION
from countersign.router.jobs import INTAKE_QUEUE, json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store.tokens import Tokens
from tests.helpers import agent as test_agent
from tests.helpers import drain, settled, wait_for
from tests.helpers.api import served
from tests.helpers.builders import refund
from tests.helpers.redis_server import RedisServer

log = logging.getLogger(__name__)


def _create(agent: httpx.Client, **overrides: Any) -> str:
    answer = agent.post("/v1/requests", json=refund(**overrides))
    assert answer.status_code == 202, answer.text
    assert answer.headers["Location"] == f"/v1/requests/{answer.json()['request_id']}"
    return str(answer.json()["request_id"])


def _card(sb: Sandbox, request_id: str) -> dict[str, Any]:
    return next(m for m in sb.messages("C0FINANCE") if request_id in json.dumps(m["blocks"]))


def _problem(answer: httpx.Response, status: int) -> str:
    """The one-line message of a refusal, after checking its status and JSON shape."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert list(body) == ["error"] and isinstance(body["error"], str) and "\n" not in body["error"]
    return str(body["error"])


def test_create_long_poll_a_click_and_report_the_outcome(
    agent: httpx.Client, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id = _create(agent)
    assert agent.get(f"/v1/requests/{request_id}").json()["status"] == "queued"
    drain(redis)
    shown = agent.get(f"/v1/requests/{request_id}").json()
    assert shown["status"] == "pending"

    with ThreadPoolExecutor(1) as pool:
        polled = pool.submit(lambda: (agent.get(f"/v1/requests/{request_id}/decision?wait=30"), time.time()))
        wait_for(lambda: _blocked(redis), what="the long poll to block on the bell")
        click = sb.click_payload("C0FINANCE", _card(sb, request_id)["ts"], APPROVE_ACTION, "U0LEAD")
        assert sb.send_signed(click)[0] == 200  # through the Slack app mounted in the same server
        answer, answered_at = polled.result(timeout=30)
    assert answer.status_code == 200, answer.text
    decision = answer.json()
    woken = answered_at - datetime.fromisoformat(decision["decided_at"]).timestamp()
    log.info("long poll answered %.1f ms after the decision committed", woken * 1000)
    assert woken < 2.0  # loosely: the figure is in BENCHMARKS.md
    assert decision["outcome"] == "approved" and decision["grant"]["signature"]

    assert agent.post("/v1/grants/verify", json=decision).json() == {
        "valid": True,
        "request_id": request_id,
        "why": None,
        "expires_at": decision["grant"]["expires_at"],
    }
    forged = {**decision, "payload": {"amount": "9999.00", "currency": "USD"}}
    assert agent.post("/v1/grants/verify", json=forged).json()["why"] == "payload_mismatch"
    # The signed amount and a larger one in the same object: which counts is up to each JSON reader.
    signed = json.dumps(decision["payload"]["amount"])
    twice = json.dumps(decision).replace(f'"amount": {signed}', f'"amount": {signed}, "amount": "9999.00"', 1)
    refused = agent.post("/v1/grants/verify", content=twice, headers={"Content-Type": "application/json"})
    assert _problem(refused, 422) == "decision: key written twice: amount"
    hidden = agent.get(f"/v1/requests/{request_id}").json()["decision"]["grant"]["signature"]
    assert hidden.startswith("hidden")

    reported = agent.post(f"/v1/requests/{request_id}/outcome", json={"ok": True, "detail": "refund r_1"})
    assert reported.status_code == 200 and reported.json() == {"recorded": True}
    audit = runtime.store.audit_trail(request_id)
    assert (audit[-1].event, audit[-1].actor, audit[-1].detail) == (
        "executed",
        "agent",
        {"detail": "refund r_1"},
    )
    assert "already" in _problem(agent.post(f"/v1/requests/{request_id}/outcome", json={"ok": False}), 409)


def _blocked(redis: Redis) -> bool:
    clients = redis.client_list()
    return any(client.get("cmd") == "blmove" for client in clients)


def test_a_long_poll_without_a_decision_answers_204_and_wait_is_checked(
    agent: httpx.Client, redis: Redis
) -> None:
    request_id = _create(agent)
    drain(redis)
    started = time.monotonic()
    assert agent.get(f"/v1/requests/{request_id}/decision?wait=0.3").status_code == 204
    assert time.monotonic() - started >= 0.25
    assert agent.get(f"/v1/requests/{request_id}/decision").status_code == 204  # no wait: at once
    assert _problem(agent.get(f"/v1/requests/{request_id}/decision?wait=-1"), 422).startswith("wait: ")
    assert _problem(agent.get(f"/v1/requests/{request_id}/decision?wait=soon"), 422).startswith("wait: ")
    for endless in ("NaN", "inf", "1e309"):
        answer = agent.get(f"/v1/requests/{request_id}/decision?wait={endless}")
        assert _problem(answer, 422) == "wait: should be a finite number (not NaN or infinity)"


def test_a_long_poll_survives_a_redis_restart_and_answers_a_decision_whose_ring_was_lost(
    agent: httpx.Client, redis: Redis, redis_server: RedisServer, runtime: Runtime
) -> None:
    request_id = _create(agent)
    drain(redis)
    with ThreadPoolExecutor(1) as pool:
        polled = pool.submit(agent.get, f"/v1/requests/{request_id}/decision?wait=30")
        wait_for(lambda: _blocked(redis), what="the long poll to block on the bell")
        redis_server.stop()
        lead = {"slack_user_id": "U0LEAD", "name": "lee"}
        runtime.store.vote(request_id, lead, "approved", runtime.resume_event)  # nothing rings
        redis_server.start()
        restarted = time.monotonic()
        answer = polled.result(timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outcome"] == "approved"
    assert time.monotonic() - restarted < 15  # read again at the reconnect, not at the 30 s deadline


def test_a_long_poll_answers_204_by_its_wait_when_redis_hangs(
    agent: httpx.Client, redis: Redis, redis_server: RedisServer
) -> None:
    request_id = _create(agent)
    drain(redis)
    with redis_server.paused():  # the bell's BLMOVE gets no answer until the client's socket timeout
        started = time.monotonic()
        answer = agent.get(f"/v1/requests/{request_id}/decision?wait=1")
        took = time.monotonic() - started
    assert answer.status_code == 204, answer.text
    assert took < 1 + DEADLINE_GRACE_SECONDS + 1.5  # loosely: not the 70 s socket timeout


def test_a_request_intake_refused_answers_409_at_once(agent: httpx.Client, redis: Redis) -> None:
    """This router has no webhook secret, so intake dead-letters a webhook request: the long poll
    says so at once, and the request stays readable as the token's own."""
    request_id = _create(agent, resume={"webhook": "https://agent.example.com/decisions"})
    drain(redis)
    started = time.monotonic()
    refused = _problem(agent.get(f"/v1/requests/{request_id}/decision?wait=30"), 409)
    assert time.monotonic() - started < 10
    assert refused.startswith("intake refused the request") and "COUNTERSIGN_WEBHOOK_SECRET" in refused
    assert agent.get(f"/v1/requests/{request_id}").json()["status"] == "dead_letter"


def test_concurrent_posts_of_one_request_get_one_id_and_another_payload_409(
    agent: httpx.Client, web: str, tokens: Tokens
) -> None:
    body = refund()
    barrier = threading.Barrier(8)

    def post(_: int) -> httpx.Response:
        barrier.wait(10)
        return agent.post("/v1/requests", json=body, headers={"Idempotency-Key": "refund-acme-1"})

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(post, range(8)))
    assert {a.status_code for a in answers} == {202}
    assert len({a.json()["request_id"] for a in answers}) == 1
    other = {**body, "payload": {"amount": "1.00", "currency": "USD"}}
    message = _problem(
        agent.post("/v1/requests", json=other, headers={"Idempotency-Key": "refund-acme-1"}), 409
    )
    assert "already used with another action class or payload" in message
    both = tokens.create_token("refund-agent", ["issue_refund", "send_email"], [test_agent.QUEUE]).secret
    other_class = httpx.post(  # the same payload under another action class the token may send
        web + "/v1/requests",
        json={**body, "action": "send_email"},
        headers={"Idempotency-Key": "refund-acme-1", "Authorization": f"Bearer {both}"},
        timeout=90,
    )
    assert "already used with another action class or payload" in _problem(other_class, 409)
    mismatch = agent.post(
        "/v1/requests", json={**body, "idempotency_key": "x"}, headers={"Idempotency-Key": "y"}
    )
    assert "differ" in _problem(mismatch, 422)


def test_tokens_act_only_as_their_requester_for_their_action_classes(
    agent: httpx.Client, web: str, tokens: Tokens
) -> None:
    assert _problem(httpx.post(f"{web}/v1/requests", json=refund()), 401).startswith("send a token")
    assert httpx.get(f"{web}/v1/requests/x").headers["WWW-Authenticate"] == "Bearer"
    forged = httpx.get(f"{web}/v1/requests/x", headers={"Authorization": "Bearer cst_forged"})
    assert _problem(forged, 401) == "the token is unknown or revoked"

    other_requester = agent.post("/v1/requests", json=refund(requester="mail-agent"))
    assert "acts as requester 'refund-agent', not 'mail-agent'" in _problem(other_requester, 403)
    other_action = agent.post("/v1/requests", json=refund(action="send_email"))
    assert "may not request action class 'send_email'" in _problem(other_action, 403)

    request_id = _create(agent)
    mail = tokens.create_token("mail-agent", ["send_email"])
    with httpx.Client(base_url=web, headers={"Authorization": f"Bearer {mail.secret}"}) as stranger:
        for answer in (
            stranger.get(f"/v1/requests/{request_id}"),
            stranger.get(f"/v1/requests/{request_id}/decision"),
            stranger.post(f"/v1/requests/{request_id}/outcome", json={"ok": True}),
        ):
            assert _problem(answer, 404) == f"no approval request {request_id!r} for this token"
        assert tokens.revoke_token(mail.id)
        assert _problem(stranger.get(f"/v1/requests/{request_id}"), 401) == "the token is unknown or revoked"


def test_bad_bodies_get_one_json_line(agent: httpx.Client) -> None:
    huge = agent.post(
        "/v1/requests",
        content=b"{" + b" " * MAX_BODY_BYTES + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert _problem(huge, 413) == f"the body is over {MAX_BODY_BYTES} bytes"
    as_json = {"Content-Type": "application/json; charset=utf-8"}
    for not_json in (b"{nope", b'{"a": "\xff"}'):
        answer = agent.post("/v1/requests", content=not_json, headers=as_json)
        assert _problem(answer, 422).startswith("the body is not JSON")
    twice = json.dumps(refund()).replace('"amount": "120.00"', '"amount": "1.00", "amount": "120.00"')
    answer = agent.post("/v1/requests", content=twice, headers=as_json)
    assert _problem(answer, 422) == "request: key written twice: amount"
    missing = _problem(agent.post("/v1/requests", json={**refund(), "summary": 7, "confidence": "high"}), 422)
    assert missing == "summary: should be a string; confidence: should be a number"
    misnamed = _problem(agent.post("/v1/requests", json={**refund(), "on_behalf_of": "alice"}), 422)
    assert (
        misnamed
        == "on_behalf_of: should be a Slack user id: U or W, then 2 to 31 capitals or digits (e.g. U0123ABC)"
    )
    insecure = refund(resume={"webhook": "http://agent.example.com/d"})
    assert "should use https://" in _problem(agent.post("/v1/requests", json=insecure), 422)
    unknown = _problem(agent.post("/v1/requests/01X/outcome", json={"ok": "yes"}), 422)
    assert unknown == "ok: should be true or false"
    # every POST body is read strictly: a failed run must not read as a success to another reader
    reported = agent.post("/v1/requests/01X/outcome", content=b'{"ok": false, "ok": true}', headers=as_json)
    assert _problem(reported, 422) == "outcome: key written twice: ok"


def test_a_body_not_labelled_json_gets_422(agent: httpx.Client, web: str) -> None:
    """New-user trial, finding 5: `curl -d` labels its body a form; text/plain or no label at all
    is no better. Every /v1 POST answers 422 naming what was sent, after the token is checked."""
    body = json.dumps(refund(run_id="unlabelled")).encode()
    labels = {
        "application/x-www-form-urlencoded": "application/x-www-form-urlencoded",  # what `curl -d` sends
        "text/plain; charset=utf-8": "text/plain",
        None: "none",
    }
    for path in ("/v1/requests", "/v1/requests/01X/outcome", "/v1/grants/verify"):
        for label, shown in labels.items():
            answer = agent.post(path, content=body, headers={"Content-Type": label} if label else {})
            assert _problem(answer, 422) == (
                f"the body is not labelled JSON (Content-Type: {shown}): send application/json"
            )
    assert _problem(httpx.post(f"{web}/v1/requests", content=body), 401)  # the token first
    labelled = agent.post(
        "/v1/requests", content=body, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert labelled.status_code == 202, labelled.text


def test_an_id_of_any_form_is_one_json_404(agent: httpx.Client) -> None:
    """Not only unknown ULIDs: ids RQ would refuse as job ids (`;`, spaces) and long ones."""
    for unknown in ("01J00000000000000000000009", "x;DROP TABLE requests", "a b", "A" * 2000):
        for answer in (
            agent.get(f"/v1/requests/{unknown}"),
            agent.get(f"/v1/requests/{unknown}/decision", params={"wait": 0}),
            agent.post(f"/v1/requests/{unknown}/outcome", json={"ok": True}),
        ):
            assert _problem(answer, 404).startswith("no approval request ")


def test_an_action_class_the_policy_does_not_name_is_refused_before_intake(web: str, tokens: Tokens) -> None:
    secret = tokens.create_token("refund-agent", ["wire_money"], [test_agent.QUEUE]).secret
    answer = httpx.post(
        f"{web}/v1/requests", json=refund(action="wire_money"), headers={"Authorization": f"Bearer {secret}"}
    )
    assert "wire_money" in _problem(answer, 422)


def test_http_webhooks_beyond_loopback_follow_the_routers_setting(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tokens: Tokens
) -> None:
    """The API checks a webhook with `COUNTERSIGN_WEBHOOK_ALLOW_HTTP` as the client does."""
    secret = tokens.create_token("refund-agent", ["issue_refund"]).secret
    body = refund(resume={"webhook": "http://agent.internal:8080/decisions"})
    for allowed, status in (("false", 422), ("true", 202)):
        monkeypatch.setenv("COUNTERSIGN_WEBHOOK_ALLOW_HTTP", allowed)
        with served(Runtime(load_settings())) as url:
            answer = httpx.post(
                f"{url}/v1/requests", json=body, headers={"Authorization": f"Bearer {secret}"}
            )
        assert answer.status_code == status, answer.text


def test_what_an_agent_sends_reaches_slack_escaped(
    agent: httpx.Client, redis: Redis, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = _create(agent, summary="<!channel> *bold* refund", reason="<!here> <@U0LEAD> ok?")
    drain(redis)
    card = _card(sandbox[0], request_id)
    mrkdwn = [card["text"], *_texts(card["blocks"], "mrkdwn")]
    assert not [text for text in mrkdwn if "<!channel>" in text or "<!here>" in text]
    assert any("&lt;!channel&gt;" in text for text in mrkdwn)
    assert "<!channel> *bold* refund" in _texts(card["blocks"], "plain_text")  # the header: never parsed


def _texts(value: Any, kind: str) -> list[str]:
    if isinstance(value, dict):
        own = [value["text"]] if value.get("type") == kind and isinstance(value.get("text"), str) else []
        return own + [t for child in value.values() for t in _texts(child, kind)]
    if isinstance(value, list):
        return [t for child in value for t in _texts(child, kind)]
    return []


def test_the_openapi_document_lists_the_api_and_slack_is_served_beside_it(web: str) -> None:
    document = httpx.get(f"{web}/v1/openapi.json").json()
    assert set(document["paths"]) == {
        "/v1/requests",
        "/v1/requests/{request_id}",
        "/v1/requests/{request_id}/decision",
        "/v1/requests/{request_id}/execution",
        "/v1/requests/{request_id}/outcome",
        "/v1/grants/verify",
    }
    claim = document["paths"]["/v1/requests/{request_id}/execution"]["post"]
    assert claim["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Decision"
    }
    assert "409" in claim["responses"]
    schemas = document["components"]["schemas"]
    assert {"ApprovalRequestV1", "Decision", "Problem", "OutcomeReport", "Claimed"} <= set(schemas)
    assert "payload" in schemas["ApprovalRequestV1"]["properties"]
    action = schemas["ApprovalRequestV1"]["properties"]["action"]  # the pattern, and in words
    assert (action["pattern"], action["description"]) == (
        "^[a-z0-9_.-]{1,64}$",
        "1 to 64 lower-case letters, digits, '_', '.' or '-' (e.g. issue_refund).",
    )
    assert httpx.get(f"{web}/healthz").json() == {"ok": True, "database": "ok", "redis": "ok"}
    assert httpx.post(f"{web}/slack/events", content=b"payload=%7B%7D").status_code == 401  # unsigned


def test_a_payload_breaking_a_declared_field_gets_422_naming_it_and_is_never_enqueued(
    agent: httpx.Client, redis: Redis, sandbox: tuple[Sandbox, str]
) -> None:
    """Trial finding: the tests' policy declares `amount: {type: decimal, places: 2, min: "0.01"}`
    for issue_refund; a payload must keep that declaration, not only a reviewer's edit."""
    declared = "the policy's editable.amount of issue_refund (decimal, places 2, min 0.01)"
    for amount, wrong in (
        ("-5.00", "must be at least 0.01"),
        ("0.00", "must be at least 0.01"),
        ("abc", "enter a number like 1234.56"),
        ("1e400", "enter a number like 1234.56"),
        ("7.125", "use at most 2 decimal places"),
        (None, 'send a decimal string like "1234.56"'),
    ):
        payload = {"amount": amount, "currency": "USD"}
        refused = _problem(agent.post("/v1/requests", json=refund(payload=payload, run_id=str(amount))), 422)
        assert refused.startswith(f"payload.amount: {json.dumps(amount)} breaks {declared}: {wrong}"), refused
    left_out = _problem(agent.post("/v1/requests", json=refund(payload={}, run_id="left-out")), 422)
    assert left_out == (
        f'payload.amount: missing, but {declared} requires it: send a decimal string like "1234.56"'
    )
    assert json_queue(INTAKE_QUEUE, redis).count == 0 and sandbox[0].messages() == []
    accepted = _create(agent, payload={"amount": "0.01", "currency": "USD"})  # the bound itself is in
    drain(redis)
    assert agent.get(f"/v1/requests/{accepted}").json()["status"] == "pending"


def test_a_422_shows_the_controls_of_what_it_quotes_escaped(agent: httpx.Client) -> None:
    """A 422 quoting an agent's value shows its C0 (BEL), DEL, C1 (CSI, NEL) and bidirectional
    controls as `\\uXXXX` (`untrusted.escaped`), in their stored order, on one line."""
    amount = "\x07\x7f\x9b\x85\u202e"
    answer = agent.post("/v1/requests", json=refund(payload={"amount": amount, "currency": "USD"}))
    refused = _problem(answer, 422)
    assert refused.startswith('payload.amount: "\\u0007\\u007f\\u009b\\u0085\\u202e" breaks '), refused
    assert not set(amount) & set(refused)


def test_intake_checks_declared_fields_by_the_policy_in_force_when_it_runs(
    agent: httpx.Client, redis: Redis, policy_file: Path, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """A reload between the API's check and intake: intake is authoritative, so a request the API
    accepted under version 3 (`min: "0.01"`) is dead-lettered under version 4 (`min: "500.00"`),
    its reason naming the field, and the long poll answers 409 with it."""
    request_id = _create(agent)  # 120.00, within version 3
    policy_file.write_text(
        policy_file.read_text().replace("version: 3", "version: 4").replace('min: "0.01"', 'min: "500.00"')
    )
    settled(policy_file)
    drain(redis)
    assert runtime.policy.version == 4
    refused = _problem(agent.get(f"/v1/requests/{request_id}/decision?wait=0"), 409)
    assert 'payload.amount: "120.00" breaks the policy\'s editable.amount of issue_refund' in refused
    assert refused.endswith("(decimal, places 2, min 500.00): must be at least 500.00"), refused
    assert sandbox[0].messages() == []


def test_intake_dead_letters_a_request_that_leaves_out_a_field_declared_since(
    agent: httpx.Client, redis: Redis, policy_file: Path, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """A declared field the payload leaves out is refused at intake too: version 4 declares `customer`,
    which the request the API accepted under version 3 does not send."""
    request_id = _create(agent)  # amount and currency only
    amount = 'editable: {amount: {type: decimal, places: 2, min: "0.01"}}'
    assert amount in policy_file.read_text()
    declared = amount[:-1] + ", customer: {type: text, max_length: 40}}"
    version_4 = policy_file.read_text().replace("version: 3", "version: 4").replace(amount, declared)
    policy_file.write_text(version_4)
    settled(policy_file)
    drain(redis)
    assert runtime.policy.version == 4
    refused = _problem(agent.get(f"/v1/requests/{request_id}/decision?wait=0"), 409)
    assert (
        "payload.customer: missing, but the policy's editable.customer of issue_refund (text, max_length 40) "
        "requires it: send a string"
    ) in refused, refused
    assert sandbox[0].messages() == []


def test_numbers_too_long_and_nesting_too_deep_are_named_as_such(agent: httpx.Client) -> None:
    """Trial findings: a 5,000-digit integer answered Python's own advice
    (`sys.set_int_max_str_digits()`), and 3,000 levels of nesting "the body is not JSON"."""
    as_json = {"Content-Type": "application/json"}
    long = '"currency": "USD", "lines": [1, ' + "7" * 5000 + "]"
    body = json.dumps(refund()).replace('"currency": "USD"', long)
    answer = _problem(agent.post("/v1/requests", content=body, headers=as_json), 422)
    assert answer == (
        "request: an integer of 5000 digits at payload.lines[1], over the 4300 digits a JSON integer may "
        "have here; send it as a string"
    )
    deep = json.dumps(refund()).replace('"USD"', "[" * 3000 + "]" * 3000)
    assert _problem(agent.post("/v1/requests", content=deep, headers=as_json), 422) == (
        "request: nested deeper than 32 levels"
    )
    for path in ("/v1/requests/01X/outcome", "/v1/grants/verify"):
        answer = agent.post(path, content="[" * 3000 + "]" * 3000, headers=as_json)
        assert _problem(answer, 422).endswith(": nested deeper than 32 levels")


def test_a_body_that_is_no_decision_gets_422_naming_what_it_lacks(agent: httpx.Client) -> None:
    """Trial finding: `{"foo": 1}` was answered `why: "not_approved"`, as if it were a decision."""
    missing = _problem(agent.post("/v1/grants/verify", json={"foo": 1}), 422)
    assert missing == (
        "decision: request_id: missing; outcome: missing (send the decision as GET "
        "/v1/requests/{id}/decision gives it)"
    )
    wrong = _problem(agent.post("/v1/grants/verify", json={"request_id": 7, "outcome": "maybe"}), 422)
    assert wrong.startswith(
        "decision: request_id: should be a string; outcome: should be approved, rejected or expired"
    )
    unknown = agent.post("/v1/grants/verify", json={"request_id": "01X", "outcome": "rejected"})
    assert _problem(unknown, 404) == "no approval request '01X' for this token"  # a decision, of no request
