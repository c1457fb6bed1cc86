"""Block Kit, message, modal-view and timing limits that the sandbox enforces the way Slack does.

Each limit is a named constant with the page that states it. Lengths are counted in Python code points
(``len``). Slack may count some characters (emoji) differently, so products should stay below these.

Error messages copy the shape of Slack's ``response_metadata.messages`` entries,
``"[ERROR] <reason> [json-pointer:/blocks/0/text/text]"``. The exact wording is ours, not Slack's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from countersign.sandbox.types import Json

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

#: Blocks in a modal view (messages allow 50). https://docs.slack.dev/reference/block-kit/blocks
MAX_BLOCKS_PER_VIEW = 100
#: Modal ``title``: required, plain_text, at most 24 characters. https://docs.slack.dev/reference/views/modal-views
MAX_VIEW_TITLE = 24
#: Modal ``submit`` label: plain_text, at most 24 characters; required when the view holds an input block.
#: Same modal-views page.
MAX_VIEW_SUBMIT = 24
#: Modal ``close`` label: plain_text, at most 24 characters. Same modal-views page.
MAX_VIEW_CLOSE = 24
#: Modal ``private_metadata`` holds at most 3000 characters. Same modal-views page.
MAX_PRIVATE_METADATA = 3000
#: Modal ``callback_id`` holds at most 255 characters. Same modal-views page.
MAX_CALLBACK_ID = 255
#: Modal ``external_id`` holds at most 255 characters and is unique per workspace. Same modal-views page.
MAX_EXTERNAL_ID = 255
#: views.open / views.update / views.push answer ``view_too_large`` above this many bytes of view JSON.
#: Slack says 250 kB (https://docs.slack.dev/reference/methods/views.push); the sandbox reads that as
#: 250,000 bytes of compact JSON, the stricter of the two readings.
MAX_VIEW_BYTES = 250_000
#: A modal holds its root view plus at most 2 pushed views; one more is ``push_limit_reached``.
#: https://docs.slack.dev/reference/methods/views.push
MAX_VIEW_STACK = 3
#: Input block ``label`` (required) and ``hint``: plain_text, at most 2000 characters.
#: https://docs.slack.dev/reference/block-kit/blocks/input-block
MAX_INPUT_LABEL = 2000
MAX_INPUT_HINT = 2000
#: Input element ``placeholder``: plain_text, at most 150 characters.
#: https://docs.slack.dev/reference/block-kit/block-elements/plain-text-input-element
MAX_PLACEHOLDER = 150
#: plain_text_input ``min_length`` is 0..3000 and ``max_length`` 1..3000. Same plain-text-input page.
MAX_TEXT_INPUT_LENGTH = 3000
#: A ``trigger_id`` must be exchanged (views.open / views.push) within 3 seconds of the interaction that
#: issued it, and only once. https://docs.slack.dev/tools/bolt-python/concepts/opening-modals
TRIGGER_TTL_SECONDS = 3.0
#: Slack waits 3 seconds for the ack of an interaction payload; a later answer is ignored and the user sees
#: an error. https://docs.slack.dev/tools/bolt-python/concepts/acknowledge
ACK_TIMEOUT_SECONDS = 3.0
#: chat.postMessage pacing, when a Sandbox turns it on: Slack allows about 1 message per second per channel
#: and tolerates short bursts (https://docs.slack.dev/apis/web-api/rate-limits). Slack gives no burst size;
#: the sandbox's default allows this many back-to-back posts per channel.
POST_MESSAGE_BURST = 3
#: Web API calls a minute, per method, per workspace, per app, by the method's rate-limit tier (Tier 2:
#: 20+, Tier 3: 50+, Tier 4: 100+), when a Sandbox turns them on: over them Slack answers HTTP 429
#: ``ratelimited`` with ``Retry-After`` (https://docs.slack.dev/apis/web-api/rate-limits; each method's
#: tier is on its reference page). chat.postMessage is "special" (``POST_MESSAGE_BURST`` above).
METHOD_CALLS_PER_MINUTE = {
    "usergroups.users.list": 20,
    "chat.update": 50,
    "conversations.open": 50,
    "conversations.history": 50,
    "chat.postEphemeral": 100,
    "users.info": 100,
    "views.open": 100,
    "views.push": 100,
    "views.update": 100,
}

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


_NUMBER = re.compile(r"-?(\d+(\.\d*)?|\.\d+)")


def parse_number(text: Any) -> Decimal | None:
    """``text`` as a Decimal when it is a plain decimal string like ``"-12.5"``, else None (no exponents)."""
    if not isinstance(text, str) or not _NUMBER.fullmatch(text.strip()):
        return None
    return Decimal(text.strip())


def _error(reason: str, pointer: str) -> str:
    return f"[ERROR] {reason} [json-pointer:{pointer}]"


def _missing(field: str, pointer: str) -> str:
    return _error(f"missing required field: {field}", pointer)


def _check_bool(value: Any, pointer: str) -> list[str]:
    return [] if value is None or isinstance(value, bool) else [_error("must be a boolean", pointer)]


def _check_int(value: Any, pointer: str, minimum: int, maximum: int) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool):
        return [_error("must be an integer", pointer)]
    if not minimum <= value <= maximum:
        return [_error(f"must be between {minimum} and {maximum}", pointer)]
    return []


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


def _check_button(element: Json, pointer: str) -> list[str]:
    errors = _check_text(element.get("text"), f"{pointer}/text", MAX_BUTTON_TEXT, plain_only=True)
    errors += _check_length(element.get("value"), f"{pointer}/value", MAX_BUTTON_VALUE)
    errors += _check_length(element.get("url"), f"{pointer}/url", MAX_BUTTON_URL)
    if "style" in element and element["style"] not in BUTTON_STYLES:
        errors.append(_error("must be one of primary, danger", f"{pointer}/style"))
    return errors


def _check_placeholder(element: Json, pointer: str) -> list[str]:
    if "placeholder" not in element:
        return []
    return _check_text(element["placeholder"], f"{pointer}/placeholder", MAX_PLACEHOLDER, plain_only=True)


def _check_number_input(element: Json, pointer: str) -> list[str]:
    """https://docs.slack.dev/reference/block-kit/block-elements/number-input-element : ``is_decimal_allowed``
    is a required boolean; ``initial_value``, ``min_value`` and ``max_value`` are numbers written as strings
    (JSON numbers fail Slack's schema), and ``min_value`` may not exceed ``max_value``."""
    errors = _check_placeholder(element, pointer)
    if "is_decimal_allowed" not in element:
        errors.append(_missing("is_decimal_allowed", pointer))
    elif not isinstance(element["is_decimal_allowed"], bool):
        errors.append(_error("must be a boolean", f"{pointer}/is_decimal_allowed"))
    numbers: dict[str, Decimal] = {}
    for key in ("initial_value", "min_value", "max_value"):
        if key not in element:
            continue
        if not isinstance(element[key], str):
            errors.append(_error("must be a string", f"{pointer}/{key}"))
        elif (number := parse_number(element[key])) is None:
            errors.append(_error("must be a number written as a string", f"{pointer}/{key}"))
        else:
            numbers[key] = number
    if "min_value" in numbers and "max_value" in numbers and numbers["min_value"] > numbers["max_value"]:
        errors.append(_error("min_value must be less than or equal to max_value", f"{pointer}/min_value"))
    return errors


def _check_text_input(element: Json, pointer: str) -> list[str]:
    """https://docs.slack.dev/reference/block-kit/block-elements/plain-text-input-element : ``min_length``
    0..3000, ``max_length`` 1..3000, string ``initial_value``, boolean ``multiline``. Refusing
    ``min_length > max_length`` is the sandbox's inference (such a field could never be submitted)."""
    low, high = element.get("min_length"), element.get("max_length")
    errors = _check_placeholder(element, pointer)
    errors += _check_int(low, f"{pointer}/min_length", 0, MAX_TEXT_INPUT_LENGTH)
    errors += _check_int(high, f"{pointer}/max_length", 1, MAX_TEXT_INPUT_LENGTH)
    if not errors and low is not None and high is not None and low > high:
        errors.append(_error("min_length must be less than or equal to max_length", f"{pointer}/min_length"))
    if "initial_value" in element and not isinstance(element["initial_value"], str):
        errors.append(_error("must be a string", f"{pointer}/initial_value"))
    return errors + _check_bool(element.get("multiline"), f"{pointer}/multiline")


_ELEMENT_CHECKS: dict[str, Callable[[Json, str], list[str]]] = {
    "button": _check_button,
    "number_input": _check_number_input,
    "plain_text_input": _check_text_input,
}


def _check_element(element: Any, pointer: str) -> list[str]:
    """Check an interactive element: the action_id rule for all, the full rules for the types listed in
    ``_ELEMENT_CHECKS`` (buttons, number_input, plain_text_input)."""
    if not isinstance(element, dict) or not isinstance(element.get("type"), str):
        return [_error("must be an element object", pointer)]
    errors = _check_length(element.get("action_id"), f"{pointer}/action_id", MAX_ACTION_ID, minimum=1)
    check = _ELEMENT_CHECKS.get(element["type"])
    return errors + (check(element, pointer) if check else [])


def _check_section(block: Json, pointer: str) -> list[str]:
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


def _check_header(block: Json, pointer: str) -> list[str]:
    return _check_text(block.get("text"), f"{pointer}/text", MAX_HEADER_TEXT, plain_only=True)


def _check_actions(block: Json, pointer: str) -> list[str]:
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


def _check_context(block: Json, pointer: str) -> list[str]:
    return _check_count(block.get("elements"), f"{pointer}/elements", MAX_CONTEXT_ELEMENTS)


def _check_input(block: Json, pointer: str) -> list[str]:
    """https://docs.slack.dev/reference/block-kit/blocks/input-block : a plain_text ``label`` and an
    ``element`` are required; ``hint`` is optional; ``optional`` and ``dispatch_action`` are booleans."""
    errors = []
    if "label" not in block:
        errors.append(_missing("label", pointer))
    else:
        errors += _check_text(block["label"], f"{pointer}/label", MAX_INPUT_LABEL, plain_only=True)
    if "hint" in block:
        errors += _check_text(block["hint"], f"{pointer}/hint", MAX_INPUT_HINT, plain_only=True)
    if "element" not in block:
        errors.append(_missing("element", pointer))
    else:
        errors += _check_element(block["element"], f"{pointer}/element")
    for key in ("optional", "dispatch_action"):
        errors += _check_bool(block.get(key), f"{pointer}/{key}")
    return errors


_BLOCK_CHECKS: dict[str, Callable[[Json, str], list[str]]] = {
    "section": _check_section,
    "header": _check_header,
    "actions": _check_actions,
    "context": _check_context,
    "input": _check_input,
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


def check_blocks(
    blocks: object, *, maximum: int = MAX_BLOCKS_PER_MESSAGE, pointer: str = "/blocks"
) -> list[str]:
    """Return Slack-style ``[ERROR] ...`` messages for every Block Kit rule ``blocks`` breaks; [] if valid.

    Covers the rules listed in this module: block count (``maximum``: 50 in messages, 100 in views), per-block
    text and field limits, button limits, actions/context element counts, input blocks and their
    number_input / plain_text_input elements, ``block_id`` length and uniqueness, ``action_id`` uniqueness
    within a block, and unknown block types. ``pointer`` prefixes the json-pointers (``/view/blocks`` for
    views). A non-empty result means Slack would answer ``invalid_blocks`` (``invalid_arguments`` for views).
    """
    errors = _check_count(blocks, pointer, maximum)
    seen_ids: set[str] = set()
    for i, block in enumerate(blocks if isinstance(blocks, list) else []):
        errors += _check_block(block, f"{pointer}/{i}", seen_ids)
    return errors


def _check_label(view: Json, key: str, maximum: int, *, required: bool = False) -> list[str]:
    if key not in view:
        return [_missing(key, "/view")] if required else []
    return _check_text(view[key], f"/view/{key}", maximum, plain_only=True)


def check_view(view: Any) -> list[str]:
    """Return Slack-style ``[ERROR] ...`` messages for every modal rule ``view`` breaks; [] if valid.

    Rules (https://docs.slack.dev/reference/views/modal-views): ``type`` is ``"modal"``; ``title`` is
    required plain_text of at most ``MAX_VIEW_TITLE``; ``submit`` / ``close`` are plain_text of at most 24 and
    ``submit`` is required when any block is an input block; ``blocks`` is required, at most
    ``MAX_BLOCKS_PER_VIEW``, and obeys ``check_blocks``; ``private_metadata`` ≤ 3000, ``callback_id`` and
    ``external_id`` ≤ 255 characters; ``clear_on_close`` / ``notify_on_close`` are booleans. A non-empty
    result means Slack would answer ``invalid_arguments``. The size limit (``MAX_VIEW_BYTES``) is separate.
    """
    if not isinstance(view, dict):
        return [_error("must be an object", "/view")]
    errors = [] if view.get("type") == "modal" else [_error("must be modal", "/view/type")]
    errors += _check_label(view, "title", MAX_VIEW_TITLE, required=True)
    return errors + _check_view_fields(view)


def check_home_view(view: Any) -> list[str]:
    """The messages of ``check_view`` for a Home tab's view (views.publish): ``type`` is ``"home"``,
    ``blocks`` as in a modal, and the same lengths; no title, submit or close
    (https://docs.slack.dev/tools/bolt-python/concepts/app-home)."""
    if not isinstance(view, dict):
        return [_error("must be an object", "/view")]
    errors = [] if view.get("type") == "home" else [_error("must be home", "/view/type")]
    return errors + _check_view_fields(view)


def _check_view_fields(view: dict[str, Any]) -> list[str]:
    """What every kind of view is checked for: the modal's labels (when given), the blocks, the
    lengths of its strings and its booleans."""
    errors: list[str] = []
    errors += _check_label(view, "close", MAX_VIEW_CLOSE)
    blocks = view.get("blocks")
    has_input = isinstance(blocks, list) and any(
        isinstance(b, dict) and b.get("type") == "input" for b in blocks
    )
    errors += _check_label(view, "submit", MAX_VIEW_SUBMIT, required=has_input)
    if "blocks" not in view:
        errors.append(_missing("blocks", "/view"))
    else:
        errors += check_blocks(blocks, maximum=MAX_BLOCKS_PER_VIEW, pointer="/view/blocks")
    for key, maximum in (
        ("private_metadata", MAX_PRIVATE_METADATA),
        ("callback_id", MAX_CALLBACK_ID),
        ("external_id", MAX_EXTERNAL_ID),
    ):
        errors += _check_length(view.get(key), f"/view/{key}", maximum)
    for key in ("clear_on_close", "notify_on_close"):
        errors += _check_bool(view.get(key), f"/view/{key}")
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
