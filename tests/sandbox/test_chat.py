"""chat.* over HTTP (``webapi.chat``): posting, updating and ephemeral messages, pacing, and the
copies ``Sandbox.messages`` returns.
"""

from __future__ import annotations

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from countersign.sandbox import Sandbox, SandboxServer, serve

from .builders import CHANNEL, SECRET, card, section
from .harness import FakeClock, api_error


def test_post_message_stores_the_card(client: WebClient, sb: Sandbox) -> None:
    metadata = {"event_type": "approval_requested", "event_payload": {"request_id": "req-1"}}
    answer = client.chat_postMessage(
        channel=CHANNEL, text="Approval needed", blocks=card(), metadata=metadata
    )
    assert answer["channel"] == CHANNEL
    assert answer["message"]["bot_id"] == "B0BOT"
    [stored] = sb.messages(CHANNEL)
    assert stored["ts"] == answer["ts"]
    assert stored["text"] == "Approval needed"
    assert stored["metadata"] == metadata
    assert stored["user"] == "U0BOT"
    assert stored["edited"] is False
    assert stored["thread_ts"] is None
    assert [b["block_id"] for b in stored["blocks"][1:]] == ["summary", "decision"]
    assert stored["blocks"][0]["block_id"], "Slack fills in missing block_ids"
    assert sb.messages("C0OTHER") == []


def test_ts_values_are_unique_and_increasing(client: WebClient) -> None:
    stamps = [client.chat_postMessage(channel=CHANNEL, text=f"m{i}")["ts"] for i in range(20)]
    assert stamps == sorted(stamps, key=float)
    assert len(set(stamps)) == len(stamps)
    assert all(len(ts.split(".")[1]) == 6 for ts in stamps)


def test_update_replaces_blocks_and_marks_edited(client: WebClient, sb: Sandbox) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    new_blocks = [section("Approved by <@U0ALICE>", block_id="done")]
    answer = client.chat_update(channel=CHANNEL, ts=ts, text="Approved", blocks=new_blocks)
    assert (answer["channel"], answer["ts"], answer["text"]) == (CHANNEL, ts, "Approved")
    [stored] = sb.messages(CHANNEL)
    assert stored["blocks"] == new_blocks
    assert stored["text"] == "Approved"
    assert stored["edited"] is True


def test_text_only_update_drops_the_blocks(client: WebClient, sb: Sandbox) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]
    client.chat_update(channel=CHANNEL, ts=ts, text="Expired")
    [stored] = sb.messages(CHANNEL)
    assert (stored["text"], stored["blocks"]) == ("Expired", [])


def test_update_errors(client: WebClient, sb: Sandbox) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="hello")["ts"]
    assert api_error(lambda: client.chat_update(channel=CHANNEL, ts="1.000001", text="x"))["error"] == (
        "message_not_found"
    )
    assert api_error(lambda: client.chat_update(channel="C0OTHER", ts=ts, text="x"))["error"] == (
        "message_not_found"
    )
    human_ts = sb.add_user_message(CHANNEL, "U0ALICE", "I typed this")
    assert api_error(lambda: client.chat_update(channel=CHANNEL, ts=human_ts, text="x"))["error"] == (
        "cant_update_message"
    )


def test_post_message_needs_channel_and_content(client: WebClient) -> None:
    assert api_error(lambda: client.chat_postMessage(channel="", text="x"))["error"] == "channel_not_found"
    assert (
        api_error(lambda: client.api_call("chat.postMessage", json={"channel": CHANNEL}))["error"]
        == "no_text"
    )


def test_post_ephemeral(client: WebClient, sb: Sandbox) -> None:
    answer = client.chat_postEphemeral(channel=CHANNEL, user="U0BOB", text="Only approvers can decide")
    assert answer["message_ts"]
    assert sb.ephemerals("U0BOB") == [
        {
            "channel": CHANNEL,
            "user": "U0BOB",
            "text": "Only approvers can decide",
            "blocks": [],
            "ts": answer["message_ts"],
        }
    ]
    assert sb.ephemerals("U0ALICE") == []
    assert sb.messages() == []
    error = api_error(lambda: client.chat_postEphemeral(channel=CHANNEL, user="U0NOBODY", text="x"))
    assert error["error"] == "user_not_found"


def test_post_ephemeral_to_someone_outside_a_channel_with_listed_members(
    client: WebClient, sb: Sandbox
) -> None:
    """Slack refuses an ephemeral message to a user who is not in the channel
    (https://docs.slack.dev/reference/methods/chat.postEphemeral: `user_not_in_channel`); the sandbox
    does for a channel whose members it lists, and takes anyone in the others."""
    sb.channel_members["C0FINLEADS"] = ["U0LEAD", "U0BOB"]
    error = api_error(lambda: client.chat_postEphemeral(channel="C0FINLEADS", user="U0ALICE", text="x"))
    assert error["error"] == "user_not_in_channel"
    assert client.chat_postEphemeral(channel="C0FINLEADS", user="U0BOB", text="x")["ok"]
    assert client.chat_postEphemeral(channel=CHANNEL, user="U0ALICE", text="x")["ok"]
    assert [e["user"] for e in sb.ephemerals()] == ["U0BOB", "U0ALICE"]


def test_optional_per_channel_pacing(server: SandboxServer, clock: FakeClock) -> None:
    paced = Sandbox(SECRET, clock=clock, post_rate_per_channel=1.0, post_burst=2)
    with serve(paced) as other:
        client = WebClient(token="xoxb-1", base_url=other.url + "/api/")
        client.chat_postMessage(channel=CHANNEL, text="1")
        client.chat_postMessage(channel=CHANNEL, text="2")
        with pytest.raises(SlackApiError) as caught:
            client.chat_postMessage(channel=CHANNEL, text="3")
        assert (caught.value.response.status_code, caught.value.response.headers["Retry-After"]) == (429, "1")
        client.chat_postMessage(channel="C0OTHER", text="other channels have their own budget")
        clock.advance(1.0)
        client.chat_postMessage(channel=CHANNEL, text="3")
    assert [m["text"] for m in paced.messages(CHANNEL)] == ["1", "2", "3"]


def test_messages_returns_copies(client: WebClient, sb: Sandbox) -> None:
    client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())
    sb.messages()[0]["blocks"].clear()
    assert len(sb.messages()[0]["blocks"]) == 3
