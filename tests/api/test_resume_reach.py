"""What resume queue a request sent over the HTTP API may name (DESIGN.md, "HTTP API", and invariant
11): never countersign's own (422, for every token), and only one of the token's resume queues
(403); a token from before tokens kept them may name any other. Real HTTP to the served app, real
Redis: a refused request is not stored and puts nothing on any queue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from redis import Redis
from sqlalchemy import update

from countersign.router.jobs import INTAKE_QUEUE, json_queue
from countersign.store.models import ApiToken
from countersign.store.tokens import Tokens
from tests.helpers import agent as test_agent
from tests.helpers.builders import refund


@pytest.fixture
def holder(web: str, tokens: Tokens, request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    """An HTTP client with a refund-agent token whose resume queues are `request.param` (None: a
    token created before migration 0015, which kept none)."""
    queues = request.param
    created = tokens.create_token("refund-agent", ["issue_refund"], queues or ())
    if queues is None:
        with tokens.engine.begin() as connection:
            connection.execute(update(ApiToken).where(ApiToken.id == created.id).values(resume_queues=None))
    headers = {"Authorization": f"Bearer {created.secret}"}
    with httpx.Client(base_url=web, headers=headers, timeout=90) as client:
        yield client


def _send(client: httpx.Client, key: str, resume: dict[str, str] | None) -> httpx.Response:
    body: dict[str, Any] = refund(
        idempotency_key=key, resume=resume, payload={"amount": "2.00", "currency": "USD"}
    )
    return client.post("/v1/requests", json={k: v for k, v in body.items() if v is not None})


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("holder", [None, [], [test_agent.QUEUE], ["countersign"]], indirect=True)
@pytest.mark.parametrize("func", ["builtins.print", "examples.refund_agent.resume", "os.system"])
def test_no_token_may_name_countersigns_own_queue(holder: httpx.Client, redis: Redis, func: str) -> None:
    """Whatever its resume queues (even one written into its row by hand), and whatever the func."""
    answer = _send(holder, f"k-router-{func}", {"queue": "countersign", "func": func})
    assert answer.status_code == 422, answer.text
    assert answer.json() == {
        "error": "resume.queue: 'countersign' is countersign's own queue, whose worker runs only "
        "countersign's jobs; name the queue your agent's worker takes (e.g. refund-agent)"
    }
    assert json_queue(INTAKE_QUEUE, redis).count == 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("holder", [["refund-agent", "refund-agent-eu"]], indirect=True)
def test_a_bound_token_may_name_its_own_queues_only(holder: httpx.Client, redis: Redis) -> None:
    other = _send(holder, "k-other", {"queue": "mail-agent", "func": "mail.resume"})
    assert other.status_code == 403, other.text
    assert other.json() == {
        "error": "this token may not name resume queue 'mail-agent' (it may: refund-agent, refund-agent-eu; "
        "`countersign token create --resume-queue QUEUE` makes one that may)"
    }
    assert json_queue(INTAKE_QUEUE, redis).count == 0
    for n, queue in enumerate(("refund-agent", "refund-agent-eu")):
        accepted = _send(holder, f"k-own-{n}", {"queue": queue, "func": "examples.refund_agent.resume"})
        assert accepted.status_code == 202, accepted.text
    assert json_queue(INTAKE_QUEUE, redis).count == 2


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("holder", [[]], indirect=True)
def test_a_token_created_without_resume_queues_may_resume_by_webhook_or_not_at_all(
    holder: httpx.Client, redis: Redis
) -> None:
    refused = _send(holder, "k-rq", {"queue": "refund-agent", "func": "examples.refund_agent.resume"})
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"].startswith(
        "this token may not name resume queue 'refund-agent' (it may resume by webhook or not at all;"
    )
    assert json_queue(INTAKE_QUEUE, redis).count == 0
    assert _send(holder, "k-none", None).status_code == 202
    assert _send(holder, "k-hook", {"webhook": "https://agent.example.com/decisions"}).status_code == 202
    assert json_queue(INTAKE_QUEUE, redis).count == 2


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("holder", [None], indirect=True)
def test_a_token_from_before_resume_queues_were_kept_may_name_any_agents_queue(
    holder: httpx.Client, redis: Redis
) -> None:
    answer = _send(holder, "k-legacy", {"queue": "mail-agent", "func": "mail.resume"})
    assert answer.status_code == 202, answer.text
    assert json_queue(INTAKE_QUEUE, redis).count == 1
