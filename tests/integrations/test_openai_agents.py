"""OpenAI Agents SDK (`CountersignApprovals`): a scripted model calls the refund tool, which needs approval;
the paused run is kept with the countersign request; a reviewer decides on the sandbox card; a new agent
object (a restarted process) restores the run from the request, and the tool runs the approved (or
edited) arguments once; a rejection or an expiry reaches the model as the tool's output."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest
from agents import AgentHooks, FunctionTool, RunContextWrapper, Runner, RunResult, UserError, function_tool
from agents.tool_context import ToolContext
from redis import Redis
from sqlalchemy.exc import SQLAlchemyError

from countersign.agent import ApprovalClient
from countersign.integrations.openai_agents import CountersignApprovals
from countersign.router import relay
from countersign.router.jobs import json_queue, resume_job_id
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store, TimeoutResult
from examples.openai_agents_refund import APPROVALS, build_agent
from tests.helpers import agent, drain, run_agent, wait_for
from tests.helpers.builders import age
from tests.helpers.faults import table_gone
from tests.helpers.review import REVIEWS, answer_for, approve, card_of, edit, failed_on_card

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the adapter, not SQL
ASK = "refund 120.00 USD to cus_ACME"
DECLINED = "RuntimeError: card_declined"  # the failed execution's detail: what the tool raised
DEFAULT_ERROR_TEXT = "An error occurred while running the tool. Please try again."  # the SDK's default


class Refunds:
    """The refund tool of the tests: records the arguments of each run."""

    def __init__(self) -> None:
        self.runs: list[dict[str, str]] = []

        @function_tool
        def issue_refund(amount: str, currency: str, customer: str) -> str:
            """Refund `amount` in `currency` to `customer`."""
            self.runs.append({"amount": amount, "currency": currency, "customer": customer})
            return f"refunded {amount} {currency} to {customer}"

        self.tool: FunctionTool = issue_refund

    def agent(self) -> Any:
        """The agent as a freshly started process builds it: new agent, new approvals object."""
        return build_agent(CountersignApprovals(dict(APPROVALS.interrupt_on)), [self.tool])


def paused(
    agent_: Any, redis: Redis, sb: Sandbox, run_id: str, approvals: CountersignApprovals = APPROVALS
) -> tuple[str, dict[str, Any]]:
    """Run `agent_` until it pauses, ask through `approvals`, and run intake: the request id and its card."""

    async def start() -> list[str]:
        result = await Runner.run(agent_, ASK)
        assert result.interruptions and result.final_output is None
        return await approvals.ask(result, run_id)

    [request_id] = asyncio.run(start())
    drain(redis)
    card = card_of(sb, request_id)
    return request_id, card


def tool_output(result: RunResult) -> str:
    [output] = [i.output for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    return str(output)


@SQLITE
@pytest.mark.parametrize(("review", "ran"), REVIEWS)
def test_the_restored_run_goes_on_as_the_reviewer_decided(
    client: ApprovalClient,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    review: Callable[[Sandbox, dict[str, Any]], None],
    ran: str | None,
) -> None:
    sb, _ = sandbox
    refunds = Refunds()
    request_id, card = paused(refunds.agent(), redis, sb, "run-1")
    assert refunds.runs == []
    kept = client.get(request_id).request
    assert kept is not None and kept["idempotency_key"] == "openai-agents:run-1:call_refund"
    assert json.loads(kept["context"]["openai_agents"]["run_state"])["$schemaVersion"]
    review(sb, card)
    decision = client.wait(request_id, timeout=10)

    result = asyncio.run(APPROVALS.resume(refunds.agent(), decision))  # a new process's agent
    assert [run["amount"] for run in refunds.runs] == ([ran] if ran else [])
    said = answer_for(ran)
    assert tool_output(result) == said
    assert result.final_output == f"The refund tool said: {said}"


@SQLITE
def test_an_expired_request_runs_nothing_and_tells_the_model(
    client: ApprovalClient, runtime: Runtime, redis: Redis, sandbox: tuple[Sandbox, str]
) -> None:
    refunds = Refunds()
    request_id, _ = paused(refunds.agent(), redis, sandbox[0], "run-expired")
    age(runtime.store, request_id, expires_at=-1)
    runtime.store.expire([(runtime.store.get(request_id), TimeoutResult.DENY)], runtime.resume_event)  # type: ignore[list-item]

    result = asyncio.run(APPROVALS.resume(refunds.agent(), client.wait(request_id, timeout=10)))
    assert refunds.runs == []
    assert "Nobody approved this call in time" in tool_output(result)


@SQLITE
def test_a_decision_delivered_twice_runs_the_tool_once(
    client: ApprovalClient, redis: Redis, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    refunds = Refunds()
    request_id, card = paused(refunds.agent(), redis, sb, "run-twice")
    approve(sb, card)
    decision = client.wait(request_id, timeout=10)

    asyncio.run(APPROVALS.resume(refunds.agent(), decision))
    again = asyncio.run(APPROVALS.resume(refunds.agent(), decision.to_json()))
    assert refunds.runs == [{"amount": "120.00", "currency": "USD", "customer": "cus_ACME"}]
    assert "already_executed" in tool_output(again)


def test_a_tool_without_a_summary_is_refused_and_a_call_without_a_decision_runs_nothing() -> None:
    refunds = Refunds()
    with pytest.raises(ValueError, match="interrupt_on"):
        CountersignApprovals({}).tool(refunds.tool)
    gated = APPROVALS.tool(refunds.tool)
    assert gated.needs_approval is True
    call = ToolContext(context=None, tool_name=gated.name, tool_call_id="c1", tool_arguments="{}")
    answer = asyncio.run(gated.on_invoke_tool(call, '{"amount": "1.00", "currency": "USD", "customer": "c"}'))
    assert (answer, refunds.runs) == ("Not executed: this call was not approved through countersign.", [])


@SQLITE
def test_a_resume_job_restores_the_run_on_the_agents_worker(
    runtime: Runtime, redis: Redis, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    run_agent.RUNS.clear()
    agent_ = build_agent(run_agent.APPROVALS, [run_agent.issue_refund])
    _, card = paused(agent_, redis, sb, "run-job", run_agent.APPROVALS)
    edit(sb, card, "90")
    wait_for(lambda: relay.sweep(runtime.store, redis), what="the decision published")
    drain(redis, agent.QUEUE)
    assert run_agent.RUNS == [{"amount": "90.00", "currency": "USD", "customer": "cus_ACME"}]


@SQLITE
def test_a_resume_job_whose_tool_raised_after_its_claim_is_not_retried(
    runtime: Runtime, redis: Redis, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """The gated tool claims the execution in a thread of its own (`asyncio.to_thread`) inside the
    job's event loop: the claim still reaches the RQ job it runs in (`get_current_job`, a context
    variable the thread's copied context carries), so a tool that raised after its claim
    (`failure_error_function=None`: out of the run) leaves the resume job failed with no retry
    (RESUME_RETRY would otherwise run the turn again in 10 s), and the execution failed."""
    request_id, card = approved_and_run(runtime, redis, sandbox[0], run_agent.FAILING)
    failed_on_card(runtime.store, redis, sandbox[0], request_id, card, DECLINED)
    queue = json_queue(agent.QUEUE, redis)
    job = queue.fetch_job(resume_job_id(request_id))
    assert job is not None and job.retries_left == 0
    assert job.id in queue.failed_job_registry and job.id not in queue.scheduled_job_registry


@SQLITE
@pytest.mark.parametrize(
    ("failing", "told"),
    [
        pytest.param(run_agent.FAILING_DEFAULT, DEFAULT_ERROR_TEXT, id="default"),
        pytest.param(run_agent.FAILING_CUSTOM, "the refund was refused (card_declined)", id="custom"),
    ],
)
def test_a_tool_error_the_sdk_tells_the_model_is_still_the_executions_failure(
    runtime: Runtime,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    failing: run_agent.FailingRefunds,
    told: str,
) -> None:
    """A `failure_error_function` turns what the approved tool raised into its answer to the model:
    the model is told that text, as the tool's author chose, the run and its resume job end
    normally, and the execution is recorded failed with the tool's error, not executed."""
    request_id, card = approved_and_run(runtime, redis, sandbox[0], failing)
    failed_on_card(runtime.store, redis, sandbox[0], request_id, card, DECLINED)
    assert failing.outputs == [f"The refund tool said: {told}"]


