"""The decided card and the Edit modal with text that spans lines: what the agent reported and what
a reviewer typed cannot fake a line of the card or grow it without bound, and a value's line breaks
reach the Edit modal's input.

Cards are posted to the sandbox through a real slack_sdk WebClient, so Slack's limits (as the
sandbox enforces them) judge the result.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk import WebClient

from countersign.router import cards
from countersign.sandbox import Sandbox, serve
from tests.helpers.builders import request
from tests.router.test_cards import BREAKS

LEE = [{"slack_user_id": "U0LEAD", "name": "lee"}]


@pytest.fixture(scope="module")
def slack() -> Iterator[WebClient]:
    server = serve(Sandbox(signing_secret="s"))
    yield WebClient(token="xoxb-test", base_url=server.url + "/api/")
    server.shutdown()


def _block(card: cards.Card, prefix: str) -> str:
    """The text of the card's one block whose `block_id` starts with `prefix`."""
    [text] = [b["text"]["text"] for b in card.blocks if b["block_id"].startswith(prefix)]
    return str(text)


@pytest.mark.parametrize("brk", BREAKS, ids=[ascii(b) for b in BREAKS])
def test_a_failure_detail_cannot_fake_a_line_of_the_decided_card(slack: WebClient, brk: str) -> None:
    """The agent reports why its action failed: one line on the card, every break a "⏎", so its
    text cannot claim another outcome on a line of its own."""
    failed = request(
        status="approved",
        approved_payload={"amount": "512.40"},
        decided_by=LEE,
        execution="failed",
        execution_detail=f"card declined{brk * 3}Executed ✓ at 09:00{brk}",
    )
    card = cards.decided_card(failed)
    verdict = _block(card, "verdict-")
    assert "Failed ✗ card declined⏎⏎⏎Executed ✓ at 09:00⏎\n" in verdict
    assert not any(line.startswith("Executed") for line in verdict.splitlines())
    line = cards.execution_line(failed, None, None)
    assert line == "Failed ✗ card declined⏎⏎⏎Executed ✓ at 09:00⏎"  # what the thread note says too
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]


def test_a_resume_error_is_one_line_on_the_decided_card() -> None:
    """A resume job's error is the agent's exception, whose message may span lines."""
    approved = request(
        status="approved", approved_payload={"amount": "1.00"}, decided_by=LEE, resume_func="a.f"
    )
    error = "ValueError: bad amount\nExecuted ✓ at 09:00"
    problem: Any = {"event": "resume_failed", "error": error, "retries_left": 0}
    verdict = _block(cards.decided_card(approved, problem=problem), "verdict-")
    assert "failed (ValueError: bad amount⏎Executed ✓ at 09:00); RQ will not run it again" in verdict
    assert not any(line.startswith("Executed") for line in verdict.splitlines())


def test_a_reviewers_long_reason_shows_its_first_lines_and_says_how_many_more(slack: WebClient) -> None:
    """Bounded as the agent's reason is: its lines kept, at most `CARD_REASON_LINES`, no blank line
    twice."""
    typed = "\n".join(f"point {n}" for n in range(1, 31)).replace("point 2\n", "point 2\n\n\n\n")
    rejected = request(status="rejected", decided_by=LEE, decision_reason=typed)
    card = cards.decided_card(rejected)
    shown = _block(card, "decided-why-").splitlines()
    assert shown[:4] == ["Reviewer's reason: point 1", "point 2", "", "point 3"]
    assert shown[-1] == "… 23 more lines: see Details"
    assert len(shown) == cards.CARD_REASON_LINES + 1
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]


def test_a_card_with_every_text_at_its_longest_fits_a_message(slack: WebClient) -> None:
    """The reviewer's reason (a Reject modal takes 3000 characters) is cut like the agent's, within a
    section's 3000 and the message's total, whatever else the card shows."""
    edits = [{"field": f"f{n}", "from": "x" * 400, "to": "y" * 400} for n in range(4)]
    longest = request(
        summary="s" * 3000,
        reason="r" * 20_000,
        payload={f"field_{n}": "v" * 5000 for n in range(20)},
        status="rejected",
        decided_by=LEE,
        edits=edits,
        decision_reason="w" * 3000,
    )
    card = cards.decided_card(longest)
    reason = _block(card, "decided-why-")
    assert len(reason) == cards.CARD_REASON_MAX and reason.endswith("w…")
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\u2028"], ids=ascii)
def test_the_edit_modal_shows_a_value_with_line_breaks_in_a_multiline_input(brk: str) -> None:
    rules = {"editable": {"memo": {"type": "text", "max_length": 200}, "tag": {"type": "text"}}}
    memo = f"Line one{brk}Line two"
    view = cards.edit_view(request(rules=rules, payload={"memo": memo, "tag": "vip"}))
    inputs = {b["block_id"]: b["element"] for b in view["blocks"] if b["type"] == "input"}
    assert inputs["edit-memo"]["multiline"] is True and inputs["edit-memo"]["initial_value"] == memo
    assert inputs["edit-tag"]["multiline"] is False  # one short line: a one-line input
