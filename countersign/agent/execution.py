"""The agent side of a decision: run exactly what was approved, once, and report the outcome.

    from countersign import approved_action

    @approved_action
    def resume(payload):            # the RQ resume job; runs only for a valid, unexpired grant
        payments.refund(**payload)

`execute_approved` refuses, with `ExecutionRefused` and an audit event, when the decision was not
an approval, its grant's signature is wrong, the payload differs from the grant's hash, the grant
has expired (database clock), or it already ran. Single use is one conditional UPDATE in the store,
so two workers racing on the same decision run `fn` once. The outcome ("executed ✓" / "failed ✗"),
or the refusal ("Not executed: the grant expired at …"), is recorded in the audit trail and shown
on the card (the router worker rewrites it). No refusal can change when the same decision is tried
again, so `approved_action` ends the resume job on one instead of raising into RQ's retries; and an
action that started is never run again by a retry: the job that claimed it has no retry left, and
what `fn` raised is its `failed` outcome.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from rq import get_current_job

from ..connections import Connections, current
from ..decision import Decision
from ..exceptions import ExecutionRefused
from ..grant import verify_grant
from ..router.jobs import request_refresh
from ..store import may_run

log = logging.getLogger(__name__)
T = TypeVar("T")
AGENT = "agent"
MAX_DETAIL = 2000  # characters of an outcome's detail kept in the audit trail and shown on the card


class ActionFailed(Exception):
    """What `fn` raises for an action that failed where its framework caught the error (e.g. a tool
    error that LangGraph's `ToolNode` answered the model with): `execute_approved` records the
    outcome as `<kind>: <message>`, the original error's type name and message, not as this class."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def execute_approved(
    decision: dict[str, Any] | Decision,
    fn: Callable[[dict[str, Any]], T],
    runtime: Connections | None = None,
) -> T:
    """Run `fn(decision["payload"])` if, and only if, the decision's grant allows it; once.

    Needs `COUNTERSIGN_SECRET`, `DATABASE_URL` and `REDIS_URL` (from the environment unless a
    `runtime` is given). Returns what `fn` returns. Raises `ExecutionRefused` (`why`:
    `malformed_decision`, `not_approved`, `bad_signature`, `payload_mismatch`, `grant_expired`,
    `already_executed`, `already_failed`, `outcome_unknown`: a run claimed before never reported
    its outcome, `unknown_request`) before running anything, audited as
    `execution_refused` and shown on the card (`malformed_decision` names no request to do it
    for); re-raises what `fn` raises, after recording the failure as `<type>: <message>` (for an
    `ActionFailed`, its `kind`), and, in an RQ job, with no retry left (`_no_retry`: the action ran
    once; a job calling it is not retried once it claimed).
    """
    runtime = runtime or current()
    runtime.settings.require("COUNTERSIGN_SECRET", needed_by="execute_approved in the agent's worker")
    if isinstance(decision, Decision):
        decision = decision.to_json()
    if not isinstance(decision, dict):
        raise ExecutionRefused("?", "malformed_decision")
    request_id = str(decision.get("request_id"))
    claim_execution(decision, runtime)
    _no_retry()
    try:
        result = fn(decision["payload"])
    except Exception as exc:
        kind = exc.kind if isinstance(exc, ActionFailed) else type(exc).__name__
        report_outcome(request_id, False, f"{kind}: {exc}", runtime)
        raise
    report_outcome(request_id, True, None if result is None else str(result), runtime)
    return result


def claim_execution(decision: dict[str, Any], runtime: Connections) -> None:
    """Verify the decision's grant, then claim its single execution (`Store.claim_execution`:
    audited `execution_started`), and queue the card's rewrite either way (it says the action
    started, or why it did not). Raises `ExecutionRefused`, audited as `execution_refused` with its
    `why` (by the store when the claim is refused). `execute_approved` and the HTTP API's
    `POST /v1/requests/{id}/execution` both claim through it."""
    request_id = str(decision.get("request_id"))
    try:
        _claim(runtime, request_id, decision)
    except ExecutionRefused:
        _refresh_card(runtime, request_id)  # the card says why the action did not run
        raise
    _refresh_card(runtime, request_id)  # the card says the action started, until its outcome comes


