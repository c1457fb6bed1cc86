"""Requests for the tests: an agent's request body, a stored request, one built in memory, a posted
card; and reading back what became of them.

- `refund`: the JSON an agent sends (the README's refund), with overrides;
- `escalating_policy`: a refund policy whose first level (U0ALICE) escalates to a second;
- `post_card`: send it through the client and intake, and return the card the sandbox shows;
- `decided_card`: the same, then decided by a reviewer;
- `open_view`: press a card's button that opens a modal, and wait for the modal's real content;
- `new_request`: a pending request written straight to the store (no policy, no card);
- `request`: an `ApprovalRequest` built in memory and never stored, for rendering and edit checks;
- `buttons`, `decidable`: a card's buttons, and whether it still offers a decision;
- `resume`: the outbox row a decision writes, as the router writes it;
- `age`: move a stored request's deadlines, as if the clock had run on;
- `card_at`, `refresh_due`: a card as the sandbox shows it, and whether its rewrite is still owed;
- `audited`: an audit event's detail, once written.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis
from sqlalchemy import update
from ulid import ULID

from countersign.agent import ApprovalClient
from countersign.decision import decision_of
from countersign.router.cards import APPROVE_ACTION, EDIT_ACTION, REJECT_ACTION
from countersign.router.jobs import resume_job_id
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import ApprovalRequest, ResumeEvent, Rules, Store
from countersign.store.models import utcnow_plus

from . import agent, drain, wait_for


def refund(**overrides: Any) -> dict[str, Any]:
    """The request body of the README's refund (resumed by the test agent's `record`), with `overrides`."""
    request = {
        "action": "issue_refund",
        "payload": {"amount": "120.00", "currency": "USD"},
        "summary": "Refund ACME",
        "reason": "duplicate charge",
        "requester": "refund-agent",
        "run_id": "r1",
        "step": "s1",
        "resume": {"queue": agent.QUEUE, "func": agent.FUNC},
    }
    return {**request, **overrides}


def escalating_policy(version: int, next_approvers: str) -> str:
    """A policy file whose refunds (an editable `amount`) go to U0ALICE in C0FINANCE for 4 h, then
    escalate to `next_approvers` (a YAML list of user ids, e.g. "[U0LEAD, U0BOB]") in C0FINLEADS."""
    return f"""\
version: {version}
defaults:
  channel: C0APPROVALS
  approvers: {{users: [U0LEAD]}}
actions:
  issue_refund:
    channel: C0FINANCE
    approvers: {{users: [U0ALICE]}}
    editable: {{amount: {{type: decimal, places: 2, min: "0.01"}}}}
    timeout: 4h
    on_timeout: escalate
    escalate:
      - {{channel: C0FINLEADS, approvers: {{users: {next_approvers}}}, timeout: 24h, on_timeout: deny}}
"""


CONFLICTING = pytest.mark.parametrize(
    "other",
    [{"payload": {"amount": "999.00", "currency": "USD"}}, {"action": "send_email"}],
    ids=["another payload", "another action class"],
)
"""Parametrizes `other`: overrides of `refund()` that its idempotency key (run and step) must refuse."""


def post_card(
    client: ApprovalClient, redis: Redis, sb: Sandbox, channel: str = "C0FINANCE", **overrides: Any
) -> tuple[str, dict[str, Any]]:
    """Request (with `overrides`), run intake, and return the request id and its one card in `channel`."""
    request_id = client.request(refund(**overrides))
    drain(redis)
    cards = [m for m in sb.messages(channel) if request_id in str(m["blocks"])]
    assert len(cards) == 1, cards
    return request_id, cards[0]


def decided_card(
    client: ApprovalClient,
    redis: Redis,
    runtime: Runtime,
    sb: Sandbox,
    func: str = agent.EXECUTE_FUNC,
    vote: str = "approved",
    why: str = "wrong customer",
    **overrides: Any,
) -> tuple[str, dict[str, Any]]:
    """A refund (with `overrides`) resumed by `func` on the test agent's queue (default: its
    `execute`, through `approved_action`), whose card is posted and which U0LEAD has decided by
    `vote` (with reason `why` when rejected); returns its id and card."""
    resume = {"queue": agent.QUEUE, "func": func}
    request_id, card = post_card(client, redis, sb, resume=resume, **overrides)
    reason = why if vote == "rejected" else None
    runtime.store.vote(
        request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, vote, runtime.resume_event, reason=reason
    )
    return request_id, card


def status(store: Store, request_id: str) -> str:
    """The stored request's status (it must exist)."""
    row = store.get(request_id)
    assert row is not None
    return row.status


