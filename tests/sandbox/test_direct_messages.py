"""Direct messages over HTTP (``webapi.chat``, ``webapi.conversations``): chat.postMessage takes a user
id and answers with the DM's ``D…`` id, the one conversations.open returns; the calls that read or
edit a message, or answer in a conversation, take that id and refuse the user id, as Slack does.
"""

from __future__ import annotations

from slack_sdk import WebClient

from countersign.sandbox import Sandbox

from .builders import card
from .harness import api_error


def test_a_post_to_a_user_id_lands_in_their_dm_and_answers_its_id(client: WebClient, sb: Sandbox) -> None:
    answer = client.chat_postMessage(channel="U0ALICE", text="Approval needed", blocks=card())
    dm = client.conversations_open(users="U0ALICE")["channel"]["id"]
    assert dm.startswith("D") and answer["channel"] == dm
    again = client.chat_postMessage(channel="U0ALICE", text="Reminder", thread_ts=answer["ts"])
    assert again["channel"] == dm  # one DM per user, however it is reached
    assert [m["text"] for m in sb.messages(dm)] == ["Approval needed", "Reminder"]
    assert sb.messages("U0ALICE") == []
    assert client.conversations_open(users="U0BOB")["channel"]["id"] != dm  # and one DM each


def test_a_dm_message_is_read_and_edited_by_the_dm_id_only(client: WebClient, sb: Sandbox) -> None:
    posted = client.chat_postMessage(channel="U0ALICE", text="Approval needed", blocks=card())
    dm, ts = posted["channel"], posted["ts"]
    for refused in (
        lambda: client.chat_update(channel="U0ALICE", ts=ts, text="Approved", blocks=[]),
        lambda: client.conversations_history(channel="U0ALICE"),
        lambda: client.chat_postEphemeral(channel="U0ALICE", user="U0ALICE", text="Counted"),
    ):
        assert api_error(refused)["error"] == "channel_not_found"
    client.chat_update(channel=dm, ts=ts, text="Approved", blocks=[])
    assert [m["text"] for m in client.conversations_history(channel=dm)["messages"]] == ["Approved"]
    client.chat_postEphemeral(channel=dm, user="U0ALICE", text="Counted")
    assert [(e["channel"], e["text"]) for e in sb.ephemerals("U0ALICE")] == [(dm, "Counted")]


def test_an_ephemeral_in_a_dm_reaches_its_members_only(client: WebClient) -> None:
    group = client.conversations_open(users="U0LEAD,U0ALICE")["channel"]["id"]
    client.chat_postEphemeral(channel=group, user="U0LEAD", text="Counted")
    outsider = api_error(lambda: client.chat_postEphemeral(channel=group, user="U0BOB", text="x"))
    assert outsider["error"] == "user_not_in_channel"


def test_a_post_to_an_unknown_user_id_finds_no_channel(client: WebClient, sb: Sandbox) -> None:
    assert api_error(lambda: client.chat_postMessage(channel="U0NOBODY", text="x"))["error"] == (
        "channel_not_found"
    )
    assert api_error(lambda: client.chat_postMessage(channel="W0NOBODY", text="x"))["error"] == (
        "channel_not_found"
    )
    assert sb.messages() == []
