"""LangGraph (`CountersignGate`, `resume_graph`): a scripted model calls the refund tool, the graph pauses
on countersign's request, a reviewer decides on the sandbox card, and the resumed tool runs the approved
(or edited) arguments once; a rejection or an expiry reaches the model as the tool's answer. With
LangGraph's in-memory checkpointer, a new graph object standing in for a restarted process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt.tool_node import TOOL_CALL_ERROR_TEMPLATE, ToolCallRequest
from redis import Redis
from sqlalchemy import text
from sqlalchemy.engine import make_url

from countersign.agent import ApprovalClient
from countersign.integrations.langgraph import (
    CountersignGate,
    original,
    pending,
    resume_graph,
    run_until_decided,
)
from countersign.router import relay
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import TimeoutResult, create_db_engine
from examples.langgraph_refund import GATE, build_graph
from tests.helpers import agent, drain, graph_agent, wait_for
from tests.helpers.builders import age
from tests.helpers.review import REVIEWS, answer_for, approve, card_of, edit, failed_on_card
from tests.helpers.stack import ROOT

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the adapter, not SQL
ASK = {"messages": [("user", "refund 120.00 USD to cus_ACME")]}


class Refunds:
    """The refund tool of the tests: records the arguments of each run."""

    def __init__(self) -> None:
        self.runs: list[dict[str, str]] = []
        self.tool = self._tool()

    def _tool(self) -> BaseTool:
        @tool
        def issue_refund(amount: str, currency: str, customer: str) -> str:
            """Refund `amount` in `currency` to `customer`."""
            self.runs.append({"amount": amount, "currency": currency, "customer": customer})
            return f"refunded {amount} {currency} to {customer}"

        return issue_refund


@pytest.fixture
def refunds() -> Refunds:
    return Refunds()


@pytest.fixture
def checkpointer() -> InMemorySaver:
    return InMemorySaver()


@pytest.fixture
def config(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    yield {"configurable": {"thread_id": f"thread-{request.node.name}"}}


def paused(graph: Any, config: dict[str, Any], redis: Redis, sb: Sandbox) -> tuple[str, dict[str, Any]]:
    """Start the thread; it pauses on the refund's approval request, whose card intake posts."""
    graph.invoke(ASK, config)
    [waiting] = pending(graph, config)
    request_id = waiting.value["countersign_request_id"]
    drain(redis)
    card = card_of(sb, request_id)
    return request_id, card


def tool_answer(result: dict[str, Any]) -> ToolMessage:
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    return answer


@SQLITE
@pytest.mark.parametrize(("review", "ran"), REVIEWS)
def test_the_tool_runs_as_the_reviewer_decided_and_the_model_sees_the_answer(
    client: ApprovalClient,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    refunds: Refunds,
    checkpointer: InMemorySaver,
    config: dict[str, Any],
    review: Callable[[Sandbox, dict[str, Any]], None],
    ran: str | None,
) -> None:
    sb, _ = sandbox
    graph = build_graph(checkpointer, tools=[refunds.tool])
    request_id, card = paused(graph, config, redis, sb)
    assert refunds.runs == []
    review(sb, card)
    result = resume_graph(graph, client.wait(request_id, timeout=10), config)

    assert [run["amount"] for run in refunds.runs] == ([ran] if ran else [])
    said = answer_for(ran)
    assert tool_answer(result).content == said
    assert result["messages"][-1].content == f"The refund tool said: {said}"  # the model's next turn
    assert client.get(request_id).request["idempotency_key"] == (  # type: ignore[index]
        f"langgraph:{config['configurable']['thread_id']}:tools:call_refund"
    )


@SQLITE
def test_an_expired_request_runs_nothing_and_tells_the_model(
    client: ApprovalClient,
    runtime: Runtime,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    refunds: Refunds,
    checkpointer: InMemorySaver,
    config: dict[str, Any],
) -> None:
    graph = build_graph(checkpointer, tools=[refunds.tool])
    request_id, _ = paused(graph, config, redis, sandbox[0])
    age(runtime.store, request_id, expires_at=-1)
    runtime.store.expire([(runtime.store.get(request_id), TimeoutResult.DENY)], runtime.resume_event)  # type: ignore[list-item]

    result = resume_graph(graph, client.wait(request_id, timeout=10), config)
    assert refunds.runs == []
    assert "Nobody approved this call in time" in str(tool_answer(result).content)


