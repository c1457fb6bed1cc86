"""views.* over HTTP (``webapi.views``, ``viewstore``): opening a modal from a click's trigger_id,
trigger_id rules, views.update and views.push.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from slack_sdk import WebClient

from countersign.sandbox import Sandbox
from countersign.sandbox.limits import MAX_VIEW_STACK, TRIGGER_TTL_SECONDS

from .builders import CHANNEL, card, modal, open_modal, payment_modal, plain, section
from .harness import FakeClock, Receiver, api_error


def test_click_then_views_open_shows_the_modal_to_the_clicker(
    client: WebClient, sb: Sandbox, receiver: Receiver
) -> None:
    opened: list[dict] = []
    receiver.on_payload = lambda payload: opened.append(
        client.views_open(trigger_id=payload["trigger_id"], view=payment_modal())["view"]
    )
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    assert sb.click(CHANNEL, ts, "approve", "U0ALICE") == (200, "")

    [view] = opened
    assert re.fullmatch(r"V[A-Z0-9]{10}", view["id"])
    assert view["hash"]
    assert view["state"] == {"values": {}}
    assert (view["team_id"], view["app_id"], view["type"]) == ("T0SANDBOX", "A0SANDBOX", "modal")
    assert view["callback_id"] == "approve_payment"
    assert view["private_metadata"] == '{"request_id":"req-1"}'
    assert view["root_view_id"] == view["id"]
    assert view["previous_view_id"] is None
    assert [b["block_id"] for b in view["blocks"]] == ["intro", "amount", "reason"]
    [record] = sb.views("U0ALICE")
    assert (record["id"], record["user"], record["view"], record["errors"]) == (
        view["id"],
        "U0ALICE",
        view,
        {},
    )
    assert sb.views("U0BOB") == []


def test_views_open_takes_a_json_string_and_fills_in_ids(
    client: WebClient, trigger: Callable[..., str]
) -> None:
    view = modal({"type": "input", "label": plain("Why?"), "element": {"type": "plain_text_input"}})
    answer = client.api_call("views.open", params={"trigger_id": trigger(), "view": json.dumps(view)})
    [block] = answer["view"]["blocks"]
    assert block["block_id"] and block["element"]["action_id"], "Slack fills in missing ids"


def test_trigger_ids_are_single_use_and_expire(
    client: WebClient, sb: Sandbox, clock: FakeClock, trigger: Callable[..., str]
) -> None:
    """Unknown, used and expired trigger_ids are refused with Slack's codes; a trigger exactly
    ``TRIGGER_TTL_SECONDS`` old, or within a raised ``trigger_ttl_seconds``, still opens a modal (those
    views.open calls raise SlackApiError if refused). The fake clock moves; nothing sleeps."""

    def error(trigger_id: str) -> str:
        return api_error(lambda: client.views_open(trigger_id=trigger_id, view=payment_modal()))["error"]

    assert error("1.2.never-issued") == "invalid_trigger_id"

    used = trigger()
    client.views_open(trigger_id=used, view=payment_modal())
    assert error(used) == "exchanged_trigger_id"

    late = trigger()
    clock.advance(TRIGGER_TTL_SECONDS + 0.001)
    assert error(late) == "expired_trigger_id"

    just_in_time = trigger()
    clock.advance(TRIGGER_TTL_SECONDS)
    client.views_open(trigger_id=just_in_time, view=payment_modal())

    sb.trigger_ttl_seconds = 60.0
    patient = trigger()
    clock.advance(30)
    client.views_open(trigger_id=patient, view=payment_modal())


def test_a_refused_view_leaves_the_trigger_usable(client: WebClient, trigger: Callable[..., str]) -> None:
    """A views.open refused for its view leaves the trigger_id unused: the second views.open with the
    same trigger_id succeeds (it raises SlackApiError otherwise)."""
    trigger_id = trigger()
    bad = api_error(lambda: client.views_open(trigger_id=trigger_id, view=modal(title="x" * 25)))
    assert bad["error"] == "invalid_arguments"
    client.views_open(trigger_id=trigger_id, view=payment_modal())


def test_views_update_replaces_the_view_and_checks_the_hash(
    client: WebClient, sb: Sandbox, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger, payment_modal(external_id="pay-req-1"))
    updated = client.views_update(
        view_id=opened["id"], hash=opened["hash"], view=modal(section("Checking…"), title="Please wait")
    )["view"]
    assert updated["id"] == opened["id"]
    assert updated["hash"] != opened["hash"]
    assert updated["title"]["text"] == "Please wait"
    assert sb.views("U0ALICE")[0]["view"] == updated

    stale = api_error(
        lambda: client.views_update(view_id=opened["id"], hash=opened["hash"], view=payment_modal())
    )
    assert stale["error"] == "hash_conflict"
    by_external_id = client.views_update(external_id="pay-req-1", view=payment_modal(external_id="pay-req-1"))
    assert by_external_id["view"]["id"] == opened["id"]
    assert api_error(lambda: client.views_update(view_id="VNOSUCHVIEW", view=payment_modal()))["error"] == (
        "not_found"
    )


def test_views_update_keeps_typed_input_with_the_same_ids(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str]
) -> None:
    opened = open_modal(client, trigger)
    receiver.reply = lambda payload: (
        200,
        json.dumps({"response_action": "errors", "errors": {"amount": "No"}}),
    )
    sb.submit_view(opened["id"], "U0ALICE", {"amount": "7"})
    view = payment_modal()
    view["blocks"][2]["element"]["action_id"] = "renamed"
    updated = client.views_update(view_id=opened["id"], view=view)["view"]
    assert updated["state"]["values"] == {"amount": {"amount_input": {"type": "number_input", "value": "7"}}}
    assert sb.views("U0ALICE")[0]["errors"] == {}, "an update clears the errors"


def test_views_push_stacks_up_to_root_plus_two(
    client: WebClient, sb: Sandbox, trigger: Callable[..., str]
) -> None:
    assert (
        api_error(lambda: client.views_push(trigger_id=trigger(), view=payment_modal()))["error"]
        == "not_found"
    )
    root = open_modal(client, trigger)
    pushed = [
        client.views_push(trigger_id=trigger(), view=payment_modal())["view"]
        for _ in range(MAX_VIEW_STACK - 1)
    ]
    assert pushed[0]["previous_view_id"] == root["id"]
    assert pushed[1]["root_view_id"] == root["id"]
    assert [v["id"] for v in sb.views("U0ALICE")] == [root["id"], pushed[0]["id"], pushed[1]["id"]]
    error = api_error(lambda: client.views_push(trigger_id=trigger(), view=payment_modal()))
    assert error["error"] == "push_limit_reached"
