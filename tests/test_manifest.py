"""manifest.yml matches the code: every Web API method countersign calls has its scopes in the
manifest, every Bolt listener is declared where Slack needs it declared, and nothing is requested
that the code does not use.

The methods called are read from the source (every `WebClient` method named anywhere under
`countersign/` but the sandbox, mapped to its Web API method through slack_sdk's own source). The
scopes each needs are Slack's reference pages, "Required scopes" of
https://docs.slack.dev/reference/methods/<method> (restated per scope, "Compatible API methods", in
https://docs.slack.dev/reference/scopes/<scope>), and /work/shared/reference/slack.md, A8.
"""

from __future__ import annotations

import ast
import inspect
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from slack_sdk import WebClient

from countersign.bot import app as bot_app
from countersign.config import Settings
from countersign.router.runtime import Runtime

REPO = Path(__file__).resolve().parents[1]

BOT_SCOPES: dict[str, frozenset[str]] = {
    # https://docs.slack.dev/reference/methods/auth.test: no scope
    "auth.test": frozenset(),
    # https://docs.slack.dev/reference/methods/bots.info: users:read
    "bots.info": frozenset({"users:read"}),
    # https://docs.slack.dev/reference/methods/chat.postMessage: chat:write; chat:write.public lets
    # the bot post to a public channel it was not invited to (https://docs.slack.dev/reference/scopes/chat.write.public),
    # which a policy's channel may be
    "chat.postMessage": frozenset({"chat:write", "chat:write.public"}),
    # https://docs.slack.dev/reference/methods/chat.update, .../chat.postEphemeral: chat:write
    "chat.update": frozenset({"chat:write"}),
    "chat.postEphemeral": frozenset({"chat:write"}),
    # https://docs.slack.dev/reference/methods/conversations.history: one history scope per kind of
    # conversation read; cards live in public and private channels, DMs and group DMs
    "conversations.history": frozenset({"channels:history", "groups:history", "im:history", "mpim:history"}),
    # https://docs.slack.dev/reference/methods/conversations.open: im:write for a DM, mpim:write for
    # a group DM (https://docs.slack.dev/reference/scopes/mpim.write)
    "conversations.open": frozenset({"im:write", "mpim:write"}),
    # https://docs.slack.dev/reference/methods/usergroups.users.list: usergroups:read
    "usergroups.users.list": frozenset({"usergroups:read"}),
    # views.* need no scope (https://docs.slack.dev/reference/methods/views.open; slack.md, A8)
    "views.open": frozenset(),
    "views.update": frozenset(),
    "views.publish": frozenset(),
}
"""The bot token scopes each Web API method countersign calls needs (all of them)."""

APP_TOKEN_SCOPES: dict[str, frozenset[str]] = {
    # https://docs.slack.dev/reference/methods/apps.connections.open: an app-level token with
    # connections:write, made in the app's settings, not requested by the manifest
    "apps.connections.open": frozenset({"connections:write"}),
}
"""Methods called with the app-level token (`SLACK_APP_TOKEN`, Socket Mode)."""


@cache
def manifest() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "manifest.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _api_method(name: str) -> str | None:
    """The Web API method a `WebClient` method calls (from slack_sdk's source), or None when `name`
    is not one."""
    member = getattr(WebClient, name, None)
    if not callable(member) or name.startswith("_"):
        return None
    found = re.findall(r'api_call\(\s*"([\w.]+)"', inspect.getsource(member))
    return found[0] if found else None


def called_methods() -> set[str]:
    """The Web API methods named by a `WebClient` method call anywhere in countersign but the sandbox."""
    methods = set()
    for path in (REPO / "countersign").rglob("*.py"):
        if "sandbox" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                method = _api_method(node.func.attr)
                if method is not None:
                    methods.add(method)
    return methods


def test_the_scan_finds_the_methods_it_should() -> None:
    """A guard on the scan itself: the calls everyone knows countersign makes are found."""
    assert {"chat.postMessage", "chat.update", "views.open", "apps.connections.open"} <= called_methods()


def test_every_method_called_is_in_the_scope_table() -> None:
    unknown = called_methods() - BOT_SCOPES.keys() - APP_TOKEN_SCOPES.keys()
    assert not unknown, f"add the scopes of {sorted(unknown)} (Slack's method pages) to BOT_SCOPES"


def test_the_bot_scopes_are_exactly_what_the_code_needs() -> None:
    """Every scope a called method needs is requested, and no scope is requested that no call needs."""
    requested = set(manifest()["oauth_config"]["scopes"]["bot"])
    needed = set().union(*(BOT_SCOPES[m] for m in called_methods() if m in BOT_SCOPES))
    needed |= {"commands"} if bot_app.COMMANDS else set()  # https://docs.slack.dev/reference/scopes/commands
    assert needed - requested == set(), "missing from manifest.yml"
    assert requested - needed == set(), "requested by manifest.yml but not used"


def test_every_listener_is_declared_and_nothing_else() -> None:
    """Buttons and modals come by interactivity; each slash command must be listed under
    `features.slash_commands`, each event under `settings.event_subscriptions.bot_events`
    (https://docs.slack.dev/reference/app-manifest), the App Home tab enabled for `app_home_opened`."""
    features, settings = manifest()["features"], manifest()["settings"]
    assert settings["interactivity"]["is_enabled"] is bool(bot_app.ACTIONS or bot_app.VIEWS)
    declared_commands = {c["command"] for c in features.get("slash_commands", [])}
    assert declared_commands == set(bot_app.COMMANDS)
    declared_events = set(settings.get("event_subscriptions", {}).get("bot_events", []))
    assert declared_events == set(bot_app.EVENTS)
    home = features.get("app_home", {}).get("home_tab_enabled", False)
    assert home is ("app_home_opened" in bot_app.EVENTS)


def test_the_app_registers_the_listeners_of_the_tables() -> None:
    """The tables the manifest is checked against are the listeners Bolt runs: no listener is
    registered outside them."""
    settings = Settings(SLACK_BOT_TOKEN="xoxb-test", SLACK_SIGNING_SECRET="s", COUNTERSIGN_SECRET="c")
    app = bot_app.create_app(Runtime(settings))
    tables = (bot_app.ACTIONS, bot_app.VIEWS, bot_app.COMMANDS, bot_app.EVENTS)
    assert len(app._listeners) == sum(len(table) for table in tables)
