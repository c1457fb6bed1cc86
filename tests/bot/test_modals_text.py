"""The Edit modal's text fields over real HTTP: a value with line breaks is edited in a multi-line
input, and what the reviewer submits is what the agent runs, to the character."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.cards import EDIT_ACTION
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.conftest import POLICY
from tests.helpers import wait_for
from tests.helpers.builders import post_card, status
from tests.helpers.modals import open_view, raw_submit

AMOUNT = 'editable: {amount: {type: decimal, places: 2, min: "0.01"}}'
MEMO = "Refund for order 4471\nCustomer called twice\n"
BIDI = "pay to \u202eKCAB\u202c, then\x1b[2J done"


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    """The tests' policy, whose refunds also have an editable `memo` of at most 100 characters."""
    assert AMOUNT in POLICY
    path = tmp_path / "policy.yml"
    path.write_text(POLICY.replace(AMOUNT, AMOUNT[:-1] + ", memo: {type: text, max_length: 100}}"))
    return path


def test_a_text_with_line_breaks_is_edited_in_a_multiline_input_and_kept_exactly(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    payload = {"amount": "120.00", "currency": "USD", "memo": MEMO}
    request_id, card = post_card(client, redis, sb, payload=payload, run_id="edited")
    view = open_view(sb, card, EDIT_ACTION, "U0LEAD", "edit-memo")
    [memo] = [b for b in view["view"]["blocks"] if b.get("block_id") == "edit-memo"]
    assert memo["element"]["multiline"] is True and memo["element"]["initial_value"] == MEMO

    for typed, error in [("x" * 101, "Use at most 100 characters."), (" \n ", "Enter a value.")]:
        answer = raw_submit(sb, view, "U0LEAD", {"edit-amount": "120.00", "edit-memo": typed})
        assert answer == {"response_action": "errors", "errors": {"edit-memo": error}}
    assert status(store, request_id) == "pending"

    edited = MEMO + "  approved by phone\n\n"
    assert sb.submit_view(view["id"], "U0LEAD", {"edit-amount": "120.00", "edit-memo": edited})[0] == 200
    wait_for(lambda: status(store, request_id) == "approved")
    row = store.get(request_id)
    assert row is not None and row.approved_payload == {"amount": "120.00", "currency": "USD", "memo": edited}
    assert row.edits == [{"field": "memo", "from": MEMO, "to": edited}]


@pytest.mark.parametrize(
    ("memo", "as_shown"),
    [
        pytest.param(MEMO, MEMO, id="as-shown"),
        pytest.param(
            "Refund for order 4471\r\nCustomer called twice\rThird line  \r\n",
            "Refund for order 4471\nCustomer called twice\nThird line  \n",
            id="crlf-given-back-as-lf",
        ),
        pytest.param(BIDI, BIDI, id="bidi-override"),
    ],
)
def test_a_text_submitted_as_shown_is_no_edit_and_the_agent_runs_its_own(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
    memo: str,
    as_shown: str,
) -> None:
    """Trailing line breaks and spaces are part of the value, and so are controls and bidirectional
    characters: an untouched one is not an edit. A browser's textarea gives CRLF and CR back as LF
    (the HTML standard's "normalize newlines"): an untouched value the agent sent with CRLF is no
    edit either, and the agent runs its own bytes."""
    sb, _ = sandbox
    payload = {"amount": "120.00", "currency": "USD", "memo": memo}
    request_id, card = post_card(client, redis, sb, payload=payload, run_id="untouched")
    view = open_view(sb, card, EDIT_ACTION, "U0LEAD", "edit-memo")
    assert sb.submit_view(view["id"], "U0LEAD", {"edit-amount": "120.00", "edit-memo": as_shown})[0] == 200
    wait_for(lambda: status(store, request_id) == "approved")
    row = store.get(request_id)
    assert row is not None and row.edits == [] and row.approved_payload == payload


def test_a_text_with_a_bidi_override_is_prefilled_exactly_with_a_hint_saying_so(
    client: ApprovalClient, redis: Redis, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """The input must hold the exact value (an untouched one is no edit), so it shows U+202E raw: the
    hint under it tells the reviewer what they read may be reordered."""
    sb, _ = sandbox
    payload = {"amount": "120.00", "currency": "USD", "memo": BIDI}
    _, card = post_card(client, redis, sb, payload=payload, run_id="bidi")
    view = open_view(sb, card, EDIT_ACTION, "U0LEAD", "edit-memo")
    blocks = {b.get("block_id"): b for b in view["view"]["blocks"]}
    assert blocks["edit-memo"]["element"]["initial_value"] == BIDI
    assert blocks["edit-memo"]["hint"]["text"] == (
        "⚠ This value holds 3 control or bidirectional characters (U+001B, U+202C, U+202E), which can "
        "reorder or hide what you read here; Details shows the value escaped."
    )
    assert "hint" not in blocks["edit-amount"]
