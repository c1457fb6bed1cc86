"""Edit values are validated with Decimal, the policy's bounds and its CEL edit rule."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from countersign.exceptions import InvalidRequest
from countersign.router.edits import block_id, check, check_payload
from countersign.store import EditableField
from tests.helpers.builders import request

RULES = {
    "editable": {"amount": {"type": "decimal", "places": 2, "min": "0.01"}},
    "edit_rule": "edited.amount <= original.amount",
}
FORMAT = (
    "Enter a number like 1234.56 or 0.5: digits, with at most one point between them; no commas or exponents."
)
RULE = "The policy's edit rule does not allow this edit."  # no label: plain words, never the CEL


def edit(value: str | None, rules: dict[str, Any] = RULES, payload: dict[str, Any] | None = None) -> Any:
    return check(
        request(rules=rules, payload=payload or {"amount": "512.40", "currency": "USD"}),
        {block_id("amount"): value},
    )


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("abc", FORMAT),
        ("1,000", FORMAT),
        ("1e309", FORMAT),
        ("NaN", FORMAT),
        (".5", FORMAT),  # a point between digits, as the error says
        ("100.", FORMAT),
        ("+5", FORMAT),
        ("12.345", "Use at most 2 decimal places."),
        ("-5", "Must be at least 0.01."),
        ("0", "Must be at least 0.01."),
        ("", "Enter a value."),
        (None, "Enter a value."),
        ("512.41", RULE),
        ("100000", RULE),
    ],
)
def test_bad_values_get_an_error_on_their_input_block(value: str | None, error: str) -> None:
    assert edit(value).errors == {"edit-amount": error}


def test_valid_edit_gives_the_new_payload_and_the_diff() -> None:
    result = edit(" 400 ")
    assert result.errors == {}
    assert result.payload == {"amount": "400.00", "currency": "USD"}
    assert result.edits == [{"field": "amount", "from": "512.40", "to": "400.00"}]
    assert edit("512.40").edits == []  # unchanged: an approval without edits


def test_numbers_keep_the_agents_json_type() -> None:
    assert edit("12.5", payload={"amount": 20}).payload["amount"] == 12.5
    assert edit("7", rules={"editable": {"amount": {"type": "integer"}}}, payload={"amount": 9}).payload == {
        "amount": 7
    }


def test_a_labelled_rule_is_quoted_by_its_label() -> None:
    labelled = {**RULES, "edit_rule_label": "a refund may be lowered, never raised"}
    assert edit("600", rules=labelled).errors == {
        "edit-amount": "The policy does not allow this edit: a refund may be lowered, never raised."
    }


@pytest.mark.parametrize(
    ("label", "error"),
    [
        (None, "The policy's edit rule could not be evaluated, so the edit is refused."),
        (
            "amounts only go down",
            "The policy's edit rule (amounts only go down) could not be evaluated, so the edit is refused.",
        ),
    ],
)
def test_a_broken_rule_refuses_the_edit_and_logs_the_cel_error(
    caplog: pytest.LogCaptureFixture, label: str | None, error: str
) -> None:
    broken = {**RULES, "edit_rule": "edited.nosuchfield < 1", "edit_rule_label": label}
    with caplog.at_level(logging.WARNING, logger="countersign.router.edits"):
        result = edit("400", rules=broken)
    assert result.errors == {"edit-amount": error}
    assert caplog.messages == [
        "request 01J00000000000000000000000: edit_rule could not be evaluated (edited.nosuchfield < 1): "
        "KeyError: 'nosuchfield'"
    ]


def test_text_fields_have_a_length_limit() -> None:
    rules = {"editable": {"memo": {"type": "text", "max_length": 5}}}
    assert check(request(rules=rules, payload={"memo": "hi"}), {"edit-memo": "toolong"}).errors == {
        "edit-memo": "Use at most 5 characters."
    }


@pytest.mark.parametrize(
    ("original", "edited", "error"),
    [
        ("9007199254740992.00", "9007199254740993.00", "too many digits for the policy's edit rule"),
        ("120.00", "120.000000000000001", "too many digits for the policy's edit rule"),
        ("120.00", "9" * 38, "Use at most 30 digits."),
        ("120.00", "١٢٣", FORMAT),  # digits of other scripts are not read as numbers
    ],
)
def test_rule_is_checked_exactly_or_not_at_all(original: str, edited: str, error: str) -> None:
    rules = {"editable": {"amount": {"type": "decimal"}}, "edit_rule": "edited.amount <= original.amount"}
    result = edit(edited, rules=rules, payload={"amount": original})
    assert error in result.errors["edit-amount"]


def test_huge_value_with_places_is_an_inline_error_not_a_crash() -> None:
    assert edit("99999999999999999999999999999999999999").errors == {"edit-amount": "Use at most 30 digits."}
    assert edit("1" * 29, rules={"editable": {"amount": {"type": "decimal", "places": 2}}}).payload[
        "amount"
    ] == ("1" * 29 + ".00")


def test_a_whole_number_field_says_exactly_what_it_takes() -> None:
    whole = {"editable": {"amount": {"type": "integer", "min": "1"}}}
    error = "Enter a whole number like 1234: digits only, no point, commas or exponents."
    for typed in ("7.5", "7.", "1e3"):
        assert edit(typed, rules=whole, payload={"amount": 9}).errors == {"edit-amount": error}


SEATS = {
    "seats": EditableField(type="integer", min="1", max="500"),
    "note": EditableField(type="text", max_length=20),
}


SEATS_OF = "breaks the policy's editable.seats of add_seats (integer, min 1, max 500)"
NOTE_OF = "breaks the policy's editable.note of add_seats (text, max_length 20)"
WHOLE = "enter a whole number like 1234: digits only, no point, commas or exponents"


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"seats": 12, "note": "renewal"}, None),
        ({"seats": "12", "note": ""}, None),  # a whole number as a string, as the Edit modal would keep it
        (
            {"note": "renewal"},  # left out: the rules could not read it nor a reviewer edit it
            "payload.seats: missing, but the policy's editable.seats of add_seats (integer, min 1, max 500) "
            "requires it: send a whole number, as a JSON number or a string",
        ),
        (
            {"seats": 12},
            "payload.note: missing, but the policy's editable.note of add_seats (text, max_length 20) "
            "requires it: send a string",
        ),
        ({"seats": 0, "note": ""}, f"payload.seats: 0 {SEATS_OF}: must be at least 1"),
        ({"seats": "501", "note": ""}, f'payload.seats: "501" {SEATS_OF}: must be at most 500'),
        ({"seats": 12.0, "note": ""}, f"payload.seats: 12.0 {SEATS_OF}: {WHOLE}"),
        (
            {"seats": True, "note": ""},
            (f"payload.seats: true {SEATS_OF}: send a whole number, as a JSON number or a string"),
        ),
        ({"seats": 1, "note": 5}, f"payload.note: 5 {NOTE_OF}: send a string"),
        ({"seats": 1, "note": "x" * 50}, f'payload.note: "{"x" * 38}… {NOTE_OF}: use at most 20 characters'),
    ],
)
def test_intake_holds_a_payload_to_its_declared_fields_by_the_modals_check(
    payload: dict[str, Any], error: str | None
) -> None:
    if error is None:
        check_payload("add_seats", payload, SEATS)
        return
    with pytest.raises(InvalidRequest) as refused:
        check_payload("add_seats", payload, SEATS)
    assert str(refused.value) == error
