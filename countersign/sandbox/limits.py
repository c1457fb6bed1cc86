"""Block Kit and message-size limits that the sandbox enforces the way Slack does.

Each limit is a named constant with the page that states it. Lengths are counted in Python code points
(``len``). Slack may count some characters (emoji) differently, so products should stay below these.

Error messages copy the shape of Slack's ``response_metadata.messages`` entries,
``"[ERROR] <reason> [json-pointer:/blocks/0/text/text]"``. The exact wording is ours, not Slack's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Blocks in one message. Modals and the Home tab allow 100. https://docs.slack.dev/reference/block-kit/blocks
MAX_BLOCKS_PER_MESSAGE = 50
#: Section ``text`` is 1 to 3000 characters. https://docs.slack.dev/reference/block-kit/blocks/section-block
MAX_SECTION_TEXT = 3000
#: At most 10 section ``fields``. Same section-block page.
MAX_SECTION_FIELDS = 10
#: Each section field holds at most 2000 characters. Same section-block page.
MAX_SECTION_FIELD_TEXT = 2000
#: A ``block_id`` holds at most 255 characters and must be unique within a message. Same section-block page.
MAX_BLOCK_ID = 255
#: Header text: plain_text only, at most 150 characters. slack_sdk's HeaderBlock check (no Slack page).
MAX_HEADER_TEXT = 150
#: Elements in an actions block. https://api.slack.com/reference/messaging/blocks
MAX_ACTIONS_ELEMENTS = 25
#: Elements in a context block. slack_sdk's ContextBlock check (no Slack page).
MAX_CONTEXT_ELEMENTS = 10
#: Button label: plain_text only, at most 75 characters.
#: https://docs.slack.dev/reference/block-kit/block-elements/button-element
MAX_BUTTON_TEXT = 75
#: Button ``value`` holds at most 2000 characters. Same button-element page.
MAX_BUTTON_VALUE = 2000
#: Button ``url`` holds at most 3000 characters. Same button-element page.
MAX_BUTTON_URL = 3000
#: An ``action_id`` holds at most 255 characters, unique within its block. Same button-element page.
MAX_ACTION_ID = 255
#: Button styles Slack accepts besides "no style". Same button-element page.
BUTTON_STYLES = frozenset({"primary", "danger"})
#: Total characters of all text objects in a message's blocks. Above it Slack answers ``msg_blocks_too_long``.
#: Slack does not document this limit. The figure (about 12-13k) comes from
#: https://github.com/slackapi/bolt-js/issues/2509 and https://github.com/slackapi/bolt-js/issues/2867
MAX_BLOCKS_TOTAL_TEXT = 12_000
#: Top-level ``text`` of chat.postMessage / chat.postEphemeral. Slack truncates longer text (slack-api-ref
#: chat.scheduleMessage). The sandbox is stricter and answers ``msg_too_long``.
MAX_MESSAGE_TEXT = 40_000
#: chat.update returns ``msg_too_long`` above 4,000 characters of ``text``.
#: https://docs.slack.dev/reference/methods/chat.update
MAX_UPDATE_TEXT = 4_000

#: Block types Slack accepts in messages. https://docs.slack.dev/reference/block-kit/blocks
BLOCK_TYPES = frozenset(
    {
        "actions",
        "context",
        "divider",
        "file",
        "header",
        "image",
        "input",
        "markdown",
        "rich_text",
        "section",
        "video",
    }
)
#: Composition text object types. https://docs.slack.dev/reference/block-kit/composition-objects/text-object
TEXT_TYPES = frozenset({"plain_text", "mrkdwn"})


def _error(reason: str, pointer: str) -> str:
    return f"[ERROR] {reason} [json-pointer:{pointer}]"


def _check_length(value: Any, pointer: str, maximum: int, minimum: int = 0) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, str):
        return [_error("must be a string", pointer)]
    if len(value) < minimum:
        return [_error(f"must be more than {minimum - 1} characters", pointer)]
    if len(value) > maximum:
        return [_error(f"must be less than {maximum + 1} characters", pointer)]
    return []


def _check_text(obj: Any, pointer: str, maximum: int, *, plain_only: bool = False) -> list[str]:
    """Check a text object ``{"type": "plain_text"|"mrkdwn", "text": str}`` of 1..maximum characters."""
    if not isinstance(obj, dict) or obj.get("type") not in TEXT_TYPES or not isinstance(obj.get("text"), str):
        return [_error("must be a text object", pointer)]
    if plain_only and obj["type"] != "plain_text":
        return [_error("must be plain_text", f"{pointer}/type")]
    return _check_length(obj["text"], f"{pointer}/text", maximum, minimum=1)


def _check_count(items: Any, pointer: str, maximum: int) -> list[str]:
    if not isinstance(items, list):
        return [_error("must be an array", pointer)]
    if len(items) > maximum:
        return [_error(f"must be less than {maximum + 1} items", pointer)]
    return []


def _check_element(element: Any, pointer: str) -> list[str]:
    """Check an interactive element. Buttons get the full button-element rules, others the action_id rule."""
    if not isinstance(element, dict) or not isinstance(element.get("type"), str):
        return [_error("must be an element object", pointer)]
    errors = _check_length(element.get("action_id"), f"{pointer}/action_id", MAX_ACTION_ID, minimum=1)
    if element["type"] != "button":
        return errors
    errors += _check_text(element.get("text"), f"{pointer}/text", MAX_BUTTON_TEXT, plain_only=True)
    errors += _check_length(element.get("value"), f"{pointer}/value", MAX_BUTTON_VALUE)
    errors += _check_length(element.get("url"), f"{pointer}/url", MAX_BUTTON_URL)
    if "style" in element and element["style"] not in BUTTON_STYLES:
        errors.append(_error("must be one of primary, danger", f"{pointer}/style"))
    return errors


def _check_section(block: dict, pointer: str) -> list[str]:
    if "text" not in block and "fields" not in block:
        return [_error("must provide text or fields", pointer)]
    errors = []
    if "text" in block:
        errors += _check_text(block["text"], f"{pointer}/text", MAX_SECTION_TEXT)
    if "fields" in block:
        errors += _check_count(block["fields"], f"{pointer}/fields", MAX_SECTION_FIELDS)
        for i, field in enumerate(block["fields"] if isinstance(block["fields"], list) else []):
            errors += _check_text(field, f"{pointer}/fields/{i}", MAX_SECTION_FIELD_TEXT)
    if "accessory" in block:
        errors += _check_element(block["accessory"], f"{pointer}/accessory")
    return errors


def _check_header(block: dict, pointer: str) -> list[str]:
    return _check_text(block.get("text"), f"{pointer}/text", MAX_HEADER_TEXT, plain_only=True)


def _check_actions(block: dict, pointer: str) -> list[str]:
    elements = block.get("elements")
    errors = _check_count(elements, f"{pointer}/elements", MAX_ACTIONS_ELEMENTS)
    seen: set[str] = set()
    for i, element in enumerate(elements if isinstance(elements, list) else []):
        errors += _check_element(element, f"{pointer}/elements/{i}")
        action_id = element.get("action_id") if isinstance(element, dict) else None
        if action_id is not None and action_id in seen:
            errors.append(_error("duplicate action_id", f"{pointer}/elements/{i}/action_id"))
        if isinstance(action_id, str):
            seen.add(action_id)
    return errors


def _check_context(block: dict, pointer: str) -> list[str]:
    return _check_count(block.get("elements"), f"{pointer}/elements", MAX_CONTEXT_ELEMENTS)


_BLOCK_CHECKS: dict[str, Callable[[dict, str], list[str]]] = {
    "section": _check_section,
    "header": _check_header,
    "actions": _check_actions,
    "context": _check_context,
}


def _check_block(block: Any, pointer: str, seen_ids: set[str]) -> list[str]:
    if not isinstance(block, dict):
        return [_error("must be an object", pointer)]
    if block.get("type") not in BLOCK_TYPES:
        return [_error(f"unsupported block type: {block.get('type')!r}", f"{pointer}/type")]
    errors = _check_length(block.get("block_id"), f"{pointer}/block_id", MAX_BLOCK_ID, minimum=1)
    if block.get("block_id") in seen_ids:
        errors.append(_error("duplicate block_id", f"{pointer}/block_id"))
    if isinstance(block.get("block_id"), str):
        seen_ids.add(block["block_id"])
    check = _BLOCK_CHECKS.get(block["type"])
    return errors + (check(block, pointer) if check else [])


def check_blocks(blocks: list[Any]) -> list[str]:
    """Return Slack-style ``[ERROR] ...`` messages for every Block Kit rule ``blocks`` breaks; [] if valid.

    Covers the message rules listed in this module: block count, per-block text and field limits, button
    limits, actions/context element counts, ``block_id`` length and uniqueness, ``action_id`` uniqueness
    within a block, and unknown block types. A non-empty result means Slack would answer ``invalid_blocks``.
    """
    errors = _check_count(blocks, "/blocks", MAX_BLOCKS_PER_MESSAGE)
    seen_ids: set[str] = set()
    for i, block in enumerate(blocks):
        errors += _check_block(block, f"/blocks/{i}", seen_ids)
    return errors


def blocks_text_length(value: Any) -> int:
    """Total characters in every text object (``{"type": plain_text|mrkdwn, "text": str}``) inside ``value``.

    This is the sandbox's estimate of what Slack's undocumented ``msg_blocks_too_long`` check counts.
    """
    if isinstance(value, list):
        return sum(blocks_text_length(item) for item in value)
    if not isinstance(value, dict):
        return 0
    own = len(value["text"]) if value.get("type") in TEXT_TYPES and isinstance(value.get("text"), str) else 0
    return own + sum(blocks_text_length(item) for item in value.values() if isinstance(item, (dict, list)))