def _claim(runtime: Connections, request_id: str, decision: dict[str, Any]) -> None:
    """Verify the decision's grant, then claim its single execution. Raises `ExecutionRefused`,
    audited as `execution_refused` with its `why` (by the store when the claim is refused). A
    grant refused for a request the store does not hold, or holds without an approval (still
    pending, rejected, expired with `deny`), is refused for that (`unknown_request`,
    `not_approved`): a decision claimed before its approval has no grant, and is not forged."""
    try:
        verify_grant(runtime.settings.COUNTERSIGN_SECRET or "", decision)
    except ExecutionRefused as refused:
        why = stored_refusal(runtime, request_id) or refused.why
        runtime.store.record(request_id, "execution_refused", AGENT, why=why)
        raise ExecutionRefused(request_id, why) from None
    not_executable = runtime.store.claim_execution(request_id, AGENT)
    if not_executable is not None:
        raise ExecutionRefused(request_id, not_executable.why)


def stored_refusal(runtime: Connections, request_id: str) -> str | None:
    """`unknown_request` or `not_approved` when the stored request has nothing to run (whatever a
    decision claims), else None: the reason a grant's refusal is given for such a request."""
    stored = runtime.store.get(request_id)
    if stored is None:
        return "unknown_request"
    return "not_approved" if stored.approved_payload is None else None


def _no_retry() -> None:
    """Once the execution is claimed, the RQ job running it (if any) is not retried, whatever
    happens next: the action has started, and an action that raised is the `failed` outcome, not
    a job to run again. RQ decides a retry on the job object its worker performs, which
    `get_current_job` returns (`Worker.handle_job_failure` reads `retries_left`): RQ 3 keeps it in a
    context variable, so a claim in a thread started with the job's context (`asyncio.to_thread`,
    as `integrations.openai_agents` does) finds it, and one in a thread without it would not. A worker killed
    in the action loses this: its abandoned job is retried, and that retry is refused
    (`outcome_unknown`)."""
    job = get_current_job()
    if job is not None:
        job.retries_left = 0


def report_outcome(
    request_id: str, ok: bool, detail: str | None = None, runtime: Connections | None = None
) -> bool:
    """Record how an approved action went (`ok`, with an optional `detail`), once, and queue the card
    update. For agents that execute elsewhere than `execute_approved`. True if recorded now."""
    runtime = runtime or current()
    detail = detail[:MAX_DETAIL] if detail else None
    if not runtime.store.record_outcome(request_id, ok, detail, AGENT):
        log.warning("request %s: outcome already recorded or request not approved", request_id)
        return False
    _refresh_card(runtime, request_id)
    return True


def _refresh_card(runtime: Connections, request_id: str) -> None:
    request_refresh(runtime.redis, request_id)


def approved_action(fn: Callable[[dict[str, Any]], T]) -> Callable[[dict[str, Any]], T | None]:
    """Decorator: turn `fn(payload)` into a resume function `resume(decision)`.

    Decisions that let the payload run (approved, or expired with `on_timeout: allow`) go through
    `execute_approved`; the others run nothing and return None (logged). So does a decision
    `execute_approved` refuses (audited, and on the card): the same decision would be refused
    again, so the job ends there, and RQ, which retries a job only when it raises, schedules no
    retry (https://python-rq.org/docs/exceptions/, "Retrying Failed Jobs"). What `fn` raises is
    raised, the job then left with no retry (`execute_approved`): it is the action's `failed`
    outcome.
    """

    @functools.wraps(fn)
    def resume(decision: dict[str, Any]) -> T | None:
        if isinstance(decision, dict) and not may_run(
            decision.get("outcome"), decision.get("timeout_result")
        ):
            log.info("request %s was %s; nothing to run", decision.get("request_id"), decision.get("outcome"))
            return None
        try:
            return execute_approved(decision, fn)
        except ExecutionRefused as refused:
            log.warning("%s; %s", refused, refused.consequence)
            return None

    return resume
