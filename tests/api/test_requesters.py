"""Two requesters on one router over real HTTP (uvicorn, httpx), real Redis, SQLite and PostgreSQL,
the sandbox as Slack: neither learns anything of the other's requests, by idempotency key or by a
decision sent to verify; and a long poll's `wait` past its limit is refused, not shortened.
Trial findings: a second token replayed or blocked the first's idempotency keys, `/v1/grants/verify`
answered `grant_expired` for another requester's decision, and `wait=1000` was served as 60 s."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from redis import Redis

from countersign.api.routes import MAX_WAIT_SECONDS
from countersign.router.cards import APPROVE_ACTION
from countersign.sandbox import Sandbox
from countersign.store.tokens import Tokens
from tests.helpers import agent as test_agent
from tests.helpers import drain
from tests.helpers.builders import refund

SHARED_KEY = "billing-run-7:charge-back"
"""An idempotency key both requesters happen to choose (or one guesses the other's)."""


@pytest.fixture
def billing(web: str, tokens: Tokens) -> Iterator[httpx.Client]:
    """A second agent's client: requester `billing-agent`, the same action class as `agent`'s."""
    secret = tokens.create_token("billing-agent", ["issue_refund"], [test_agent.QUEUE]).secret
    with httpx.Client(base_url=web, headers={"Authorization": f"Bearer {secret}"}, timeout=90) as client:
        yield client


def _post(client: httpx.Client, requester: str, amount: str, key: str = SHARED_KEY) -> httpx.Response:
    body = refund(requester=requester, payload={"amount": amount, "currency": "EUR"})
    return client.post("/v1/requests", json=body, headers={"Idempotency-Key": key})


def _accepted(answer: httpx.Response) -> str:
    assert answer.status_code == 202, answer.text
    return str(answer.json()["request_id"])


def test_one_requesters_idempotency_keys_are_invisible_to_another(
    agent: httpx.Client, billing: httpx.Client, redis: Redis
) -> None:
    mine = _accepted(_post(agent, "refund-agent", "310.00"))
    # the same key and payload from another requester: its own new request, not a replay of mine
    guessed = _accepted(_post(billing, "billing-agent", "310.00"))
    assert guessed != mine
    assert billing.get(f"/v1/requests/{mine}").status_code == 404
    # another payload under the same key: no 409 naming my request id
    assert _accepted(_post(billing, "billing-agent", "999.00", key="pre-claimed")) != mine
    # ...and a key the other requester took first does not block mine
    mine_later = _accepted(_post(agent, "refund-agent", "45.00", key="pre-claimed"))
    drain(redis)
    for client, request_id, amount in (
        (agent, mine, "310.00"),
        (billing, guessed, "310.00"),
        (agent, mine_later, "45.00"),
    ):
        shown = client.get(f"/v1/requests/{request_id}").json()
        assert (shown["status"], shown["request"]["payload"]["amount"]) == ("pending", amount)
    # within one requester the key keeps its meaning: a replay, and another payload is a conflict
    assert _accepted(_post(agent, "refund-agent", "310.00")) == mine
    conflict = _post(agent, "refund-agent", "311.00")
    assert conflict.status_code == 409 and mine in conflict.json()["error"]


def test_when_redis_forgot_the_keys_the_database_keeps_each_requesters_own(
    agent: httpx.Client, billing: httpx.Client, redis: Redis
) -> None:
    mine = _accepted(_post(agent, "refund-agent", "70.00"))
    theirs = _accepted(_post(billing, "billing-agent", "80.00"))
    drain(redis)
    for key in redis.scan_iter("countersign:idempotency:*"):
        redis.delete(key)
    again = _accepted(_post(agent, "refund-agent", "70.00"))  # a new id: Redis forgot the claim
    _accepted(_post(billing, "billing-agent", "81.00"))  # a conflict with its own request, not mine
    drain(redis)
    assert agent.get(f"/v1/requests/{again}/decision").status_code == 204  # a repeat of mine: undecided
    assert agent.get(f"/v1/requests/{mine}").json()["status"] == "pending"
    assert billing.get(f"/v1/requests/{theirs}").json()["status"] == "pending"
    assert _accepted(_post(agent, "refund-agent", "70.00")) == mine  # intake pointed the key back at it
    refused = _post(billing, "billing-agent", "81.00")
    assert refused.status_code == 409 and theirs in refused.json()["error"]


def _approved(agent: httpx.Client, redis: Redis, sb: Sandbox) -> dict[str, Any]:
    """A decision with its grant, from a click on the card of a new request of `agent`'s."""
    request_id = _accepted(agent.post("/v1/requests", json=refund()))
    drain(redis)
    card = next(m for m in sb.messages("C0FINANCE") if request_id in json.dumps(m["blocks"]))
    assert sb.send_signed(sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD"))[0] == 200
    answer = agent.get(f"/v1/requests/{request_id}/decision", params={"wait": MAX_WAIT_SECONDS})
    assert answer.status_code == 200, answer.text  # the longest wait allowed, answered at once
    return dict(answer.json())


def test_verify_answers_another_requesters_decision_as_unknown(
    agent: httpx.Client, billing: httpx.Client, redis: Redis, sandbox: tuple[Sandbox, str]
) -> None:
    decision = _approved(agent, redis, sandbox[0])
    request_id = decision["request_id"]
    assert agent.post("/v1/grants/verify", json=decision).json()["valid"] is True
    unknown = f"no approval request {request_id!r} for this token"
    lapsed = {**decision, "grant": {**decision["grant"], "expires_at": "2000-01-01T00:00:00Z"}}
    for sent in (decision, lapsed):
        answer = billing.post("/v1/grants/verify", json=sent)
        assert (answer.status_code, answer.json()) == (404, {"error": unknown})
    assert billing.get(f"/v1/requests/{request_id}").json() == {"error": unknown}  # the same answer
    never = "01J00000000000000000000009"
    answer = billing.post("/v1/grants/verify", json={**decision, "request_id": never})
    assert (answer.status_code, answer.json()) == (
        404,
        {"error": f"no approval request {never!r} for this token"},
    )


def test_a_wait_past_the_limit_is_refused_naming_it(agent: httpx.Client, redis: Redis) -> None:
    request_id = _accepted(agent.post("/v1/requests", json=refund()))
    drain(redis)
    for too_long in ("1000", "60.5"):
        answer = agent.get(f"/v1/requests/{request_id}/decision", params={"wait": too_long})
        assert (answer.status_code, answer.json()) == (
            422,
            {"error": "wait: should be 60 or less"},
        )
