"""What the reviewer was shown, in each decision's own audit event, over real HTTP: the card's
message a click carries, the Home view, or the modal a submit carries (`bot.payload.shown`), hashed
by the one function that hashes the posted card (`cards.shown`), so the decision matches the
`card_posted` event of the card it was made on."""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import cards
from countersign.router.cards import APPROVE_ACTION, EDIT_ACTION, REASON_BLOCK, REJECT_ACTION
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import wait_for
from tests.helpers.builders import post_card


def _event(store: Store, request_id: str, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: next((e.detail for e in store.audit_trail(request_id) if e.event == name), None),
        what=f"the {name} audit event",
    )


def _posted(store: Store, request_id: str) -> dict[str, Any]:
    posted = _event(store, request_id, "card_posted")
    return {"text": posted["text"], "blocks_sha256": posted["blocks_sha256"]}


def _modal(sb: Sandbox, user: str, marker: str) -> dict[str, Any]:
    return wait_for(
        lambda: next((v for v in sb.views(user) if marker in json.dumps(v["view"]["blocks"])), None),
        what=f"the modal with {marker}",
    )


def test_a_click_on_the_card_audits_the_card_it_was_made_on(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)

    assert sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD") == (200, "")

    shown = _event(runtime.store, request_id, "approved")["shown"]
    assert shown == _posted(runtime.store, request_id) == cards.shown(card["text"], card["blocks"])
    assert _event(runtime.store, request_id, "vote")["shown"] == shown
    assert "Refund ACME" in str(shown["text"])


def test_a_click_on_the_home_tab_audits_the_home_view_it_was_made_on(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    assert sb.open_home("U0ALICE") == (200, "")
    view = wait_for(lambda: (v := sb.home("U0ALICE")) and request_id in json.dumps(v) and v, what="the Home")

    assert sb.click_home("U0ALICE", f"decide-{request_id}", APPROVE_ACTION) == (200, "")

    decided = _event(runtime.store, request_id, "approved")
    assert decided["where"] == "home"
    assert decided["shown"] == {**cards.shown(None, view["blocks"]), "view": "home"}
    assert decided["shown"] != _posted(runtime.store, request_id)


def test_an_edit_submit_audits_the_modal_it_was_made_in(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)

    assert sb.click("C0FINANCE", card["ts"], EDIT_ACTION, "U0LEAD")[0] == 200
    form = _modal(sb, "U0LEAD", '"amount"')
    block = next(b["block_id"] for b in form["view"]["blocks"] if b["type"] == "input")
    assert sb.submit_view(form["id"], "U0LEAD", {block: "100.00"})[0] == 200

    decided = _event(runtime.store, request_id, "approved")
    assert decided["edits"] and decided["where"] == "card"
    assert decided["shown"] == {**cards.shown(None, form["view"]["blocks"]), "view": "modal"}


def test_a_reject_submit_audits_the_modal_it_was_made_in(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)

    assert sb.click("C0FINANCE", card["ts"], REJECT_ACTION, "U0ALICE")[0] == 200
    modal = _modal(sb, "U0ALICE", REASON_BLOCK)
    assert sb.submit_view(modal["id"], "U0ALICE", {REASON_BLOCK: "wrong customer"})[0] == 200

    for name in ("rejected", "vote"):
        shown = _event(runtime.store, request_id, name)["shown"]
        assert shown == {**cards.shown(None, modal["view"]["blocks"]), "view": "modal"}
