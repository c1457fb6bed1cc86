"""Issue 12, finding 2: a card cannot hide the field that runs. Field names a reviewer cannot tell
apart are refused (by the client, and by intake for a message that did not come through it), the
policy's key fields are shown first on every card and never folded, and a payload that would hide
one is dead-lettered with its reason. Cards go through intake to the sandbox, which judges them as
Slack would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from slack_sdk import WebClient

from countersign.agent import ApprovalClient
from countersign.exceptions import InvalidRequest
from countersign.router import cards
from countersign.router.jobs import json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import drain
from tests.helpers.builders import post_card, refund, request

POLICY = """\
version: 5
defaults:
  channel: C0APPROVALS
  approvers: {users: [U0LEAD]}
  key_fields: [customer]
actions:
  issue_refund:
    channel: C0FINANCE
    approvers: {users: [U0LEAD, U0ALICE]}
    key_fields: [amount, currency, customer]
  send_email: {}
"""
FILLERS = {f"note{n}": "x" for n in range(8)}
DECOY = {"amount\u200b": "10.00", **FILLERS, "amount": "9000.00"}  # the payload of issue 12


@pytest.fixture
def key_policy(policy_file: Path) -> Path:
    policy_file.write_text(POLICY)
    return policy_file


def payload_fields(card: dict[str, Any]) -> list[str]:
    """The texts of the card's payload section, in order."""
    [section] = [b for b in card["blocks"] if b["block_id"].startswith("payload-")]
    return [field["text"] for field in section["fields"]]


def test_key_fields_come_first_and_are_never_folded(
    key_policy: Path, client: ApprovalClient, redis: Redis, sandbox: tuple[Sandbox, str]
) -> None:
    payload = {**FILLERS, "currency": "USD", "customer": "cus_ACME", "amount": "9000.00"}
    _, card = post_card(client, redis, sandbox[0], payload=payload)
    assert payload_fields(card) == [
        "amount: 9000.00",
        "currency: USD",
        "customer: cus_ACME",
        *[f"note{n}: x" for n in range(6)],
        "… 2 more fields: see Details",
    ]
    email = {**{f"line{n}": n for n in range(11)}, "customer": "cus_ACME"}  # key_fields from the defaults
    _, card = post_card(
        client, redis, sandbox[0], "C0APPROVALS", action="send_email", payload=email, run_id="r2"
    )
    assert payload_fields(card)[0] == "customer: cus_ACME"
    assert payload_fields(card)[-1] == "… 3 more fields: see Details"


def test_the_compact_card_keeps_the_key_fields(sandbox: tuple[Sandbox, str]) -> None:
    slack = WebClient(token="xoxb-test", base_url=sandbox[1] + "/api/")
    pending = request(
        payload={**FILLERS, "amount": "9000.00", "currency": "USD"},
        rules={"key_fields": ["amount", "currency", "customer"]},
    )
    card = cards.compact_card(pending)
    assert slack.chat_postMessage(channel="C0FINANCE", **card.message())["ok"]
    [posted] = sandbox[0].messages("C0FINANCE")
    assert [f["text"] for f in posted["blocks"][0]["fields"]] == ["amount: 9000.00", "currency: USD"]


def test_the_decoy_key_is_refused_by_the_client_and_dead_lettered_at_intake(
    key_policy: Path, client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str]
) -> None:
    with pytest.raises(InvalidRequest, match=r'payload\."amount\\u200b" contains U\+200B ZERO WIDTH SPACE'):
        client.request(refund(payload=DECOY))
    assert json_queue("countersign", redis).count == 0  # nothing enqueued

    request_id = "01J000000000000000000DEC0Y"
    message = {"v": 1, "request_id": request_id, "request": refund(payload=DECOY)}  # not through the client
    json_queue("countersign", redis).enqueue("countersign.router.intake.intake", message, job_id="decoy")
    drain(redis)
    letter = store.get_dead_letter(request_id)
    assert letter is not None and letter.reason == (
        'request.payload: key payload."amount\\u200b" contains U+200B ZERO WIDTH SPACE, an invisible or '
        "look-alike character; rename it"
    )
    assert store.get(request_id) is None and sandbox[0].messages() == []


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (
            {"currency": "USD", "refund": {"amount": "9000.00"}},
            "payload.refund.amount: named like the key field amount of issue_refund but nested, where the "
            "card does not show it; send it as payload.amount",
        ),
        (
            {"amount": "1.00", **FILLERS, "lines": [{"amount": "8999.00"}]},
            "payload.lines[0].amount: named like the key field amount of issue_refund but nested, where the "
            "card does not show it; send it as payload.amount",
        ),
        (
            {"AMOUNT": "9000.00", "currency": "USD"},
            "payload.AMOUNT: named like the key field amount of issue_refund but not named exactly like it; "
            "send it as payload.amount",
        ),
        (
            {"amount": "10.00" + " " * 300 + "9000.00"},
            "payload.amount: a key field of issue_refund, too long for the card (over 300 characters as "
            "shown); a card must show it whole",
        ),
    ],
    ids=["nested", "in-a-list", "look-alike", "too-long"],
)
def test_a_payload_that_would_hide_a_key_field_is_dead_lettered_with_the_reason(
    key_policy: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    runtime: Runtime,
    payload: dict[str, Any],
    reason: str,
) -> None:
    request_id = client.request(refund(payload=payload))  # the client has no policy: intake refuses it
    drain(redis)
    state = client.get(request_id)
    assert (state.status, state.reason) == ("dead_letter", reason)
    assert store.get(request_id) is None and sandbox[0].messages() == []
    fixed = client.request(refund(payload={"amount": "9000.00", "currency": "USD"}))  # the key was freed
    drain(redis)
    assert payload_fields(sandbox[0].messages("C0FINANCE")[0])[0] == "amount: 9000.00"
    assert store.get(fixed) is not None
