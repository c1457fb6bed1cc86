"""Acked but not recorded: when the database refuses a click's or a submit's write, the reviewer is
told in Slack that nothing changed, and the next try, once the database is back, counts."""

from __future__ import annotations

from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.cards import APPROVE_ACTION, REASON_BLOCK, REJECT_ACTION
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import wait_for
from tests.helpers.builders import post_card, status
from tests.helpers.faults import table_gone
from tests.helpers.modals import open_view, raw_submit

NOT_RECORDED = "could not record your action"


def told(sb: Sandbox, user: str) -> list[str]:
    return [e["text"] for e in sb.ephemerals(user) if NOT_RECORDED in e["text"]]


def test_an_approval_the_database_refuses_is_answered_and_a_retry_counts(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    with table_gone(store, "outbox"):  # the decision's write
        assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")[0] == 200
        wait_for(lambda: told(sb, "U0LEAD"), what="the reviewer to be told")
    assert status(store, request_id) == "pending"
    assert "vote" not in [e.event for e in store.audit_trail(request_id)]
    assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")[0] == 200
    wait_for(lambda: status(store, request_id) == "approved", what="the second click to count")


def test_a_rejection_the_database_cannot_read_gets_an_inline_error_and_changes_nothing(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    view = open_view(sb, card, REJECT_ACTION, "U0LEAD", REASON_BLOCK)
    with table_gone(store, "approval_requests"):
        answer = raw_submit(sb, view, "U0LEAD", {REASON_BLOCK: "too much"})
    assert answer["response_action"] == "errors" and NOT_RECORDED in answer["errors"][REASON_BLOCK]
    assert status(store, request_id) == "pending"


def test_a_rejection_whose_write_the_database_refuses_is_answered_in_a_direct_message(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """The modal closed (its read worked), then the vote's write failed: a submit has no channel to
    answer in, so the reviewer gets a direct message from the app."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    view = open_view(sb, card, REJECT_ACTION, "U0LEAD", REASON_BLOCK)
    with table_gone(store, "outbox"):  # the decision's write
        assert raw_submit(sb, view, "U0LEAD", {REASON_BLOCK: "too much"}) == {}
        wait_for(lambda: any(NOT_RECORDED in m["text"] for m in sb.messages()), what="the direct message")
    assert status(store, request_id) == "pending"
