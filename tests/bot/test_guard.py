"""Which installation an interactivity payload is meant for (`guard.is_ours`), for each payload type
and the shapes Slack sends in Slack Connect channels and Enterprise organizations. The same over
real HTTP, through the sandbox: tests/bot/test_slack_connect.py and test_web.py."""

from __future__ import annotations

from typing import Any

import pytest

from countersign.bot.guard import Installation, is_ours

OURS = Installation(app_id="A0APP", installed_in="T0OURS")
ORG_WIDE = Installation(app_id="A0APP", installed_in="E0ORG", org_wide=True)


def payload(kind: str, team: Any, user_team: str, **fields: Any) -> dict[str, Any]:
    """A payload of `kind` for the app A0APP, from a user of `user_team`, with `team` and `fields`."""
    body = {"type": kind, "api_app_id": "A0APP", "team": team, "user": {"id": "U1", "team_id": user_team}}
    return {**body, **fields}


def view(installed_in: str | None) -> dict[str, Any]:
    """A modal as view payloads carry it, opened by the app installed in `installed_in`."""
    shown = {"id": "V1", "type": "modal", "callback_id": "c", "team_id": "T0OURS"}
    return shown if installed_in is None else {**shown, "app_installed_team_id": installed_in}


OUR_TEAM = {"id": "T0OURS", "domain": "ours"}
PARTNER_TEAM = {"id": "T0PARTNER", "domain": "partner"}


@pytest.mark.parametrize(
    "body",
    [
        payload("block_actions", OUR_TEAM, "T0OURS"),
        payload("block_actions", OUR_TEAM, "T0PARTNER"),  # a partner's click in a shared channel
        payload("view_submission", OUR_TEAM, "T0OURS", view=view("T0OURS")),
        payload("view_submission", PARTNER_TEAM, "T0PARTNER", view=view("T0OURS")),  # a partner's submit
        payload("view_closed", PARTNER_TEAM, "T0PARTNER", view=view("T0OURS")),
        payload("view_submission", OUR_TEAM, "T0OURS", view=view(None)),  # no app_installed_team_id
        payload(
            "block_actions", {**OUR_TEAM, "enterprise_id": "E0ORG"}, "E0ORG", is_enterprise_install=False
        ),
    ],
    ids=[
        "our_click",
        "partner_click",
        "our_submit",
        "partner_submit",
        "partner_close",
        "submit_without_installing_team",
        "grid_workspace_install",
    ],
)
def test_payloads_for_our_installation_are_ours_whoever_acted(body: dict[str, Any]) -> None:
    assert is_ours(body, OURS)


@pytest.mark.parametrize(
    "body",
    [
        {**payload("block_actions", OUR_TEAM, "T0OURS"), "api_app_id": "A0OTHER"},
        {
            key: value
            for key, value in payload("block_actions", OUR_TEAM, "T0OURS").items()
            if key != "api_app_id"
        },
        payload("block_actions", PARTNER_TEAM, "T0OURS"),  # the partner's installation, our user
        payload("view_submission", OUR_TEAM, "T0OURS", view=view("T0PARTNER")),
        payload("view_closed", PARTNER_TEAM, "T0PARTNER", view=view("T0PARTNER")),
        payload("view_submission", PARTNER_TEAM, "T0PARTNER", view=view(None)),
        payload("block_actions", None, "T0OURS"),  # nothing names the installation
        payload("block_actions", None, "T0OURS", is_enterprise_install=True, enterprise={"id": "T0OURS"}),
    ],
    ids=[
        "another_app",
        "no_app",
        "partner_installation_click",
        "partner_installation_submit",
        "partner_installation_close",
        "partner_submit_without_installing_team",
        "no_team",
        "org_wide_install",
    ],
)
def test_payloads_for_another_app_or_installation_are_not(body: dict[str, Any]) -> None:
    assert not is_ours(body, OURS)


def test_an_org_wide_install_is_named_by_its_org() -> None:
    org_click = payload(
        "block_actions", None, "T0ANY", is_enterprise_install=True, enterprise={"id": "E0ORG"}
    )
    assert is_ours(org_click, ORG_WIDE)
    in_team = payload(
        "view_submission", {"id": "T0ANY", "enterprise_id": "E0ORG"}, "T0ANY", view=view("T0ANY")
    )
    assert is_ours({**in_team, "is_enterprise_install": True, "enterprise": None}, ORG_WIDE)
    assert not is_ours({**org_click, "enterprise": {"id": "E0OTHER"}}, ORG_WIDE)
    assert not is_ours({**org_click, "is_enterprise_install": False, "team": {"id": "E0ORG"}}, ORG_WIDE)