@SQLITE
def test_a_hand_made_tool_that_raised_after_approval_raises_out_of_the_run_and_is_failed(
    client: ApprovalClient, runtime: Runtime, redis: Redis, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """A `FunctionTool` built by hand has no failure handling of the SDK's: what it raises leaves the
    run (the SDK's `UserError`), with countersign as without, and the execution is failed."""
    sb, _ = sandbox

    async def declined(context: ToolContext[Any], arguments: str) -> str:
        raise RuntimeError("card_declined")

    tool = dataclasses.replace(Refunds().tool, on_invoke_tool=declined)
    approvals = CountersignApprovals(dict(APPROVALS.interrupt_on))
    request_id, card = paused(build_agent(approvals, [tool]), redis, sb, "run-by-hand", approvals)
    approve(sb, card)
    with pytest.raises(UserError) as raised:
        asyncio.run(approvals.resume(build_agent(approvals, [tool]), client.wait(request_id, timeout=10)))
    assert isinstance(raised.value.__cause__, RuntimeError)
    failed_on_card(runtime.store, redis, sb, request_id, card, DECLINED)


class ClaimRefused(AgentHooks[Any]):
    """Agent hooks that make the database refuse the audit event of the claim of the tool call about
    to run (its table renamed away until `outage` closes)."""

    def __init__(self, store: Store, outage: ExitStack) -> None:
        self.store, self.outage = store, outage

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Any) -> None:
        self.outage.enter_context(table_gone(self.store, "audit_events"))


