"""`POST /v1/requests/{id}/execution` over real HTTP, on real Redis, SQLite and PostgreSQL: an HTTP
agent claims the single execution of an approval before running it, as the RQ agent worker does
(`Store.claim_execution`, the same audit events and refusal reasons), so an approval runs once
however many times the agent's script is run again with its decision."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
from redis import Redis
from sqlalchemy import event

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
        "execution refused (grant_expired): nothing ran, and trying again would be refused too: the grant "
        "expired; send a new request to ask again"
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


@contextmanager
def _statements(runtime: Runtime) -> Iterator[list[str]]:
    """The first three words of each SQL statement the store's engines send meanwhile (BEGINs left out)."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("BEGIN"):
            sent.append(" ".join(statement.split()[:3]))

    for engine in runtime.store.engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        for engine in runtime.store.engines:
            event.remove(engine, "before_cursor_execute", record)


def test_a_claim_and_an_outcome_read_only_the_requester_first(
    agent: httpx.Client, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """Whose request it is is one statement of one column before the claim or the outcome (the
    whole request, its audit trail and its resume event were read before: three statements)."""
    decision = _approved(agent, redis, runtime, "claim-counted", grant_ttl=600)
    request_id = decision["request_id"]
    token = "SELECT api_tokens.id, api_tokens.secret_sha256,"
    owner = "SELECT approval_requests.requester FROM"
    change = ["UPDATE approval_requests SET", "INSERT INTO audit_events"]  # SQLite
    if runtime.store.engine.dialect.name == "postgresql":
        change = ["WITH changed AS"]  # the change and its audit event in one statement
    for path, body in (("execution", decision), ("outcome", {"ok": True})):
        with _statements(runtime) as sent:
            assert agent.post(f"/v1/requests/{request_id}/{path}", json=body).status_code == 200
        assert sent == [token, owner, *change], path


def test_a_request_not_stored_yet_is_answered_as_its_intake_message_says_whose_it_is(
    agent: httpx.Client, tokens: Tokens, web: str, sandbox: tuple[Sandbox, str]
) -> None:
    """Before intake stores the request there is no row to read the requester of: its intake
    message says whose it is, so its owner gets the claim's and the outcome's 409 and another
    token a 404, as before."""
    answer = agent.post("/v1/requests", json=refund(run_id="not-stored", resume=None))
    request_id = answer.json()["request_id"]  # intake has not run: no row yet
    decision = {"request_id": request_id, "outcome": "approved", "payload": {}}
    claimed = _claim(agent, decision)
    assert claimed.status_code == 409 and "execution refused" in claimed.json()["error"]
    reported = agent.post(f"/v1/requests/{request_id}/outcome", json={"ok": True})
    assert reported.status_code == 409
    secret = tokens.create_token("other-agent", ["issue_refund"]).secret
    with httpx.Client(base_url=web, headers={"Authorization": f"Bearer {secret}"}) as other:
        assert _claim(other, decision).status_code == 404
        assert other.post(f"/v1/requests/{request_id}/outcome", json={"ok": True}).status_code == 404


def test_a_claim_before_the_approval_is_refused_as_not_approved_with_what_to_do(
    agent: httpx.Client, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """A still-pending request has no grant yet: a decision claimed for it (no grant, or one made
    up) is `not_approved`, saying to wait for the decision, not a bad signature that retrying would
    never fix; `/grants/verify` says the same, and nothing is claimed."""
    answer = agent.post("/v1/requests", json=refund(run_id="claim-early", resume=None))
    request_id = answer.json()["request_id"]
    drain(redis)  # intake: the card is posted, the request pending
    assert agent.get(f"/v1/requests/{request_id}/decision").status_code == 204
    early = {"request_id": request_id, "outcome": "approved", "payload": refund()["payload"], "grant": None}
    made_up = {
        **early,
        "grant": {"payload_sha256": "0" * 64, "expires_at": "2999-01-01T00:00:00Z", "signature": "0"},
    }
    for decision in (early, made_up):
        refused = _claim(agent, decision)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == (
            f"request {request_id}: execution refused (not_approved): nothing ran: the request is not "
            "approved (still pending, or rejected or expired); wait for its decision and claim with it "
            "only when it is approved and carries a grant"
        )
        verified = agent.post("/v1/grants/verify", json=decision)
        assert verified.status_code == 200 and verified.json()["why"] == "not_approved"
    assert _events(runtime, request_id) == [("execution_refused", {"why": "not_approved"})] * 2
    row = runtime.store.get(request_id)
    assert row is not None and (row.status, row.execution) == ("pending", None)
