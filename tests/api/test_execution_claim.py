"""`POST /v1/requests/{id}/execution` over real HTTP, on real Redis, SQLite and PostgreSQL: an HTTP
agent claims the single execution of an approval before running it, as the RQ agent worker does
(`Store.claim_execution`, the same audit events and refusal reasons), so an approval runs once
however many times the agent's script is run again with its decision."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from redis import Redis

from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store.tokens import Tokens
from tests.helpers import anyone, drain
from tests.helpers.builders import refund

LEAD = [{"slack_user_id": "U0LEAD", "name": "lee"}]


def _approved(
    agent: httpx.Client, redis: Redis, runtime: Runtime, run_id: str, grant_ttl: int
) -> dict[str, Any]:
    """A refund created over the API, approved with a grant of `grant_ttl` seconds; its decision as
    the long poll gives it."""
    answer = agent.post("/v1/requests", json=refund(run_id=run_id, resume=None))
    assert answer.status_code == 202, answer.text
    request_id = answer.json()["request_id"]
    drain(redis)  # intake
    runtime.store.decide(
        request_id,
        "approved",
        LEAD,
        via="slack",
        resume=runtime.resume_event,
        grant_ttl=grant_ttl,
        refuse=anyone,
    )
    decision = agent.get(f"/v1/requests/{request_id}/decision").json()
    assert decision["outcome"] == "approved" and decision["grant"]["signature"]
    return dict(decision)


def _claim(agent: httpx.Client, decision: dict[str, Any]) -> httpx.Response:
    return agent.post(f"/v1/requests/{decision['request_id']}/execution", json=decision)


def _events(runtime: Runtime, request_id: str) -> list[tuple[str, dict[str, Any]]]:
    trail = runtime.store.audit_trail(request_id)
    return [(e.event, e.detail) for e in trail if e.event.startswith("execution") or e.event == "executed"]


def test_of_two_claims_of_one_approval_one_runs_and_the_other_is_refused_with_its_reason(
    agent: httpx.Client, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """Two copies of the agent holding the same decision claim it at once: one gets 200, the other
    409 saying the action has started; once the outcome is in, a claim is refused as having run."""
    decision = _approved(agent, redis, runtime, "claim-twice", grant_ttl=600)
    request_id = decision["request_id"]
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: _claim(agent, decision), range(2)))
    assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
    [won] = [a for a in answers if a.status_code == 200]
    [lost] = [a for a in answers if a.status_code == 409]
    assert won.json() == {"claimed": True, "request_id": request_id}
    assert lost.json() == {
        "error": f"request {request_id}: execution refused (outcome_unknown): "
        "the action started and its outcome is unknown; not run again"
    }
    assert runtime.store.get(request_id).execution == "started"  # type: ignore[union-attr]

    reported = agent.post(f"/v1/requests/{request_id}/outcome", json={"ok": True, "detail": "re_1"})
    assert reported.status_code == 200, reported.text
    again = _claim(agent, decision)
    assert again.status_code == 409 and "(already_executed)" in again.json()["error"]
    events = _events(runtime, request_id)
    assert events[0] == ("execution_started", {})
    assert [event for event, _ in events] == [
        "execution_started",
        "execution_refused",
        "executed",
        "execution_refused",
    ]
    assert [detail["why"] for event, detail in events if event == "execution_refused"] == [
        "outcome_unknown",
        "already_executed",
    ]


def test_a_claim_after_the_grant_expired_is_refused_and_nothing_is_claimed(
    agent: httpx.Client, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    decision = _approved(agent, redis, runtime, "claim-late", grant_ttl=0)
    refused = _claim(agent, decision)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"].endswith(
        "execution refused (grant_expired): nothing ran, and trying again would be refused too"
    )
    assert runtime.store.get(decision["request_id"]).execution is None  # type: ignore[union-attr]
    assert _events(runtime, decision["request_id"]) == [("execution_refused", {"why": "grant_expired"})]


def test_a_claim_checks_the_grant_the_path_and_the_owner(
    agent: httpx.Client,
    redis: Redis,
    runtime: Runtime,
    tokens: Tokens,
    web: str,
    sandbox: tuple[Sandbox, str],
) -> None:
    decision = _approved(agent, redis, runtime, "claim-checked", grant_ttl=600)
    request_id = decision["request_id"]
    more = {**decision, "payload": {**decision["payload"], "amount": "9999.00"}}
    assert "(payload_mismatch)" in _claim(agent, more).json()["error"]
    elsewhere = agent.post("/v1/requests/01JZZZZZZZZZZZZZZZZZZZZZZZ/execution", json=decision)
    assert elsewhere.status_code == 422 and "request_id" in elsewhere.json()["error"]
    secret = tokens.create_token("other-agent", ["issue_refund"]).secret
    with httpx.Client(base_url=web, headers={"Authorization": f"Bearer {secret}"}) as other:
        assert _claim(other, decision).status_code == 404
    assert runtime.store.get(request_id).execution is None  # type: ignore[union-attr]
    assert _claim(agent, decision).status_code == 200  # none of those used the approval up


def test_an_outcome_without_a_claim_is_recorded_as_before(
    agent: httpx.Client, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """An agent that runs the action without claiming it first still reports its outcome once."""
    decision = _approved(agent, redis, runtime, "no-claim", grant_ttl=600)
    request_id = decision["request_id"]
    reported = agent.post(f"/v1/requests/{request_id}/outcome", json={"ok": False, "detail": "declined"})
    assert reported.status_code == 200 and reported.json() == {"recorded": True}
    assert _events(runtime, request_id) == []
    assert runtime.store.get(request_id).execution == "failed"  # type: ignore[union-attr]
    refused = _claim(agent, decision)
    assert refused.status_code == 409
    assert "(already_failed): the action already ran and failed; not run again" in refused.json()["error"]
