"""Honest, safe cards: untrusted text stays inert, every card and modal fits Slack's limits.

Cards are posted to the sandbox through a real slack_sdk WebClient, so Slack's limits (as the
sandbox enforces them) judge the result, not the renderer's own arithmetic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from slack_sdk import WebClient

from countersign.router import cards, details
from countersign.router import texts as texts_module
from countersign.sandbox import Sandbox, serve
from tests.helpers.builders import request

HOSTILE = "<!channel> pay <@U0ADMIN> & <https://example.com|click>"


@pytest.fixture(scope="module")
def slack() -> Iterator[WebClient]:
    server = serve(Sandbox(signing_secret="s"))
    yield WebClient(token="xoxb-test", base_url=server.url + "/api/")
    server.shutdown()


def trusted_markup_removed(text: str) -> str:
    """mrkdwn without the markup countersign itself writes: mentions of the policy's approvers or the
    decider, and Slack date tokens."""
    return re.sub(r"<@U0(LEAD|ALICE)>|<!date\^\d+\^[^|>]*\|[^>]*>", "", text)


def texts(blocks: Any, kind: str) -> list[str]:
    """Every `text` string inside text objects of type `kind` (plain_text or mrkdwn)."""
    found: list[str] = []
    if isinstance(blocks, dict):
        if blocks.get("type") == kind and isinstance(blocks.get("text"), str):
            found.append(blocks["text"])
        for value in blocks.values():
            found += texts(value, kind)
    elif isinstance(blocks, list):
        for value in blocks:
            found += texts(value, kind)
    return found


def test_agent_text_is_inert(slack: WebClient) -> None:
    card = cards.request_card(
        request(summary=HOSTILE, reason=HOSTILE, requester=HOSTILE, payload={HOSTILE: HOSTILE})
    )
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]
    assert all("<" not in trusted_markup_removed(t) for t in texts(card.blocks, "mrkdwn"))
    assert "<@U0ADMIN>" not in json.dumps(texts(card.blocks, "mrkdwn"))
    assert any(HOSTILE in t for t in texts(card.blocks, "plain_text"))  # shown verbatim, as plain text
    assert "<!channel>" not in card.text and "&lt;!channel&gt;" in card.text

    decided = cards.decided_card(
        request(
            summary=HOSTILE,
            status="approved",
            decision_reason=HOSTILE,
            approved_payload={"amount": HOSTILE},
            edits=[{"field": "amount", "from": HOSTILE, "to": "1"}],
            decided_by=[{"slack_user_id": "U0LEAD", "name": "lee"}],
            execution="failed",
            execution_detail=HOSTILE,
        )
    )
    mrkdwn = " ".join(texts(decided.blocks, "mrkdwn"))
    assert "<@U0LEAD>" in mrkdwn  # the decider, by the id Slack gave us
    assert "<" not in trusted_markup_removed(mrkdwn)
    assert slack.chat_postMessage(channel="C0FINANCE", **decided.message())["ok"]


def test_bidirectional_overrides_cannot_reorder_what_the_reviewer_reads(slack: WebClient) -> None:
    spoof = "Refund 10\u202e00001 USD"  # displays as "Refund 1010000 USD" reversed
    card = cards.request_card(request(summary=spoof, payload={"amount": spoof}))
    plain = texts(card.blocks, "plain_text")
    assert "Refund 10\ufffd00001 USD" in plain and not any("\u202e" in t for t in plain)
    assert "\u202e" not in card.text


def test_card_shows_summary_beside_the_raw_payload_and_the_buttons(slack: WebClient) -> None:
    card = cards.request_card(request(summary="Tiny harmless refund", payload={"amount": "99999.00"}))
    plain = texts(card.blocks, "plain_text")
    assert "Tiny harmless refund" in plain and "amount: 99999.00" in plain
    assert {"Action: issue_refund", "Requester: refund-agent", "Confidence: 0.80"} <= set(plain)
    buttons = [e["action_id"] for b in card.blocks if b["type"] == "actions" for e in b["elements"]]
    assert buttons == [cards.APPROVE_ACTION, cards.REJECT_ACTION, cards.EDIT_ACTION, cards.DETAILS_ACTION]
    no_edit = cards.request_card(request(rules={}))
    assert cards.EDIT_ACTION not in json.dumps(no_edit.blocks)


# Every way to start a new line: LF, CR, CRLF, VT, FF, the file/group/record separators, NEL, U+2028/9.
BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("brk", BREAKS, ids=[ascii(b) for b in BREAKS])
def test_a_value_cannot_fake_another_field_or_push_the_fields_down(slack: WebClient, brk: str) -> None:
    payload = {
        "amount": "7300.00",
        "currency": "EUR" + brk * 30,
        "vendor": f"Globex{brk}amount: 73.00",
        "note": "see corrected amount below",
    }
    hostile = request(
        payload=payload, summary=f"Pay Globex{brk * 40}amount: 73.00", reason=f"ok{brk * 50}end"
    )
    for card in (cards.request_card(hostile), cards.compact_card(hostile)):
        plain = texts(card.blocks, "plain_text")
        assert not any(line.strip() == "amount: 73.00" for t in plain for line in t.splitlines())
        assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]
    card = cards.request_card(hostile)
    fields = [f["text"] for b in card.blocks for f in b.get("fields", [])]
    assert all(len(f.splitlines()) == 1 for f in fields)  # one line each: nothing starts a fake field
    assert {"vendor: Globex⏎amount: 73.00", "currency: EUR" + "⏎" * 30} <= set(fields)
    assert card.blocks[0]["text"]["text"] == "Pay Globex" + "⏎" * 40 + "amount: 73.00"
    reason = next(b["text"]["text"] for b in card.blocks if b["block_id"].startswith("why-"))
    assert reason == "Reason: ok\n\nend"  # its paragraphs kept, never a tall blank gap
    assert "\n" not in card.text and brk not in card.text


def test_a_long_reason_shows_its_first_lines_and_says_how_many_more() -> None:
    reason = "\n".join(f"step {n}" for n in range(1, 31))
    card = cards.request_card(request(reason=reason))
    shown = next(b["text"]["text"] for b in card.blocks if b["block_id"].startswith("why-"))
    assert shown.splitlines()[-1] == "… 22 more lines: see Details"
    assert len(shown.splitlines()) == cards.CARD_REASON_LINES + 1
    whole = " ".join(texts(details.details_view(request(reason=reason))["blocks"], "plain_text"))
    assert "step 30" in whole  # Details shows it whole


@pytest.mark.parametrize("brk", ["\n", "\x85", "\u2028", "\u2029"])
def test_details_show_a_value_with_line_breaks_as_one_escaped_json_string(brk: str) -> None:
    view = details.details_view(request(payload={"vendor": f"Globex{brk}amount: 73.00"}))
    body = "\n".join(texts(view["blocks"], "plain_text"))
    assert f'"vendor": "Globex\\u{ord(brk):04x}amount: 73.00"'.replace("\\u000a", "\\n") in body
    assert not any(line.strip().startswith("amount") for line in body.splitlines())


@pytest.mark.parametrize("length", [149, 150, 151, 3000, 3001, 20_000])
def test_long_agent_text_is_cut_with_an_ellipsis_and_fits(slack: WebClient, length: int) -> None:
    text = ("é" * (length - 1)) + "😀"  # multi-byte, and an emoji that must not be split
    card = cards.request_card(request(summary=text, reason=text, payload={"note": text}))
    header = card.blocks[0]["text"]["text"]
    assert len(header) <= cards.MAX_HEADER_TEXT
    assert header.endswith("…") == (length > cards.MAX_HEADER_TEXT)
    assert header == text if length <= cards.MAX_HEADER_TEXT else text.startswith(header[:-1])
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]


def test_many_and_huge_payload_fields_stay_within_a_message(slack: WebClient) -> None:
    payload = {f"field_{i:03}": "x" * 5000 for i in range(200)}
    card = cards.request_card(request(payload=payload, reason="r" * 50_000, summary="s" * 1000))
    fields = [f for b in card.blocks for f in b.get("fields", [])]
    assert sum(len(t) for t in texts(card.blocks, "plain_text")) <= cards.MAX_BLOCKS_TOTAL_TEXT
    assert any(f["text"].startswith("… 191 more fields") for f in fields)
    assert len(card.blocks) <= cards.MAX_BLOCKS_PER_MESSAGE
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]


def details_sections(total: int) -> list[dict[str, Any]]:
    """The text sections of the Details modal for a payload whose text part is `total` chars long.

    The part reads "Payload:\n" + json.dumps({"k": value}, indent=2): 22 characters around the value.
    """
    view = details.details_view(request(payload={"k": "v" * (total - 22)}, context=None, reason=None))
    assert len(view["blocks"]) <= cards.MAX_BLOCKS_PER_VIEW and len(json.dumps(view)) <= 250_000
    return view["blocks"][2:]  # after the header and the facts


@pytest.mark.parametrize(("total", "sections"), [(3000, 1), (3001, 2), (6000, 2), (6001, 3)])
def test_details_modal_splits_text_into_sections_of_3000(total: int, sections: int) -> None:
    blocks = details_sections(total)
    assert [len(b["text"]["text"]) for b in blocks][-1] == total - (sections - 1) * cards.MAX_SECTION_TEXT
    assert len(blocks) == sections


def test_details_modal_says_how_much_did_not_fit() -> None:
    total = 100 * cards.MAX_SECTION_TEXT  # more than 100 blocks or 250 kB could hold
    blocks = details_sections(total)
    kept = len(blocks) - 1
    assert all(len(b["text"]["text"]) == cards.MAX_SECTION_TEXT for b in blocks[:kept])
    assert blocks[-1]["text"]["text"] == (
        f"… {total - kept * cards.MAX_SECTION_TEXT} more characters not shown "
        "(countersign show <request id> prints everything)"
    )


def test_details_modal_of_a_huge_multibyte_payload_stays_under_250_kb() -> None:
    view = details.details_view(request(payload={"k": "😀é" * 150_000}, context=None, reason=None))
    assert len(json.dumps(view)) <= 250_000
    assert (
        view["blocks"][-1]["text"]["text"].startswith("… ")
        and len(view["blocks"]) < cards.MAX_BLOCKS_PER_VIEW
    )


def test_card_of_an_action_that_started_but_never_reported_says_so() -> None:
    started = request(
        status="approved",
        execution="started",
        decided_by=[{"slack_user_id": "U0LEAD", "name": "lee"}],
        decided_at=None,
        executed_at=None,
    )
    text = json.dumps(cards.decided_card(started).blocks, ensure_ascii=False)
    assert "⚙ Execution started at an unknown time; no outcome reported yet" in text


@pytest.mark.parametrize(
    ("overrides", "shown"),
    [
        pytest.param({"status": "approved", "approved_payload": {"amount": "1.00"}}, True, id="approved"),
        pytest.param(
            {"status": "approved", "approved_payload": {"amount": "1.00"}, "execution": "executed"},
            False,
            id="ran-after-all",
        ),
        pytest.param({"status": "rejected"}, False, id="rejected"),
    ],
)
def test_a_refused_execution_is_on_the_card_only_while_the_approved_action_has_not_run(
    overrides: dict[str, Any], shown: bool
) -> None:
    decided = request(decided_by=[{"slack_user_id": "U0LEAD", "name": "lee"}], **overrides)
    text = json.dumps(cards.decided_card(decided, "payload_mismatch").blocks, ensure_ascii=False)
    line = (
        "Not executed: the payload the agent's worker was given is not the approved one (execution refused)"
    )
    assert (line in text) is shown


@pytest.mark.parametrize(("escalate_to", "named"), [("C0FINLEADS", "<#C0FINLEADS>"), ("U0CFO", "<@U0CFO>")])
def test_a_card_names_where_the_request_escalates_and_a_user_by_a_mention(
    slack: WebClient, escalate_to: str, named: str
) -> None:
    levels = [
        {"channel": "C0FINANCE", "users": ["U0LEAD"], "timeout": 3600, "on_timeout": "escalate"},
        {"channel": escalate_to, "users": ["U0LEAD"], "timeout": 3600, "on_timeout": "deny"},
    ]
    pending = request(rules={"levels": levels}, expires_at=datetime.now(UTC) + timedelta(hours=1))
    card = cards.request_card(pending)
    assert f", then escalation to {named} · " in " ".join(texts(card.blocks, "mrkdwn"))
    escalated = cards.escalated_card(pending, escalate_to)
    assert f"escalated to {named} at " in " ".join(texts(escalated.blocks, "mrkdwn"))
    assert "<#U" not in json.dumps([card.blocks, escalated.blocks])
    assert all(slack.chat_postMessage(channel="C0FINANCE", **c.message())["ok"] for c in (card, escalated))


def test_the_card_says_why_in_the_reviewers_words_and_details_show_the_rule_as_written(
    slack: WebClient,
) -> None:
    rule = "auto_approve did not hold: double(payload.amount) < 50.0"
    pending = request(
        rules={"review_rule": rule},
        review_reason="the auto-approval rule did not hold: small refunds are automatic",
    )
    card = cards.request_card(pending)
    note = " ".join(texts(card.blocks, "mrkdwn"))
    assert "Why: the auto-approval rule did not hold: small refunds are automatic · " in note
    assert "double(" not in json.dumps(card.blocks)
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]
    shown = texts(details.details_view(pending)["blocks"], "plain_text")
    assert f"Policy v1 rule: {rule}" in shown
    assert "Policy v1 rule" not in json.dumps(
        details.details_view(request())["blocks"]
    )  # none stored: none shown


def test_why_the_agent_has_not_run_the_decision_is_inert_and_fits(slack: WebClient) -> None:
    """A resume job's error comes from the agent's worker (its exception's message may quote the
    payload): shown escaped, and only until the agent records an execution."""
    lee = [{"slack_user_id": "U0LEAD", "name": "lee"}]
    approved = request(
        status="approved", approved_payload={"amount": "1.00"}, decided_by=lee, resume_func="a.f"
    )
    failed = {"event": "resume_failed", "error": f"RuntimeError: {HOSTILE}", "retries_left": 1}
    card = cards.decided_card(approved, problem=failed)  # type: ignore[arg-type]
    mrkdwn = " ".join(texts(card.blocks, "mrkdwn"))
    assert "⚠ The agent has not run it: its resume job `a.f` failed (RuntimeError: &lt;!channel&gt;" in mrkdwn
    assert mrkdwn.endswith(
        "RQ will run it again (1 more time)\nRequest 01J00000000000000000000000 · policy v1"
    )
    assert "<" not in trusted_markup_removed(mrkdwn)
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]
    ran = request(
        status="approved", approved_payload={"amount": "1.00"}, decided_by=lee, execution="executed"
    )
    assert "⚠" not in json.dumps(cards.decided_card(ran, problem=failed).blocks, ensure_ascii=False)  # type: ignore[arg-type]
    untaken = {"event": "resume_not_taken", "queue": "agent-q", "waited_seconds": 300}
    rejected = request(status="rejected", decided_by=lee)
    text = json.dumps(cards.decided_card(rejected, problem=untaken).blocks, ensure_ascii=False)  # type: ignore[arg-type]
    assert (
        "⚠ The agent has not processed it: no worker has taken its resume job from queue `agent-q` since"
        in text
    )


def test_a_modal_that_only_shows_offers_close_and_a_form_offers_cancel() -> None:
    """Trial finding: Details offered only "Cancel", as if closing it undid something. A view that
    names no `close` shows Slack's default, "Cancel"; one without inputs names "Close"."""
    shown = [details.details_view(request()), cards.loading_view("Edit"), cards.notice_view("Edit", "No.")]
    assert [(view["close"]["text"], view.get("submit")) for view in shown] == [("Close", None)] * 3
    forms = [cards.edit_view(request()), cards.reject_view(request())]
    assert [(view["close"]["text"], view["submit"]["text"]) for view in forms] == [
        ("Cancel", "Approve"),
        ("Cancel", "Reject"),
    ]


