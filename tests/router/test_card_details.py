"""Every card whose text can point at Details ("… N more lines: see Details", "… N more fields: see
Details") offers Details, in every state a card is rewritten to: pending, compact, decided (approved,
rejected, expired), with an execution outcome, a refusal or a resume problem, and escalated away.
Driven as a reviewer would where a state needs the router: signed clicks through the sandbox to the
bot, on the cards the sandbox holds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import cards, timeouts
from countersign.router.cards import DETAILS_ACTION
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import ApprovalRequest
from tests.helpers.builders import age, buttons, card_at, decidable, post_card, request
from tests.helpers.modals import open_view

REASON = "\n".join(f"line {n}: the customer was charged twice" for n in range(1, 21))  # 20 lines
WIDE = {f"field_{n:02}": str(n) for n in range(1, 15)}  # 14 fields: the card folds the last 5
VOTER = [{"slack_user_id": "U0LEAD", "name": "lee"}]
AT = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def long_request(**overrides: Any) -> ApprovalRequest:
    """A request whose card cannot show all of it: a 20-line reason (agent's and reviewer's) and 14
    payload fields."""
    values: dict[str, Any] = {"reason": REASON, "payload": WIDE, "decision_reason": REASON}
    return request(**{**values, **overrides})


def points_at_details(card: cards.Card) -> bool:
    """The card's text says that Details has more."""
    return "see Details" in json.dumps(card.blocks, ensure_ascii=False)


DECIDED = {"decided_by": VOTER, "decided_at": AT}
STATES = {
    "pending": lambda: cards.request_card(long_request(decision_reason=None)),
    "compact": lambda: cards.compact_card(long_request(decision_reason=None)),
    "approved": lambda: cards.decided_card(long_request(status="approved", **DECIDED)),
    "rejected": lambda: cards.decided_card(long_request(status="rejected", **DECIDED)),
    "expired": lambda: cards.decided_card(long_request(status="expired", timeout_result="deny")),
    "executed": lambda: cards.decided_card(
        long_request(status="approved", execution="executed", executed_at=AT, **DECIDED)
    ),
    "failed": lambda: cards.decided_card(
        long_request(status="approved", execution="failed", execution_detail="card declined", **DECIDED)
    ),
    "refused": lambda: cards.decided_card(
        long_request(status="approved", approved_payload=WIDE, **DECIDED), refused="grant_expired"
    ),
    "resume_failed": lambda: cards.decided_card(
        long_request(status="approved", resume_func="agent.resume", **DECIDED),
        problem={"event": "resume_failed", "error": "ValueError: boom", "retries_left": 0},
    ),
    "escalated": lambda: cards.escalated_card(long_request(expires_at=AT), "C0FINLEADS"),
}


@pytest.mark.parametrize("state", STATES)
def test_every_card_that_points_at_details_offers_details(state: str) -> None:
    """The compact card shows the key fields alone, and everything else is in Details; every other
    card shows the body, which for this request folds its reason and fields."""
    card = STATES[state]()
    assert points_at_details(card) == (state != "compact")
    assert DETAILS_ACTION in buttons(card.message())
    elements = [e for b in card.blocks if b["type"] == "actions" for e in b["elements"]]
    assert [e["value"] for e in elements if e["action_id"] == DETAILS_ACTION] == [long_request().id]


def test_an_escalated_away_card_offers_details_which_show_what_it_folds(
    engine_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """Level 0's card, rewritten when the request escalates to #C0FINLEADS, still shows the first 8
    lines of the reason and "… 12 more lines: see Details": its one button is Details, and the modal
    it opens (to level 0's approver, or anyone who sees the card) has all 20 lines."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb, reason=REASON)
    age(runtime.store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1: #C0FINLEADS; level 0's card is rewritten
    old = card_at(sb, card["ts"])
    assert "escalated to <#C0FINLEADS>" in json.dumps(old["blocks"])
    assert "… 12 more lines: see Details" in json.dumps(old["blocks"], ensure_ascii=False)
    assert not decidable(old) and buttons(old) == [DETAILS_ACTION]
    view = open_view(sb, old, DETAILS_ACTION, "U0ALICE", None)["view"]
    shown = "\n".join(b["text"]["text"] for b in view["blocks"] if "text" in b)
    assert f"Reason: {REASON}" in shown