def events(store: Store, request_id: str) -> list[str]:
    """The names of the request's audit events, in order."""
    return [e.event for e in store.audit_trail(request_id)]


def edited_card(sb: Sandbox, ts: str) -> dict[str, Any] | None:
    """The card with this `ts` once it has been rewritten, else None."""
    return next((m for m in sb.messages() if m["ts"] == ts and m["edited"]), None)


def audited(store: Store, request_id: str, name: str, nth: int = 0) -> dict[str, Any]:
    """The detail of the request's `nth` audit event called `name`, once there (waited for)."""
    return wait_for(
        lambda: ([e.detail for e in store.audit_trail(request_id) if e.event == name][nth:] or [None])[0],
        what=f"audit event {name} #{nth}",
    )


def card_at(sb: Sandbox, ts: str, channel: str = "C0FINANCE") -> dict[str, Any]:
    """The message at `ts` in `channel` as the sandbox shows it now."""
    return next(m for m in sb.messages(channel) if m["ts"] == ts)


def refresh_due(store: Store, request_id: str) -> bool:
    """True while the card sweep holds a rewrite of the request's card (`card_refresh_due_at`)."""
    row = store.get(request_id)
    return row is not None and row.card_refresh_due_at is not None


def buttons(message: dict[str, Any]) -> list[str]:
    """The `action_id`s of a card's buttons, in order."""
    return [e["action_id"] for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]


def decidable(message: dict[str, Any]) -> bool:
    """The card still offers Approve, Reject or Edit (a decided card keeps only Details)."""
    return bool({APPROVE_ACTION, REJECT_ACTION, EDIT_ACTION} & set(buttons(message)))


def resume(row: Any) -> ResumeEvent:
    """The outbox row of a decided request, as the router writes it (grant signed with a test secret)."""
    return ResumeEvent(resume_job_id(row.id), decision_of(row, "test-secret").to_json())


def new_request(
    store: Store,
    request_id: str | None = None,
    key: str | None = None,
    rules: Rules | None = None,
    **columns: Any,
) -> Any:
    """A stored pending request (a fresh id and idempotency key unless given; `rules` default to a
    60-second grant), with other `columns` (e.g. `required_approvals=2`) as given."""
    request_id = request_id or str(ULID())
    row, created = store.create(
        {
            "id": request_id,
            "idempotency_key": key or request_id,
            "action": "issue_refund",
            "payload": {"amount": "5.00"},
            "payload_sha256": "a" * 64,
            "summary": "s",
            "reason": None,
            "context": None,
            "requester": "agent",
            "on_behalf_of": None,
            "run_id": "r",
            "step": "s",
            "confidence": None,
            "resume_queue": "q",
            "resume_func": "m.f",
            "channel": "C0X",
            "approvers": ["U0LEAD"],
            "policy_version": 1,
            "policy_sha256": "b" * 64,
            "rules": rules if rules is not None else Rules(grant_ttl_seconds=60),
            **columns,
        }
    )
    assert created
    return row


def request(**overrides: Any) -> ApprovalRequest:
    """A pending `ApprovalRequest` built in memory (never stored), with `overrides`; `rules` may be
    given in its stored JSON form."""
    values: dict[str, Any] = {
        "id": "01J00000000000000000000000",
        "idempotency_key": "a:r:s",
        "action": "issue_refund",
        "payload": {"amount": "512.40", "currency": "USD"},
        "payload_sha256": "0" * 64,
        "summary": "Refund ACME",
        "reason": "duplicate charge",
        "context": {"ticket": 42},
        "requester": "refund-agent",
        "on_behalf_of": None,
        "confidence": 0.8,
        "channel": "C0FINANCE",
        "approvers": ["U0LEAD"],
        "policy_version": 1,
        "policy_sha256": "1" * 64,
        "status": "pending",
        "rules": {"editable": {"amount": {"type": "decimal"}}},
        "approved_payload": None,
        "edits": None,
        "decided_by": None,
        "decided_at": None,
        "execution": None,
        "decision_reason": None,
        "required_approvals": 1,
        "level": 0,
        "expires_at": None,
        "review_reason": "the policy reviews every issue_refund request",
        "timeout_result": None,
    }
    values.update(overrides)
    if isinstance(values["rules"], dict):  # the stored JSON form
        values["rules"] = Rules.model_validate(values["rules"])
    return ApprovalRequest(**values)


def age(store: Store, request_id: str, **columns_seconds: int) -> None:
    """Move a request's deadlines `seconds` from the database's now (negative: already past)."""
    with store.engine.begin() as connection:
        values = {column: utcnow_plus(seconds) for column, seconds in columns_seconds.items()}
        connection.execute(update(ApprovalRequest).where(ApprovalRequest.id == request_id).values(**values))