def test_the_human_the_agent_acts_for_is_a_mention_on_the_card_and_in_details(slack: WebClient) -> None:
    """As every other person on a card: `<@U0LEAD>` in mrkdwn (Slack shows their name), never the raw
    id in plain text."""
    acting_for = request(on_behalf_of="U0LEAD")
    card, shown = cards.request_card(acting_for), details.details_view(acting_for)
    for blocks in (card.blocks, shown["blocks"]):
        assert "On behalf of: <@U0LEAD>" in texts(blocks, "mrkdwn")
        assert not any("U0LEAD" in t for t in texts(blocks, "plain_text"))
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]


@pytest.mark.parametrize(
    ("approvers", "verb"), [(["U0LEAD"], "<@U0LEAD> decides it."), (["U0LEAD", "U0ALICE"], "decide it.")]
)
def test_who_decides_after_an_escalation_agrees_with_how_many_they_are(
    approvers: list[str], verb: str
) -> None:
    escalated = request(channel="C0FINLEADS", approvers=approvers)
    assert texts_module.escalated_note(escalated).endswith(verb)
    assert f"who {verb.split()[-2]} it now" in texts_module.escalated_away_text(escalated)


def test_counts_take_the_noun_in_their_number() -> None:
    assert [texts_module.counted(n, "approval") for n in (0, 1, 2)] == [
        "0 approvals",
        "1 approval",
        "2 approvals",
    ]
    assert texts_module.counted(1, "person", "people") == "1 person"
