"""A reviewer deciding a card through the sandbox (real clicks and modal submits to the bot): approve
as lee (U0LEAD), edit the amount as lee, reject as alice (U0ALICE) with a reason; and what the
decided card says when the action failed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis import Redis

from countersign.router.cards import APPROVE_ACTION, EDIT_ACTION, REASON_BLOCK, REJECT_ACTION
from countersign.sandbox import Sandbox
from countersign.store import Store

from . import drain
from .builders import edited_card
from .modals import open_view

REJECT_REASON = "wrong customer"


def card_of(sb: Sandbox, request_id: str) -> dict[str, Any]:
    """The one card of `request_id` in #C0FINANCE (where the tests' policy sends refunds)."""
    [card] = [m for m in sb.messages("C0FINANCE") if request_id in str(m["blocks"])]
    return card


def approve(sb: Sandbox, card: dict[str, Any]) -> None:
    """Press Approve on `card` as U0LEAD."""
    assert sb.click(card["channel"], card["ts"], APPROVE_ACTION, "U0LEAD")[0] == 200


def edit(sb: Sandbox, card: dict[str, Any], amount: str = "400") -> None:
    """Edit `card`'s amount to `amount` as U0LEAD (which approves it)."""
    view = open_view(sb, card, EDIT_ACTION, "U0LEAD", "edit-amount")
    assert sb.submit_view(view["id"], "U0LEAD", {"edit-amount": amount})[0] == 200


def reject(sb: Sandbox, card: dict[str, Any]) -> None:
    """Reject `card` as U0ALICE, giving `REJECT_REASON`."""
    view = open_view(sb, card, REJECT_ACTION, "U0ALICE", REASON_BLOCK)
    assert sb.submit_view(view["id"], "U0ALICE", {REASON_BLOCK: REJECT_REASON})[0] == 200


def edit_to_100(sb: Sandbox, card: dict[str, Any]) -> None:
    """Edit `card`'s amount to 100 as U0LEAD (which approves it)."""
    edit(sb, card, "100")


def failed_on_card(
    store: Store, redis: Redis, sb: Sandbox, request_id: str, card: dict[str, Any], detail: str
) -> None:
    """The execution of `request_id` is recorded failed with `detail`, and its card, once the router
    rewrote it, says so ("Failed ✗ <detail>"), not that it was executed."""
    row = store.get(request_id)
    assert row is not None
    assert (row.execution, row.execution_detail) == ("failed", detail)
    drain(redis)  # the router rewrites the card
    shown = edited_card(sb, card["ts"])
    assert shown is not None
    blocks = json.dumps(shown["blocks"], ensure_ascii=False)
    assert f"Failed ✗ {detail}" in blocks and "Executed" not in blocks


REVIEWS = [
    pytest.param(approve, "120.00", id="approve"),
    pytest.param(edit_to_100, "100.00", id="edit"),
    pytest.param(reject, None, id="reject"),
]
"""Each way a reviewer decides a refund of 120.00 (`review`), with the amount that may run (`ran`):
None for the rejection."""


def answer_for(ran: str | None) -> str:
    """What a gated refund tool of the examples answers the model for a refund of `ran` to cus_ACME
    (None: rejected, with `REJECT_REASON`)."""
    if ran:
        return f"refunded {ran} USD to cus_ACME"
    return f"A reviewer rejected this call: {REJECT_REASON}. It was not run."
