"""Validating a reviewer's edit against the policy's `editable` fields and `edit_rule`, and an
agent's payload against the same declarations at intake (`check_payload`, one check: `_value`).

Values arrive as the strings typed into the Edit modal. Decimals are parsed with `Decimal` from a
strict format (digits, optional sign and point: no commas, no exponent, so `1,000` and `1e309`
are refused rather than guessed at), then checked for decimal places and `min`/`max`. The
`edit_rule` is a CEL expression over `edited` and `original` (decimals as doubles); an error in
it refuses the edit (fails closed) and is logged. Reviewers read the rule's label, never its CEL.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import cel

from ..exceptions import CountersignError, InvalidRequest
from ..store import Edit, EditableField, Request
from ..untrusted import json_text
from . import texts

log = logging.getLogger(__name__)

_DECIMAL = re.compile(r"^-?[0-9]+(\.[0-9]+)?$", re.ASCII)
_INTEGER = re.compile(r"^-?[0-9]+$", re.ASCII)
_CR = re.compile(r"\r\n?")
MAX_DIGITS = 30


def block_id(name: str) -> str:
    """The Edit modal's input `block_id` for payload field `name` (errors are keyed by it)."""
    return f"edit-{name}"


@dataclass
class EditCheck:
    """The outcome of `check`: `errors` (`{block_id: message}`, empty when valid), the edited
    `payload` and its `edits` diff (`[{field, from, to}]`, only fields that changed)."""

    errors: dict[str, str] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)
    edits: list[Edit] = field(default_factory=list)


def check_payload(action: str, payload: dict[str, Any], editable: dict[str, EditableField]) -> None:
    """Refuse a payload of class `action` whose field declared in `editable` breaks its declaration,
    by the check the Edit modal makes of a reviewer's value (`_value`): a `decimal` must be a
    decimal string (a JSON number is refused, so money never passes through a float), an `integer`
    a whole JSON number or such a string, a `text` a string; each within its `places`, `min`, `max`
    and `max_length`. A declared field the payload leaves out is refused too: the policy's rules
    read it and the Edit modal edits it, so without it neither could work. Raises `InvalidRequest`
    naming the first bad or missing field, its declaration and what is wrong."""
    for name, spec in editable.items():
        if name not in payload:
            raise InvalidRequest(
                f"payload.{name}: missing, but the policy's editable.{name} of {action} "
                f"({_declared(spec)}) requires it: {_WRONG_TYPE[spec.type]}"
            )
        value = payload[name]
        if spec.type == "decimal" and isinstance(value, int | float) and not isinstance(value, bool):
            raise InvalidRequest(
                f"payload.{name}: a decimal field of {action}, sent as the JSON number {value!r}; send it "
                f'as a string like "{_decimal_text(value, spec.places)}", so that money never passes '
                "through a float"
            )
        text = _as_text(value, spec)
        error = _WRONG_TYPE[spec.type] if text is None else _value(text, spec)[1]
        if error:
            raise InvalidRequest(
                f"payload.{name}: {_shown(value)} breaks the policy's editable.{name} of {action} "
                f"({_declared(spec)}): {error[0].lower()}{error[1:].rstrip('.')}"
            )


_WRONG_TYPE = {
    "decimal": 'send a decimal string like "1234.56"',
    "integer": "send a whole number, as a JSON number or a string",
    "text": "send a string",
}


def _as_text(value: Any, spec: EditableField) -> str | None:
    """A payload value as the text the Edit modal would check, or None when its JSON type is not one
    the field's `type` takes."""
    if isinstance(value, str):
        return value
    if spec.type == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)  # a float such as 5.0 is then refused as not a whole number
    return None


def _shown(value: Any) -> str:
    """`value` as one line of JSON for an error line (`untrusted.json_text`: an agent's controls and
    bidirectional overrides escaped), cut to 40 characters."""
    return texts.clip(json_text(value, indent=None), 40)


def _declared(spec: EditableField) -> str:
    """The field's declaration as written in the policy, e.g. `decimal, places 2, min 0.01`."""
    parts: list[str] = [spec.type]
    bounds = {"places": spec.places, "min": spec.min, "max": spec.max}
    parts += [f"{key} {value}" for key, value in bounds.items() if value is not None]
    if spec.type == "text":
        parts.append(f"max_length {spec.max_length}")
    return ", ".join(parts)


def _decimal_text(value: float, places: int | None) -> str:
    """`value` as the decimal string an agent should send, with `places` decimal places if set (and
    the number is not too large to show them)."""
    number = Decimal(repr(value))
    try:
        return str(number if places is None else number.quantize(Decimal(1).scaleb(-places)))
    except InvalidOperation:
        return str(number)