@SQLITE
def test_countersigns_own_error_before_the_claim_raises_out_of_the_run(
    client: ApprovalClient, runtime: Runtime, redis: Redis, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """Only what the tool raised becomes its `failure_error_function`'s answer: countersign's own
    error (the database refusing the claim) raises out of the run, as it always did, for the resume
    job to be retried; the tool did not run and its execution is not claimed."""
    sb, _ = sandbox
    failing = run_agent.FAILING_DEFAULT
    run_agent.RUNS.clear()
    request_id, card = paused(
        build_agent(failing.approvals, [failing.tool]), redis, sb, "run-outage", failing.approvals
    )
    approve(sb, card)
    decision = client.wait(request_id, timeout=10)
    agent_ = build_agent(failing.approvals, [failing.tool])
    with ExitStack() as outage:
        agent_.hooks = ClaimRefused(runtime.store, outage)
        with pytest.raises(UserError) as raised:  # the SDK's wrapping of what a tool raised
            asyncio.run(failing.approvals.resume(agent_, decision))
    assert isinstance(raised.value.__cause__, SQLAlchemyError)
    row = runtime.store.get(request_id)
    assert run_agent.RUNS == [] and row is not None and row.execution is None


def approved_and_run(
    runtime: Runtime, redis: Redis, sb: Sandbox, failing: run_agent.FailingRefunds
) -> tuple[str, dict[str, Any]]:
    """Pause `failing`'s agent, approve its card, and run its resume job: the request id and card."""
    run_agent.RUNS.clear()
    failing.outputs.clear()
    agent_ = build_agent(failing.approvals, [failing.tool])
    request_id, card = paused(agent_, redis, sb, "run-fails", failing.approvals)
    approve(sb, card)
    wait_for(lambda: relay.sweep(runtime.store, redis), what="the decision published")
    drain(redis, agent.QUEUE)
    assert run_agent.RUNS == [{"amount": "120.00", "currency": "USD", "customer": "cus_ACME"}]
    return request_id, card
