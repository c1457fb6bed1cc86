"""What the reviewer was shown, in each decision's own audit event, over real HTTP: the card's
message a click carries, or the request's own entry in the Home view it carries (`bot.payload.shown`),
kept through the Reject / Edit modal opened there (`bot.payload.metadata`), derived by the one
function that writes `card_posted` (`cards.shown_in`), so the decision matches the card version, or
the published Home entry, it was made on."""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from countersign.agent import ApprovalClient
from countersign.bot import payload
from countersign.router import cards
from countersign.router.cards import APPROVE_ACTION, EDIT_ACTION, REASON_BLOCK, REJECT_ACTION
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import wait_for
from tests.helpers.builders import audited, new_request, post_card
from tests.helpers.modals import opened_home


def _posted(store: Store, request_id: str) -> dict[str, Any]:
    posted = audited(store, request_id, "card_posted")
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

    shown = audited(runtime.store, request_id, "approved")["shown"]
    assert shown == _posted(runtime.store, request_id) == cards.shown(card["text"], card["blocks"])
    assert audited(runtime.store, request_id, "vote")["shown"] == shown
    assert "Refund ACME" in str(shown["text"])


def _entry(view: dict[str, Any], request_id: str) -> list[dict[str, Any]]:
    """The published blocks of one request's entry: those whose block_id names it."""
    return [b for b in view["blocks"] if request_id in str(b.get("block_id"))]


def test_a_click_on_the_home_tab_audits_that_request_s_entry_alone(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    alone = _entry(opened_home(sb, "U0ALICE", request_id), request_id)
    rules = runtime.store.get(request_id).rules  # type: ignore[union-attr]
    other_id = new_request(runtime.store, approvers=["U0ALICE"], rules=rules, summary="Refund GLOBEX").id
    view = opened_home(sb, "U0ALICE", request_id, other_id)

    assert sb.click_home("U0ALICE", f"decide-{request_id}", APPROVE_ACTION) == (200, "")

    decided = audited(runtime.store, request_id, "approved")
    shown = decided["shown"]
    assert decided["where"] == "home" and shown["view"] == "home"
    assert "Refund ACME" in str(shown["text"]) and "amount: 120.00" in str(shown["text"])
    assert str(shown["text"]).startswith("Refund ACME\n")
    assert "GLOBEX" not in str(shown["text"]) and other_id not in str(shown["text"])
    assert len(alone) == 3 and _entry(view, request_id) == alone
    assert shown["blocks_sha256"] == cards.shown(None, alone)["blocks_sha256"]
    assert shown["blocks_sha256"] != cards.shown(None, view["blocks"])["blocks_sha256"]
    assert audited(runtime.store, request_id, "vote")["shown"] == shown


def test_a_reject_opened_from_home_audits_the_home_entry_clicked(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    entry = _entry(opened_home(sb, "U0ALICE", request_id), request_id)

    assert sb.click_home("U0ALICE", f"decide-{request_id}", REJECT_ACTION)[0] == 200
    modal = _modal(sb, "U0ALICE", REASON_BLOCK)
    assert sb.submit_view(modal["id"], "U0ALICE", {REASON_BLOCK: "wrong customer"})[0] == 200

    decided = audited(runtime.store, request_id, "rejected")
    assert decided["where"] == "home"
    assert decided["shown"]["blocks_sha256"] == cards.shown(None, entry)["blocks_sha256"]
    assert "Refund ACME" in str(decided["shown"]["text"]) and decided["shown"]["view"] == "home"


def test_an_edit_submit_audits_the_card_it_was_opened_from(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)

    assert sb.click("C0FINANCE", card["ts"], EDIT_ACTION, "U0LEAD")[0] == 200
    form = _modal(sb, "U0LEAD", '"amount"')
    block = next(b["block_id"] for b in form["view"]["blocks"] if b["type"] == "input")
    assert sb.submit_view(form["id"], "U0LEAD", {block: "100.00"})[0] == 200

    decided = audited(runtime.store, request_id, "approved")
    assert decided["edits"] and decided["where"] == "card"
    assert decided["shown"] == _posted(runtime.store, request_id) == cards.shown(card["text"], card["blocks"])


def test_a_reject_submit_audits_the_card_it_was_opened_from(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)

    assert sb.click("C0FINANCE", card["ts"], REJECT_ACTION, "U0ALICE")[0] == 200
    modal = _modal(sb, "U0ALICE", REASON_BLOCK)
    assert sb.submit_view(modal["id"], "U0ALICE", {REASON_BLOCK: "wrong customer"})[0] == 200

    for name in ("rejected", "vote"):
        assert audited(runtime.store, request_id, name)["shown"] == _posted(runtime.store, request_id)


def test_a_long_card_text_is_cut_to_fit_the_modal_metadata_its_hash_whole() -> None:
    seen = {"text": "é<" * 2000, "blocks_sha256": "ab" * 32}

    carried = payload.metadata("01ID", "card", seen)
    submitted = payload.view_submission(
        {"user": {"id": "U0ALICE"}, "view": {"private_metadata": carried, "state": {"values": {}}}}
    )

    assert len(carried) <= payload.MAX_PRIVATE_METADATA and carried.isascii()
    assert submitted.request_id == "01ID" and submitted.where == "card"
    assert submitted.shown is not None and submitted.shown["blocks_sha256"] == seen["blocks_sha256"]
    assert str(seen["text"]).startswith(str(submitted.shown["text"])[:-1])
    assert str(submitted.shown["text"]).endswith("…")
