"""Modal views as Slack handles them (https://docs.slack.dev/surfaces/modals): pure helpers on view dicts.

``decode_view`` validates a ``view`` argument; ``state_values`` builds the ``view.state.values`` of a
submission; ``client_errors`` applies the checks Slack's client makes before it sends a submission;
``carry_state`` keeps typed input across ``views.update``; ``parse_answer`` reads the bot's answer to a
``view_submission``. The open views themselves (ids, hashes, stacks) are kept by ``viewstore.ViewStore``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from countersign.sandbox.blocks import fill_ids
from countersign.sandbox.limits import MAX_VIEW_BYTES, check_home_view, check_view, parse_number
from countersign.sandbox.types import Json

#: Input elements whose state is ``{"type", "value"}``; the sandbox can submit values only for these.
#: https://docs.slack.dev/reference/interaction-payloads/view-interactions-payload
VALUE_ELEMENTS = frozenset({"plain_text_input", "number_input", "email_text_input", "url_text_input"})
#: The ``response_action`` values a bot may answer a view_submission with. https://docs.slack.dev/surfaces/modals
RESPONSE_ACTIONS = frozenset({"errors", "update", "push", "clear"})


class ViewError(Exception):
    """A views.* failure: ``error`` is Slack's code (``invalid_arguments``, ``not_found``, ...) and
    ``messages`` the ``response_metadata.messages`` that go with it (may be empty)."""

    def __init__(self, error: str, messages: list[str] | None = None) -> None:
        super().__init__(error if not messages else f"{error}: {'; '.join(messages)}")
        self.error = error
        self.messages = messages or []


class SubmissionRefused(ValueError):
    """Slack's client refused to send a submission (required field empty, number out of range, ...).

    ``errors`` maps input ``block_id`` -> the message shown under that input. Nothing reached the bot.
    """

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(f"the modal shows errors and was not submitted: {errors}")
        self.errors = errors


def decode_view(raw: Any, home: bool = False) -> Json:
    """The ``view`` argument of views.open / views.update / views.push, validated, with ids filled in.

    ``raw`` is a dict or its JSON string (form-encoded calls carry JSON that way). Raises ViewError:
    ``invalid_arguments`` (missing, not JSON, or any ``limits.check_view`` rule, with the messages) or
    ``view_too_large`` (over ``MAX_VIEW_BYTES`` bytes of JSON; https://docs.slack.dev/reference/methods/views.push).
    With ``home``, the view of a Home tab (views.publish: ``limits.check_home_view``).
    """
    if raw is None or raw == "":
        raise ViewError("invalid_arguments", ["[ERROR] missing required field: view [json-pointer:/view]"])
    if isinstance(raw, str):
        size = len(raw.encode())
        try:
            view = json.loads(raw)
        except ValueError:
            raise ViewError(
                "invalid_arguments", ["[ERROR] failed to parse JSON [json-pointer:/view]"]
            ) from None
    else:
        view = raw
        size = len(json.dumps(view, separators=(",", ":"), default=str).encode())
    if size > MAX_VIEW_BYTES:
        raise ViewError("view_too_large")
    problems = check_home_view(view) if home else check_view(view)
    if problems:
        raise ViewError("invalid_arguments", problems)
    return {**copy.deepcopy(view), "blocks": fill_ids(view["blocks"])}


def input_blocks(view: Json) -> list[tuple[Json, Json]]:
    """``(block, element)`` for every input block of a (filled-in) view, in order."""
    return [(b, b["element"]) for b in view.get("blocks", []) if b.get("type") == "input"]


def _typed(values: dict[str, str | None], block_id: str) -> str | None:
    value = values.get(block_id)
    return None if value is None or value == "" else str(value)


def state_values(view: Json, values: dict[str, str | None]) -> dict[str, dict[str, Json]]:
    """``view.state.values`` of a submission: ``{block_id: {action_id: {"type": element type, "value":
    str | None}}}`` for every input block, ``None`` where ``values`` has nothing (or ``""``) for it.

    Elements outside ``VALUE_ELEMENTS`` (selects, date pickers, ...) appear as ``{"type"}`` only. Raises
    ValueError when ``values`` names a block that is not an input of this view or gives a value for an
    element the sandbox cannot fill.
    """
    inputs = {block["block_id"]: element for block, element in input_blocks(view)}
    unknown = sorted(set(values) - set(inputs))
    if unknown:
        raise ValueError(f"not input blocks of view {view.get('id')}: {unknown}")
    state: dict[str, dict[str, Json]] = {}
    for block_id, element in inputs.items():
        entry: Json = {"type": element["type"]}
        if element["type"] in VALUE_ELEMENTS:
            entry["value"] = _typed(values, block_id)
        elif _typed(values, block_id) is not None:
            raise ValueError(f"the sandbox cannot type into a {element['type']} (block {block_id})")
        state[block_id] = {element["action_id"]: entry}
    return state


def _number_error(element: Json, text: str) -> str | None:
    number = parse_number(text)
    if number is None:
        return "Enter a number."
    if not element.get("is_decimal_allowed") and number != number.to_integral_value():
        return "Enter a whole number."
    low, high = parse_number(element.get("min_value")), parse_number(element.get("max_value"))
    if (low is not None and number < low) or (high is not None and number > high):
        if low is not None and high is not None:
            return f"Enter a number between {low} and {high}."
        return f"Enter a number of at least {low}." if low is not None else f"Enter a number up to {high}."
    return None


def _length_error(element: Json, text: str) -> str | None:
    low, high = element.get("min_length"), element.get("max_length")
    if low is not None and len(text) < low:
        return f"Enter at least {low} characters."
    if high is not None and len(text) > high:
        return f"Enter at most {high} characters."
    return None


def client_errors(view: Json, values: dict[str, str | None]) -> dict[str, str]:
    """The errors Slack's client shows instead of submitting: ``{block_id: message}``; {} when it submits.

    Documented client checks: an input block is required unless ``optional`` is true
    (https://docs.slack.dev/reference/block-kit/blocks/input-block); plain_text_input ``min_length`` /
    ``max_length`` (https://docs.slack.dev/reference/block-kit/block-elements/plain-text-input-element);
    number_input must hold a number, whole unless ``is_decimal_allowed``, within ``min_value`` ..
    ``max_value`` (https://docs.slack.dev/reference/block-kit/block-elements/number-input-element).
    The wording of the messages is the sandbox's own.
    """
    errors: dict[str, str] = {}
    for block, element in input_blocks(view):
        text = _typed(values, block["block_id"])
        if text is None:
            problem = None if block.get("optional") else "Please complete this required field."
        elif element["type"] == "number_input":
            problem = _number_error(element, text)
        elif element["type"] == "plain_text_input":
            problem = _length_error(element, text)
        else:
            problem = None
        if problem:
            errors[block["block_id"]] = problem
    return errors


def carry_state(old_values: dict[str, dict[str, Json]], blocks: list[Json]) -> dict[str, dict[str, Json]]:
    """The part of ``old_values`` (a ``state.values``) that survives an update to ``blocks``.

    Slack keeps what the user typed into an input whose ``block_id`` and ``action_id`` stay the same across
    views.update (https://docs.slack.dev/reference/views/modal-views); other input is dropped.
    """
    kept: dict[str, dict[str, Json]] = {}
    for block in blocks:
        if block.get("type") != "input":
            continue
        action_id = block["element"]["action_id"]
        old = old_values.get(block["block_id"], {})
        if action_id in old and old[action_id].get("type") == block["element"]["type"]:
            kept[block["block_id"]] = {action_id: copy.deepcopy(old[action_id])}
    return kept


def parse_answer(body: str) -> Json:
    """The bot's answer to a view_submission as a dict: ``{}`` for an empty body (close the view).

    Otherwise ``{"response_action": "errors" | "update" | "push" | "clear", ...}`` as documented at
    https://docs.slack.dev/surfaces/modals . Raises ValueError for a body that is not a JSON object, an
    unknown ``response_action``, ``errors`` that is not a non-empty ``{block_id: message}`` object, or
    ``update`` / ``push`` without a ``view``.
    """
    if not body.strip():
        return {}
    try:
        answer = json.loads(body)
    except ValueError:
        raise ValueError("the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise ValueError("the answer is not a JSON object")
    action = answer.get("response_action")
    if action is None:
        return answer
    if action not in RESPONSE_ACTIONS:
        raise ValueError(f"unknown response_action {action!r}")
    errors = answer.get("errors")
    if action == "errors" and not (
        isinstance(errors, dict) and errors and all(isinstance(v, str) for v in errors.values())
    ):
        raise ValueError("response_action errors needs a non-empty errors object of strings")
    if action in ("update", "push") and "view" not in answer:
        raise ValueError(f"response_action {action} needs a view")
    return answer
