"""conversations.history over HTTP (``webapi.conversations``): order, threads, metadata, paging
and bounds.
"""

from __future__ import annotations

from slack_sdk import WebClient

from countersign.sandbox import Sandbox

from .builders import CHANNEL


def test_conversations_history_newest_first_with_optional_metadata(client: WebClient, sb: Sandbox) -> None:
    metadata = {"event_type": "approval_requested", "event_payload": {"request_id": "req-1"}}
    first = client.chat_postMessage(channel=CHANNEL, text="first", metadata=metadata)["ts"]
    client.chat_postMessage(channel=CHANNEL, text="reply", thread_ts=first)
    human = sb.add_user_message(CHANNEL, "U0ALICE", "second")
    third = client.chat_postMessage(channel=CHANNEL, text="third")["ts"]
    client.chat_postMessage(channel="C0OTHER", text="elsewhere")

    history = client.conversations_history(channel=CHANNEL)
    assert [m["text"] for m in history["messages"]] == ["third", "second", "first"]
    assert all("metadata" not in m for m in history["messages"])
    assert history["has_more"] is False
    with_metadata = client.conversations_history(channel=CHANNEL, include_all_metadata=True)["messages"]
    assert with_metadata[2]["metadata"] == metadata
    assert with_metadata[1]["user"] == "U0ALICE"

    page = client.conversations_history(channel=CHANNEL, limit=2)
    assert ([m["ts"] for m in page["messages"]], page["has_more"]) == ([third, human], True)
    rest = client.conversations_history(
        channel=CHANNEL, limit=2, cursor=page["response_metadata"]["next_cursor"]
    )
    assert ([m["ts"] for m in rest["messages"]], rest["has_more"]) == ([first], False)
    between = client.conversations_history(channel=CHANNEL, oldest=first, latest=third)["messages"]
    assert [m["ts"] for m in between] == [human]
    inclusive = client.conversations_history(channel=CHANNEL, oldest=first, latest=third, inclusive=True)
    assert len(inclusive["messages"]) == 3
    assert client.conversations_history(channel="C0EMPTY")["messages"] == []
