"""Per-method rate limits, as Slack's tiers apply them: a method over its calls a minute answers HTTP
429 `ratelimited` with `Retry-After`, each method on its own budget, refilled as the clock runs."""

from __future__ import annotations

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from countersign.sandbox import Sandbox, serve

from .harness import FakeClock

SECRET = "rate-limit-secret"


def test_a_method_over_its_tier_is_told_to_wait_and_others_are_not(clock: FakeClock) -> None:
    limited = Sandbox(SECRET, clock=clock, method_limits={"chat.update": 2})
    with serve(limited) as server:
        client = WebClient(token="xoxb-1", base_url=server.url + "/api/")
        ts = client.chat_postMessage(channel="C0RATE", text="card")["ts"]
        client.chat_update(channel="C0RATE", ts=ts, text="one")
        client.chat_update(channel="C0RATE", ts=ts, text="two")
        with pytest.raises(SlackApiError) as caught:
            client.chat_update(channel="C0RATE", ts=ts, text="three")
        response = caught.value.response
        assert (response.status_code, response["error"], response.headers["Retry-After"]) == (
            429,
            "ratelimited",
            "30",  # two a minute: one token every 30 s
        )
        client.chat_postEphemeral(channel="C0RATE", user="U0LEAD", text="other methods are not held up")
        clock.advance(30)
        client.chat_update(channel="C0RATE", ts=ts, text="three")
    assert [m["text"] for m in limited.messages("C0RATE")] == ["three"]
