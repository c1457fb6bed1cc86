"""A user of a partner workspace in a Slack Connect channel (``Workspace.user_teams``): the two
workspaces their clicks and modal payloads name, as Slack sends them, and the page and users.info."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from slack_sdk import WebClient

from countersign.sandbox import Sandbox, SandboxServer

from .builders import CHANNEL, card, open_modal, payment_modal
from .harness import Receiver, http

PARTNER = "U0PAT"
PARTNER_TEAM = "T0PARTNER"


@pytest.fixture
def partner(sb: Sandbox) -> str:
    """A user of the partner workspace `T0PARTNER`, listed in the directory; returns the user id."""
    sb.users[PARTNER] = "pat"
    sb.user_teams[PARTNER] = PARTNER_TEAM
    return PARTNER


def test_a_partner_click_names_the_installing_workspace_and_the_user_their_own(
    client: WebClient, sb: Sandbox, receiver: Receiver, partner: str
) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="Approval needed", blocks=card())["ts"]

    assert sb.click(CHANNEL, ts, "approve", partner) == (200, "")

    [request] = receiver.requests
    payload = request["payload"]
    assert payload["team"] == {"id": "T0SANDBOX", "domain": "sandbox"}
    assert payload["user"] == {"id": PARTNER, "username": "pat", "name": "pat", "team_id": PARTNER_TEAM}
    assert payload["api_app_id"] == "A0SANDBOX"
    assert sb.team_of(partner) == PARTNER_TEAM and sb.team_of("U0ALICE") == "T0SANDBOX"


def test_a_partner_submit_and_close_name_their_workspace_and_the_view_the_installing_one(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str], partner: str
) -> None:
    submitted = open_modal(client, lambda: trigger(partner))
    assert sb.submit_view(submitted["id"], partner, {"amount": "99"}) == (200, "")
    closed = open_modal(client, lambda: trigger(partner), payment_modal(notify_on_close=True))
    assert sb.close_view(closed["id"], partner) == (200, "")

    for request, kind in zip(receiver.requests, ("view_submission", "view_closed"), strict=True):
        payload = request["payload"]
        assert (payload["type"], request["valid"]) == (kind, True)
        assert payload["team"] == {"id": PARTNER_TEAM, "domain": "t0partner"}
        assert payload["user"]["team_id"] == PARTNER_TEAM
        assert payload["view"]["app_installed_team_id"] == "T0SANDBOX"
        assert (payload["api_app_id"], payload["is_enterprise_install"]) == ("A0SANDBOX", False)


def test_a_workspace_member_keeps_one_workspace_everywhere(
    client: WebClient, sb: Sandbox, receiver: Receiver, trigger: Callable[..., str], partner: str
) -> None:
    opened = open_modal(client, trigger)
    payload = sb.submit_payload(opened["id"], "U0ALICE", {"amount": "5"})
    assert payload["team"] == {"id": "T0SANDBOX", "domain": "sandbox"}
    assert payload["user"]["team_id"] == payload["view"]["app_installed_team_id"] == "T0SANDBOX"


def test_users_info_and_the_page_know_the_partner_workspace(
    client: WebClient, sb: Sandbox, server: SandboxServer, partner: str
) -> None:
    assert client.users_info(user=partner)["user"]["team_id"] == PARTNER_TEAM
    assert client.users_info(user="U0ALICE")["user"]["team_id"] == "T0SANDBOX"

    state = json.loads(http(server.url + "/_sandbox/state")[2])
    assert {"id": PARTNER, "name": "pat"} in state["users"]
    assert state["user_teams"] == {PARTNER: PARTNER_TEAM}  # the page labels the partner's user with it