@SQLITE
@pytest.mark.parametrize(
    ("copies", "again"),
    [
        pytest.param(1, None, id="delivered-twice"),
        pytest.param(2, "already_executed", id="replayed-into-an-older-checkpoint"),
    ],
)
def test_a_new_process_resumes_the_thread_and_a_repeated_decision_runs_nothing(
    client: ApprovalClient,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    refunds: Refunds,
    config: dict[str, Any],
    copies: int,
    again: str | None,
) -> None:
    """A new graph object (the agent's process started again) resumes the paused thread from the
    checkpointer, the thread found from the request. The decision delivered again finds nothing
    waiting for it (None); replayed into another copy of the paused thread (`copies`: an older
    checkpoint), the call is refused by the grant (`again`), not run again."""
    sb, _ = sandbox
    savers = [InMemorySaver() for _ in range(copies)]  # copies of the paused thread
    request_id, card = paused(build_graph(savers[0], tools=[refunds.tool]), config, redis, sb)
    for saver in savers[1:]:
        build_graph(saver, tools=[refunds.tool]).invoke(ASK, config)  # the same call: the same request
    approve(sb, card)
    decision = client.wait(request_id, timeout=10)

    result = resume_graph(build_graph(savers[0], tools=[refunds.tool]), decision.to_json())
    assert tool_answer(result).content == "refunded 120.00 USD to cus_ACME"
    repeated = resume_graph(build_graph(savers[-1], tools=[refunds.tool]), decision)
    if again is None:
        assert repeated is None
    else:
        assert again in str(tool_answer(repeated).content)
    assert refunds.runs == [{"amount": "120.00", "currency": "USD", "customer": "cus_ACME"}]


@SQLITE
def test_run_until_decided_waits_for_the_decision_and_resumes(
    runtime: Runtime,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    refunds: Refunds,
    checkpointer: InMemorySaver,
    config: dict[str, Any],
) -> None:
    sb, _ = sandbox
    results: list[Any] = []
    graph = build_graph(checkpointer, tools=[refunds.tool])
    agent = threading.Thread(
        target=lambda: results.append(run_until_decided(graph, ASK, config, timeout=20)), daemon=True
    )
    agent.start()
    card = wait_for(lambda: drain(redis) or sb.messages("C0FINANCE"), what="the card")[
        0
    ]  # intake: main thread
    approve(sb, card)
    agent.join(20)
    [result] = results
    assert tool_answer(result).content == "refunded 120.00 USD to cus_ACME"


def test_tools_not_named_run_at_once_and_the_example_gate_names_the_refund() -> None:
    assert GATE.interrupt_on == {"issue_refund": "Refund {amount} {currency} to {customer}"}
    call = ToolCallRequest(
        tool_call={"name": "lookup", "args": {}, "id": "c1"}, tool=None, state={}, runtime=None
    )  # type: ignore[arg-type]
    answer = CountersignGate({"issue_refund": "s"})(
        call, lambda request: ToolMessage("ran", tool_call_id="c1")
    )
    assert isinstance(answer, ToolMessage) and answer.content == "ran"


@SQLITE
def test_a_resume_job_resumes_the_thread_on_the_agents_worker_once(
    runtime: Runtime, redis: Redis, sandbox: tuple[Sandbox, str], bot: str, config: dict[str, Any]
) -> None:
    sb, _ = sandbox
    graph_agent.RUNS.clear()
    request_id, card = paused(graph_agent.graph(), config, redis, sb)
    edit(sb, card, "90")
    wait_for(lambda: relay.sweep(runtime.store, redis), what="the decision published")
    drain(redis, agent.QUEUE)
    assert graph_agent.RUNS == [{"amount": "90.00", "currency": "USD", "customer": "cus_ACME"}]
    assert not pending(graph_agent.graph(), config)

    decision = runtime.store.outbox_event(request_id)
    assert decision is not None and graph_agent.resume(decision.body) is None  # delivered twice
    assert len(graph_agent.RUNS) == 1


def declined_refund(error: Exception, handled: bool) -> BaseTool:
    """The refund tool whose payment provider refuses: it raises `error`, which with
    `handle_tool_error` (a `ToolException`) it answers the model with (an error `ToolMessage`)."""

    @tool
    def issue_refund(amount: str, currency: str, customer: str) -> str:
        """Refund `amount` in `currency` to `customer`."""
        raise error

    issue_refund.handle_tool_error = handled
    return issue_refund


