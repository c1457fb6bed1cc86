"""Who is who: auth.test (the bot the token belongs to), bots.info, users.info and usergroups.users.list."""

from __future__ import annotations

from countersign.sandbox.identity import (
    API_APP_ID,
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    TEAM_NAME,
    UNSERVED_BASE_URL,
)
from countersign.sandbox.webapi.answers import ApiError, ApiResponse, ok
from countersign.sandbox.webapi.arguments import Params
from countersign.sandbox.workspace import Workspace


def auth_test(ws: Workspace, params: Params) -> ApiResponse:
    """auth.test: who the token belongs to. https://docs.slack.dev/reference/methods/auth.test"""
    return ok(
        url=f"{ws.base_url or UNSERVED_BASE_URL}/",
        team=TEAM_NAME,
        team_id=ws.team_id,
        user=BOT_NAME,
        user_id=BOT_USER_ID,
        bot_id=BOT_ID,
        is_enterprise_install=False,
    )


def bots_info(ws: Workspace, params: Params) -> ApiResponse:
    """bots.info: the bot ``bot`` (``B0BOT``, the only one) and the app it belongs to; any other id (or
    none) → ``bot_not_found``. https://docs.slack.dev/reference/methods/bots.info . The ``bot`` object is
    ``{"id", "deleted", "name", "updated", "app_id", "user_id", "icons"}``.
    """
    if params.get("bot") != BOT_ID:
        raise ApiError("bot_not_found")
    bot = {"id": BOT_ID, "deleted": False, "name": BOT_NAME, "updated": int(ws.clock())}
    return ok(bot={**bot, "app_id": API_APP_ID, "user_id": BOT_USER_ID, "icons": {}})


def users_info(ws: Workspace, params: Params) -> ApiResponse:
    """users.info: a directory entry; unknown id → ``user_not_found``.

    https://docs.slack.dev/reference/methods/users.info . The ``user`` object is
    ``{"id", "name", "real_name", "team_id", "is_bot", "deleted", "profile": {"display_name", "real_name"}}``;
    ``team_id`` is the user's own workspace (``Workspace.team_of``), a partner's for a partner user.
    """
    user_id = params.get("user")
    if user_id not in ws.users:
        raise ApiError("user_not_found")
    name = ws.users[user_id]
    profile = {"display_name": name, "real_name": name}
    user = {
        "id": user_id,
        "name": name,
        "real_name": name,
        "team_id": ws.team_of(user_id),
        "profile": profile,
    }
    return ok(user={**user, "is_bot": False, "deleted": False})


def usergroups_users_list(ws: Workspace, params: Params) -> ApiResponse:
    """usergroups.users.list: the member ids of ``usergroup``; an unknown group → ``no_such_subteam``.

    https://docs.slack.dev/reference/methods/usergroups.users.list
    """
    group = params.get("usergroup")
    if group not in ws.usergroups:
        raise ApiError("no_such_subteam")
    return ok(users=list(ws.usergroups[group]))
