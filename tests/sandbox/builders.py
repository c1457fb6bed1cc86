"""Builders shared by the sandbox tests: Block Kit blocks, cards and modal views, and opening a modal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient

#: The signing secret the sandbox and the stand-in bot share, and the channel cards are posted in.
SECRET = "sandbox-test-signing-secret"
CHANNEL = "C0APPROVALS"


def section(text: str, **extra: Any) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}, **extra}


def button(action_id: str, label: str = "Go", **extra: Any) -> dict:
    return {"type": "button", "action_id": action_id, "text": {"type": "plain_text", "text": label}, **extra}


def card(request_id: str = "req-1") -> list[dict]:
    return [
        {"type": "header", "text": {"type": "plain_text", "text": "Approval needed"}},
        section("*deploy* to prod &amp; notify", block_id="summary"),
        {
            "type": "actions",
            "block_id": "decision",
            "elements": [
                button("approve", "Approve", value=request_id, style="primary"),
                button("deny", "Deny", value=request_id, style="danger"),
            ],
        },
    ]


def plain(text: str) -> dict:
    return {"type": "plain_text", "text": text}


def modal(
    *blocks: dict, title: str = "Approve payment", submit: str | None = "Approve", **extra: Any
) -> dict:
    view = {"type": "modal", "callback_id": "approve_payment", "title": plain(title), "blocks": list(blocks)}
    if submit is not None:
        view["submit"] = plain(submit)
    return {**view, **extra}


def number_input(block_id: str = "amount", **element: Any) -> dict:
    return {
        "type": "input",
        "block_id": block_id,
        "label": plain("Amount"),
        "element": {
            "type": "number_input",
            "action_id": f"{block_id}_input",
            "is_decimal_allowed": True,
            **element,
        },
    }


def text_input(block_id: str = "reason", *, optional: bool = False, **element: Any) -> dict:
    return {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": plain("Reason"),
        "element": {"type": "plain_text_input", "action_id": f"{block_id}_input", **element},
    }


def payment_modal(**extra: Any) -> dict:
    return modal(
        section("Pay *$120* to ACME?", block_id="intro"),
        number_input(min_value="0", max_value="1000", initial_value="120"),
        text_input(optional=True, multiline=True),
        private_metadata='{"request_id":"req-1"}',
        **extra,
    )


def open_modal(client: WebClient, trigger: Callable[..., str], view: dict | None = None) -> dict:
    return client.views_open(trigger_id=trigger(), view=view or payment_modal())["view"]