TOOL_ERRORS = [
    pytest.param(
        ToolException("card_declined"), True, False, "card_declined", "ToolFailed: card_declined", id="tool"
    ),
    pytest.param(
        ValueError("card declined\nby the issuer"),
        False,
        True,
        "Error: ValueError('card declined\\nby the issuer')\n Please fix your mistakes.",
        "ValueError: card declined⏎by the issuer",
        id="tool-node",
    ),
    pytest.param(
        ToolException("card_declined"), False, False, None, "ToolException: card_declined", id="raised"
    ),
]
"""What the approved tool raises (`error`); whether the tool answers it (`by_tool`: its own
`handle_tool_error`) or the `ToolNode` does (`by_node`: `handle_tool_errors`, LangGraph's text);
what the model is told (`told`; None: raised out of the graph); the recorded outcome's detail."""


@SQLITE
@pytest.mark.parametrize(("error", "by_tool", "by_node", "told", "detail"), TOOL_ERRORS)
def test_a_tool_error_is_the_executions_failure_with_the_errors_type_and_message(
    client: ApprovalClient,
    runtime: Runtime,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    checkpointer: InMemorySaver,
    config: dict[str, Any],
    error: Exception,
    by_tool: bool,
    by_node: bool,
    told: str | None,
    detail: str,
) -> None:
    """A tool error the model is told (an error `ToolMessage` through the `ToolNode`) or that leaves
    the graph is the execution's failure, recorded (the outcome row, and the card) on one line as
    the error's type and message: recovered from LangGraph's text (`ToolNode` writes the error's
    `repr`); the tool's own answer does not name it (`ToolFailed`)."""
    sb, _ = sandbox
    tools = [declined_refund(error, handled=by_tool)]
    graph = build_graph(checkpointer, tools=tools, handle_tool_errors=by_node)
    request_id, card = paused(graph, config, redis, sb)
    approve(sb, card)
    decision = client.wait(request_id, timeout=10)
    if told is None:
        with pytest.raises(type(error), match=str(error)):
            resume_graph(graph, decision, config)
    else:
        answer = tool_answer(resume_graph(graph, decision, config))
        assert (answer.content, answer.status) == (told, "error")
    failed_on_card(runtime.store, redis, sb, request_id, card, detail)


class PaymentError(Exception):
    """An error whose argument is no Python literal in its `repr`."""


@pytest.mark.parametrize(
    ("raised", "recorded"),
    [
        (ValueError("declined", 402), ("ValueError", "('declined', 402)")),
        (ValueError(), ("ValueError", "")),
        (PaymentError(object), ("PaymentError", "<class 'object'>")),
    ],
)
def test_the_error_a_tool_node_answered_with_is_read_back_as_str_gives_it(
    raised: Exception, recorded: tuple[str, str]
) -> None:
    """`original` reads the error's type and message back from `ToolNode`'s text, as `str` gives the
    message; a text of any other shape is `ToolFailed`'s."""
    assert original(TOOL_CALL_ERROR_TEMPLATE.format(error=repr(raised))) == recorded
    assert original("card_declined") == ("ToolFailed", "card_declined")


@pytest.fixture
def checkpoint_url(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL database of its own for LangGraph's checkpoint tables, dropped afterwards."""
    admin = create_db_engine(postgres_url).execution_options(isolation_level="AUTOCOMMIT")
    name = f"langgraph_checkpoints_{os.getpid()}"
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def example(cwd: Path, *args: str) -> list[str]:
    """`python -m examples.langgraph_refund ARGS` in a process of its own, with the tests' settings."""
    done = subprocess.run(
        [sys.executable, "-m", "examples.langgraph_refund", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@SQLITE
def test_another_process_resumes_the_thread_from_langgraphs_postgresql_checkpointer_once(
    env: dict[str, str],
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
    checkpoint_url: str,
    tmp_path: Path,
) -> None:
    sb, _ = sandbox
    [asked] = example(tmp_path, "120.00", "--checkpoint-url", checkpoint_url, "--no-wait")  # then it exits
    request_id = asked.rsplit(" ", 1)[1]
    drain(redis)
    card = card_of(sb, request_id)
    edit(sb, card, "80")

    resumed = example(tmp_path, "--resume", request_id, "--checkpoint-url", checkpoint_url)
    assert resumed[1:] == [
        'REFUND EXECUTED: {"amount": "80.00", "currency": "USD", "customer": "cus_ACME"}',
        "The refund tool said: refunded 80.00 USD to cus_ACME",
    ]
    again = example(tmp_path, "--resume", request_id, "--checkpoint-url", checkpoint_url)  # delivered twice
    assert again[1:] == ["already resumed: nothing waits for this decision"]
