"""Reading Slack's bodies (`bot.payload`): the few fields countersign uses are read defensively, so
odd values that pass the guard become a request id of "" (a request countersign does not know) or
an input value of None, never an exception."""

from __future__ import annotations

from typing import Any

import pytest

from countersign.bot import payload
from countersign.bot.payload import MAX_REQUEST_ID
from countersign.router.cards import APPROVE_ACTION

REQUEST_ID = "01J00000000000000000000000"


def click_body(**changes: Any) -> dict[str, Any]:
    """A `block_actions` body of a click on a card's Approve button, with `changes` to its action (a
    value of `...` leaves that key out)."""
    action = {"action_id": APPROVE_ACTION, "value": REQUEST_ID, **changes}
    return {
        "type": "block_actions",
        "user": {"id": "U0LEAD", "username": "lee.lead"},
        "actions": [{k: v for k, v in action.items() if v is not ...}],
        "channel": {"id": "C0FINANCE"},
        "trigger_id": "1.2.abc",
    }


def submit_body(**view: Any) -> dict[str, Any]:
    """A `view_submission` body of a countersign modal, its `view` holding `view` (a value of `...`
    leaves that key out)."""
    return {
        "type": "view_submission",
        "user": {"id": "U0ALICE", "name": "alice"},
        "view": {"callback_id": "countersign_edit", **{k: v for k, v in view.items() if v is not ...}},
    }


def test_a_click_gives_the_button_the_request_the_user_and_where() -> None:
    click = payload.click(click_body())
    assert (click.action_id, click.request_id, click.channel, click.trigger_id) == (
        APPROVE_ACTION,
        REQUEST_ID,
        "C0FINANCE",
        "1.2.abc",
    )
    assert click.user == {"slack_user_id": "U0LEAD", "name": "lee.lead"}
    assert payload.click(click_body(value="x" * MAX_REQUEST_ID)).request_id == "x" * MAX_REQUEST_ID


@pytest.mark.parametrize(
    "value",
    [..., None, 42, 1.5, True, [REQUEST_ID], {"id": REQUEST_ID}, "x" * (MAX_REQUEST_ID + 1)],
    ids=["missing", "null", "int", "float", "bool", "list", "object", "over_long"],
)
def test_a_click_with_a_malformed_request_id_reads_as_an_unknown_request(value: Any) -> None:
    assert payload.click(click_body(value=value)).request_id == ""


def test_a_click_without_a_channel_or_trigger_reads_as_none_and_empty() -> None:
    body = click_body()
    del body["channel"], body["trigger_id"]
    click = payload.click(body)
    assert (click.channel, click.trigger_id) == (None, "")
    assert payload.click({**body, "container": {"channel_id": "C0AP"}}).channel == "C0AP"


def test_the_user_is_named_by_username_else_name_else_id() -> None:
    assert payload.user({"user": {"id": "U0A", "username": "a", "name": "b"}})["name"] == "a"
    assert payload.user({"user": {"id": "U0A", "name": "b"}})["name"] == "b"
    assert payload.user({"user": {"id": "U0A"}}) == {"slack_user_id": "U0A", "name": "U0A"}


def test_a_submit_gives_the_request_the_user_and_the_typed_values() -> None:
    state = {
        "values": {
            "edit-amount": {"value": {"type": "number_input", "value": "400"}},
            "reason": {"value": {"type": "plain_text_input", "value": None}},  # left empty
        }
    }
    submission = payload.view_submission(submit_body(private_metadata=REQUEST_ID, state=state))
    assert submission.request_id == REQUEST_ID
    assert submission.user == {"slack_user_id": "U0ALICE", "name": "alice"}
    assert submission.values == {"edit-amount": "400", "reason": None}


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param(..., id="missing"),
        pytest.param(None, id="null"),
        pytest.param("", id="empty"),
        pytest.param(42, id="int"),
        pytest.param({"id": REQUEST_ID}, id="object"),
        pytest.param([REQUEST_ID], id="list"),
        pytest.param("x" * (MAX_REQUEST_ID + 1), id="over_long"),
    ],
)
def test_a_submit_with_a_malformed_request_id_reads_as_an_unknown_request(metadata: Any) -> None:
    assert payload.view_submission(submit_body(private_metadata=metadata)).request_id == ""


@pytest.mark.parametrize(
    "state",
    [..., None, "values", [], {"values": None}, {"values": []}, {"values": "edit-amount"}],
    ids=["missing", "null", "string", "list", "values_null", "values_list", "values_string"],
)
def test_a_submit_without_a_readable_state_has_no_values(state: Any) -> None:
    assert payload.view_submission(submit_body(private_metadata=REQUEST_ID, state=state)).values == {}


@pytest.mark.parametrize(
    "entry",
    [
        None,
        "400",
        ["400"],
        {},
        {"value": None},
        {"value": "400"},
        {"value": {}},
        {"value": {"value": 400}},
        {"value": {"value": ["400"]}},
        {"other": {"value": "400"}},
    ],
)
def test_a_malformed_input_entry_reads_as_none(entry: Any) -> None:
    state = {"values": {"edit-amount": entry, "edit-memo": {"value": {"value": "kept"}}}}
    values = payload.view_submission(submit_body(private_metadata=REQUEST_ID, state=state)).values
    assert values == {"edit-amount": None, "edit-memo": "kept"}
