"""auth.test, bots.info, users.info and the user directory over HTTP (``webapi.users``)."""

from __future__ import annotations

from slack_sdk import WebClient

from countersign.sandbox import Sandbox, SandboxServer, serve

from .builders import SECRET
from .harness import api_error


def test_auth_test_names_the_bot(client: WebClient, server: SandboxServer) -> None:
    answer = client.auth_test()
    assert answer["ok"] is True
    assert answer["user_id"] == "U0BOT"
    assert answer["bot_id"] == "B0BOT"
    assert answer["user"] == "countersign"
    assert answer["team"] == "Sandbox"
    assert answer["team_id"] == "T0SANDBOX"
    assert answer["url"] == server.url + "/"


def test_bots_info_names_the_app_of_the_bot(client: WebClient) -> None:
    bot = client.bots_info(bot="B0BOT")["bot"]
    assert (bot["id"], bot["app_id"], bot["user_id"], bot["name"]) == (
        "B0BOT",
        "A0SANDBOX",
        "U0BOT",
        "countersign",
    )
    assert api_error(lambda: client.bots_info(bot="B0OTHER")) == {"ok": False, "error": "bot_not_found"}


def test_users_info(client: WebClient) -> None:
    user = client.users_info(user="U0ALICE")["user"]
    assert user["id"] == "U0ALICE"
    assert user["name"] == "alice"
    assert user["team_id"] == "T0SANDBOX"
    assert user["profile"]["display_name"] == "alice"
    assert api_error(lambda: client.users_info(user="U0NOBODY")) == {"ok": False, "error": "user_not_found"}


def test_custom_user_directory(server: SandboxServer) -> None:
    sb = Sandbox(SECRET, users={"U1": "zed"})
    with serve(sb) as other:
        client = WebClient(token="xoxb-1", base_url=other.url + "/api/")
        assert client.users_info(user="U1")["user"]["name"] == "zed"
        assert api_error(lambda: client.users_info(user="U0ALICE"))["error"] == "user_not_found"
