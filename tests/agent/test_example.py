"""The example agent (`examples/refund_agent.py`, the pattern to copy) prints one line for each
outcome of its resume job: executed, rejected, expired, refused (issue 13, finding 9), and nothing
for a refund that failed (it says executed only once the refund ran)."""

from __future__ import annotations

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import relay
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Execution, TimeoutResult
from tests.helpers import agent, drain
from tests.helpers.builders import age, decided_card, post_card

RESUME = "examples.refund_agent.resume"


def printed(runtime: Runtime, redis: Redis, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """What the example's resume jobs print when the agent's worker runs them."""
    capsys.readouterr()
    relay.sweep(runtime.store, redis)
    drain(redis, agent.QUEUE)
    redis.delete("countersign:pace:C0FINANCE")  # the next card need not wait its turn in the channel
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # what the example prints, not SQL
def test_the_example_agent_prints_one_line_for_each_outcome(
    client: ApprovalClient,
    redis: Redis,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    sb, _ = sandbox
    decided_card(client, redis, runtime, sb, func=RESUME, run_id="executed")
    assert printed(runtime, redis, capsys) == ['REFUND EXECUTED: {"amount": "120.00", "currency": "USD"}']

    failing, _ = decided_card(
        client, redis, runtime, sb, func=RESUME, run_id="failed", payload={"amount": "9.00"}
    )
    assert printed(runtime, redis, capsys) == []  # the refund raised (no currency): it did not run
    failed = runtime.store.get(failing)
    assert failed is not None and failed.execution == Execution.FAILED  # what its card says: Failed ✗
    assert "KeyError" in (failed.execution_detail or "")

    decided_card(client, redis, runtime, sb, func=RESUME, vote="rejected", run_id="rejected")
    assert printed(runtime, redis, capsys) == ["REFUND REJECTED by lee: wrong customer"]

    hostile = "bad \u202eredro\u202c\x1b[2J\r\nline 2"  # a bidi override, a clear-screen escape, CRLF
    decided_card(client, redis, runtime, sb, func=RESUME, vote="rejected", why=hostile, run_id="hostile")
    assert printed(runtime, redis, capsys) == [
        "REFUND REJECTED by lee: bad \ufffdredro\ufffd\ufffd[2J⏎line 2"
    ]

    expiring, _ = post_card(
        client, redis, sb, resume={"queue": agent.QUEUE, "func": RESUME}, run_id="expired"
    )
    age(runtime.store, expiring, expires_at=-1)
    runtime.store.expire([(runtime.store.get(expiring), TimeoutResult.DENY)], runtime.resume_event)  # type: ignore[list-item]
    assert printed(runtime, redis, capsys) == [
        "REFUND EXPIRED: nobody decided in time, and the policy's timeout denied it"
    ]

    late, _ = decided_card(client, redis, runtime, sb, func=RESUME, run_id="refused")
    age(runtime.store, late, grant_expires_at=-1)  # the agent's worker was down until the grant expired
    assert printed(runtime, redis, capsys) == [
        f"REFUND REFUSED: request {late}: execution refused (grant_expired)"
    ]