def _number(raw: str, spec: EditableField) -> tuple[Decimal | None, str | None]:
    pattern = _INTEGER if spec.type == "integer" else _DECIMAL
    if not pattern.match(raw):
        return None, texts.not_a_number(spec.type == "integer")
    value = Decimal(raw)
    if len(value.as_tuple().digits) > MAX_DIGITS:
        return None, texts.too_many_digits(MAX_DIGITS)
    places = spec.places
    if places is not None and -value.normalize().as_tuple().exponent > places:  # type: ignore[operator]
        return None, texts.too_many_places(places)
    if spec.min is not None and value < Decimal(spec.min):
        return None, texts.below_min(spec.min)
    if spec.max is not None and value > Decimal(spec.max):
        return None, texts.above_max(spec.max)
    return value, None


def _typed(value: Decimal, original: Any, spec: EditableField) -> Any:
    """`value` in the JSON type the agent used for the original (string or number)."""
    if spec.places is not None:
        value = value.quantize(Decimal(1).scaleb(-spec.places), context=Context(prec=MAX_DIGITS + 20))
    if isinstance(original, str):
        return str(value)
    return int(value) if spec.type == "integer" else float(value)


def _value(text: str, spec: EditableField) -> tuple[Decimal | str | None, str | None]:
    """The one check of a field's value against its declaration, for the Edit modal (`_parse`) and
    intake (`check_payload`): `(value, None)`, a `Decimal` for numbers, or `(None, error)` in the
    reviewer's words (`texts`)."""
    if spec.type == "text":
        limit = spec.max_length
        return (text, None) if len(text) <= limit else (None, texts.too_long(limit))
    return _number(text, spec)


def _parse(raw: str | None, original: Any, spec: EditableField) -> tuple[Any, str | None]:
    """The value typed for one field, checked (`_value`): a text exactly as typed (its line breaks
    and spaces are the reviewer's, and an untouched value is no edit, even when the original's CRLF
    or CR line breaks come back as LF, as a browser's textarea gives them: the HTML standard's
    "normalize newlines" of a textarea's value), a number without the white space around it;
    `(None, error)` for nothing but white space."""
    text = raw or ""
    if not text.strip():
        return None, texts.ENTER_A_VALUE
    if spec.type == "text" and isinstance(original, str) and _CR.sub("\n", original) == text:
        return original, None  # shown untouched: a browser gives a textarea's CRLF and CR back as LF
    if spec.type != "text":
        text = text.strip()
    value, error = _value(text, spec)
    if error or not isinstance(value, Decimal):
        return value, error
    return _typed(value, original, spec), None


class InexactNumber(CountersignError, ValueError):
    """A number CEL would see as a different double than the decimal the reviewer typed."""


def _exact_double(value: Any) -> float:
    """`value` (a decimal string or number) as a double, only if the double stands for exactly that
    decimal (its shortest repr is numerically equal). Between such doubles, comparisons agree with
    the decimals', so an `edit_rule` cannot be fooled by rounding (2**53 + 1 is not 2**53)."""
    decimal = Decimal(str(value))
    double = float(decimal)
    if Decimal(repr(double)) != decimal:
        raise InexactNumber(str(value))
    return double


def _for_cel(payload: dict[str, Any], editable: dict[str, EditableField]) -> dict[str, Any]:
    """The payload as CEL sees it: decimal and integer fields as exact doubles (CEL has no decimal)."""
    converted = dict(payload)
    for name, spec in editable.items():
        if spec.type != "text" and isinstance(converted.get(name), (str, int, float)):
            converted[name] = _exact_double(converted[name])
    return converted


def _rule_error(request: Request, rule: str, edited: dict[str, Any]) -> str | None:
    editable, label = request.rules.editable, request.rules.edit_rule_label
    try:
        allowed = cel.evaluate(
            rule, {"original": _for_cel(request.payload, editable), "edited": _for_cel(edited, editable)}
        )
    except InexactNumber:
        return texts.EDIT_RULE_INEXACT
    except Exception as exc:
        log.warning(
            "request %s: edit_rule could not be evaluated (%s): %s: %s",
            request.id,
            rule,
            type(exc).__name__,
            exc,
        )
        return texts.edit_rule_failed(label)
    return None if allowed is True else texts.edit_not_allowed(label)


def check(request: Request, values: dict[str, str | None]) -> EditCheck:
    """Validate the Edit modal's `values` (`{block_id: typed text or None}`) for `request`."""
    editable = request.rules.editable
    original = request.payload
    result = EditCheck(payload=dict(original))
    for name, spec in editable.items():
        value, error = _parse(values.get(block_id(name)), original.get(name), spec)
        if error:
            result.errors[block_id(name)] = error
        else:
            result.payload[name] = value
    if result.errors:
        return result
    result.edits = [
        {"field": name, "from": original.get(name), "to": result.payload[name]}
        for name in editable
        if result.payload[name] != original.get(name)
    ]
    rule = request.rules.edit_rule
    if rule and (error := _rule_error(request, rule, result.payload)):
        changed = [e["field"] for e in result.edits] or list(editable)
        result.errors = {block_id(name): error for name in changed}
    return result
