"""Block Kit, message and modal-view limits (``limits``), each checked at and just over the limit
through the Web API.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from slack_sdk import WebClient

from countersign.sandbox import Sandbox
from countersign.sandbox.limits import (
    MAX_ACTION_ID,
    MAX_ACTIONS_ELEMENTS,
    MAX_BLOCK_ID,
    MAX_BLOCKS_PER_MESSAGE,
    MAX_BLOCKS_PER_VIEW,
    MAX_BLOCKS_TOTAL_TEXT,
    MAX_BUTTON_TEXT,
    MAX_BUTTON_VALUE,
    MAX_CALLBACK_ID,
    MAX_HEADER_TEXT,
    MAX_INPUT_LABEL,
    MAX_MESSAGE_TEXT,
    MAX_PRIVATE_METADATA,
    MAX_SECTION_FIELD_TEXT,
    MAX_SECTION_FIELDS,
    MAX_SECTION_TEXT,
    MAX_TEXT_INPUT_LENGTH,
    MAX_UPDATE_TEXT,
    MAX_VIEW_CLOSE,
    MAX_VIEW_SUBMIT,
    MAX_VIEW_TITLE,
    check_view,
)

from .builders import CHANNEL, button, modal, number_input, plain, section, text_input
from .harness import api_error


def test_fifty_blocks_pass_and_fifty_one_fail(client: WebClient) -> None:
    blocks = [section(f"line {i}") for i in range(MAX_BLOCKS_PER_MESSAGE)]
    client.chat_postMessage(channel=CHANNEL, text="long", blocks=blocks)
    error = api_error(
        lambda: client.chat_postMessage(channel=CHANNEL, text="x", blocks=[*blocks, section("x")])
    )
    assert error["error"] == "invalid_blocks"
    assert error["response_metadata"]["messages"] == [
        "[ERROR] must be less than 51 items [json-pointer:/blocks]"
    ]


def test_section_text_of_3000_passes_and_3001_fails(client: WebClient) -> None:
    client.chat_postMessage(channel=CHANNEL, text="x", blocks=[section("a" * MAX_SECTION_TEXT)])
    error = api_error(
        lambda: client.chat_postMessage(
            channel=CHANNEL, text="x", blocks=[section("a" * (MAX_SECTION_TEXT + 1))]
        )
    )
    assert error["error"] == "invalid_blocks"
    assert "[json-pointer:/blocks/0/text/text]" in error["response_metadata"]["messages"][0]


def _fields(n: int) -> list[dict]:
    return [{"type": "section", "fields": [{"type": "plain_text", "text": "f"}] * n}]


def _field_text(n: int) -> list[dict]:
    return [{"type": "section", "fields": [{"type": "mrkdwn", "text": "f" * n}]}]


def _header(n: int) -> list[dict]:
    return [{"type": "header", "text": {"type": "plain_text", "text": "h" * n}}]


def _actions(*elements: dict) -> list[dict]:
    return [{"type": "actions", "elements": list(elements)}]


# (rule, builder(n) -> blocks, the limit n): blocks(limit) must pass and blocks(limit + 1) must fail.
BOUNDARIES: list[tuple[str, Callable[[int], list[dict]], int]] = [
    ("section fields", _fields, MAX_SECTION_FIELDS),
    ("section field text", _field_text, MAX_SECTION_FIELD_TEXT),
    ("header text", _header, MAX_HEADER_TEXT),
    ("button text", lambda n: _actions(button("a", "b" * n)), MAX_BUTTON_TEXT),
    ("button value", lambda n: _actions(button("a", value="v" * n)), MAX_BUTTON_VALUE),
    ("action_id", lambda n: _actions(button("a" * n)), MAX_ACTION_ID),
    ("block_id", lambda n: [section("x", block_id="b" * n)], MAX_BLOCK_ID),
    ("actions elements", lambda n: _actions(*(button(f"a{i}") for i in range(n))), MAX_ACTIONS_ELEMENTS),
]


@pytest.mark.parametrize(("rule", "build", "limit"), BOUNDARIES, ids=[b[0] for b in BOUNDARIES])
def test_block_kit_limits(
    client: WebClient, rule: str, build: Callable[[int], list[dict]], limit: int
) -> None:
    client.chat_postMessage(channel=CHANNEL, text="at the limit", blocks=build(limit))
    error = api_error(lambda: client.chat_postMessage(channel=CHANNEL, text="over", blocks=build(limit + 1)))
    assert error["error"] == "invalid_blocks", rule
    assert error["response_metadata"]["messages"], rule


@pytest.mark.parametrize(
    "blocks",
    [
        [section("a", block_id="same"), section("b", block_id="same")],
        [{"type": "carousel"}],
        _actions(button("same"), button("same")),
        [{"type": "header", "text": {"type": "mrkdwn", "text": "*bold*"}}],
        _actions(button("a", style="warning")),
        [section("")],
    ],
    ids=["duplicate block_id", "unknown type", "duplicate action_id", "mrkdwn header", "bad style", "empty"],
)
def test_malformed_blocks_are_invalid(client: WebClient, blocks: list[dict]) -> None:
    assert api_error(lambda: client.chat_postMessage(channel=CHANNEL, text="x", blocks=blocks))["error"] == (
        "invalid_blocks"
    )


def test_total_block_text_limit(client: WebClient) -> None:
    full = [section("a" * MAX_SECTION_TEXT) for _ in range(MAX_BLOCKS_TOTAL_TEXT // MAX_SECTION_TEXT)]
    client.chat_postMessage(channel=CHANNEL, text="x", blocks=full)
    error = api_error(
        lambda: client.chat_postMessage(channel=CHANNEL, text="x", blocks=[*full, section("a")])
    )
    assert error["error"] == "msg_blocks_too_long"


def test_text_length_limits(client: WebClient) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="a" * MAX_MESSAGE_TEXT)["ts"]
    too_long = "a" * (MAX_MESSAGE_TEXT + 1)
    assert (
        api_error(lambda: client.chat_postMessage(channel=CHANNEL, text=too_long))["error"] == "msg_too_long"
    )
    client.chat_update(channel=CHANNEL, ts=ts, text="a" * MAX_UPDATE_TEXT)
    too_long = "a" * (MAX_UPDATE_TEXT + 1)
    assert (
        api_error(lambda: client.chat_update(channel=CHANNEL, ts=ts, text=too_long))["error"]
        == "msg_too_long"
    )


def _sections(n: int) -> list[dict]:
    return [section(f"line {i}") for i in range(n)]


# (rule, build(n) -> view, limit): build(limit) opens and build(limit + 1) is invalid_arguments.
VIEW_BOUNDARIES: list[tuple[str, Callable[[int], dict], int]] = [
    ("title", lambda n: modal(title="t" * n), MAX_VIEW_TITLE),
    ("submit", lambda n: modal(submit="s" * n), MAX_VIEW_SUBMIT),
    ("close", lambda n: modal(close=plain("c" * n)), MAX_VIEW_CLOSE),
    ("blocks", lambda n: modal(*_sections(n)), MAX_BLOCKS_PER_VIEW),
    ("private_metadata", lambda n: modal(private_metadata="m" * n), MAX_PRIVATE_METADATA),
    ("callback_id", lambda n: modal(callback_id="c" * n), MAX_CALLBACK_ID),
    ("input label", lambda n: modal({**text_input(), "label": plain("l" * n)}), MAX_INPUT_LABEL),
    ("max_length", lambda n: modal(text_input(max_length=n)), MAX_TEXT_INPUT_LENGTH),
    ("min_length", lambda n: modal(text_input(min_length=n)), MAX_TEXT_INPUT_LENGTH),
]


@pytest.mark.parametrize(("rule", "build", "limit"), VIEW_BOUNDARIES, ids=[b[0] for b in VIEW_BOUNDARIES])
def test_modal_limits(
    client: WebClient, trigger: Callable[..., str], rule: str, build: Callable[[int], dict], limit: int
) -> None:
    client.views_open(trigger_id=trigger(), view=build(limit))
    error = api_error(lambda: client.views_open(trigger_id=trigger(), view=build(limit + 1)))
    assert error["error"] == "invalid_arguments", rule
    assert error["response_metadata"]["messages"], rule


@pytest.mark.parametrize(
    ("view", "pointer"),
    [
        (modal(title="x" * 25), "/view/title/text"),
        (modal(*_sections(101)), "/view/blocks"),
        (modal(number_input(min_value=0)), "/view/blocks/0/element/min_value"),
        (modal(number_input(initial_value=5.5)), "/view/blocks/0/element/initial_value"),
        (modal(number_input(min_value="10", max_value="1")), "/view/blocks/0/element/min_value"),
        (modal(number_input(min_value="ten")), "/view/blocks/0/element/min_value"),
        (
            modal({**number_input(), "element": {"type": "number_input", "action_id": "a"}}),
            "/view/blocks/0/element",
        ),
        (modal(number_input(is_decimal_allowed="yes")), "/view/blocks/0/element/is_decimal_allowed"),
        (modal(text_input(), submit=None), "/view"),
        (modal({"type": "input", "element": {"type": "plain_text_input"}}), "/view/blocks/0"),
        (modal({"type": "input", "label": plain("Why?")}), "/view/blocks/0"),
        (modal(text_input(max_length=0)), "/view/blocks/0/element/max_length"),
        (modal(text_input(min_length=-1)), "/view/blocks/0/element/min_length"),
        (modal(text_input(min_length=10, max_length=5)), "/view/blocks/0/element/min_length"),
        ({**modal(), "type": "home"}, "/view/type"),
        ({**modal(), "title": {"type": "mrkdwn", "text": "*Pay*"}}, "/view/title/type"),
        ({k: v for k, v in modal().items() if k != "title"}, "/view"),
    ],
    ids=[
        "title 25",
        "101 blocks",
        "integer min_value",
        "float initial_value",
        "min above max",
        "non-numeric min_value",
        "missing is_decimal_allowed",
        "non-boolean is_decimal_allowed",
        "input without submit",
        "input without label",
        "input without element",
        "max_length 0",
        "negative min_length",
        "min_length above max_length",
        "home view",
        "mrkdwn title",
        "no title",
    ],
)
def test_invalid_modals_are_refused_like_slack(
    client: WebClient, sb: Sandbox, trigger: Callable[..., str], view: dict, pointer: str
) -> None:
    error = api_error(lambda: client.views_open(trigger_id=trigger(), view=view))
    assert error["error"] == "invalid_arguments"
    assert any(f"[json-pointer:{pointer}]" in m for m in error["response_metadata"]["messages"]), error
    assert sb.views() == []


def test_missing_submit_and_integer_bounds_have_clear_messages() -> None:
    [message] = check_view(modal(text_input(), submit=None))
    assert message == "[ERROR] missing required field: submit [json-pointer:/view]"
    [message] = check_view(modal(number_input(min_value=1)))
    assert message == "[ERROR] must be a string [json-pointer:/view/blocks/0/element/min_value]"
    assert check_view(modal(number_input(min_value="-1.5", max_value="-1.5", initial_value="-1.5"))) == []


def test_oversized_view_is_view_too_large(client: WebClient, trigger: Callable[..., str]) -> None:
    huge = modal(*(section("x" * MAX_SECTION_TEXT) for _ in range(MAX_BLOCKS_PER_VIEW)))
    assert api_error(lambda: client.views_open(trigger_id=trigger(), view=huge))["error"] == "view_too_large"
