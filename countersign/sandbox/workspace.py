"""The sandbox workspace: its settings, its stored data (``State``) and copies of that data to read."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

from countersign.sandbox.identity import BOT_NAME, BOT_USER_ID, DEFAULT_USERGROUPS, DEFAULT_USERS
from countersign.sandbox.limits import ACK_TIMEOUT_SECONDS, POST_MESSAGE_BURST, TRIGGER_TTL_SECONDS
from countersign.sandbox.state import State
from countersign.sandbox.types import CallRecord, EphemeralRecord, Json, MessageRecord, ViewRecord


class Workspace:
    """One Slack workspace with one bot (``U0BOT`` / ``B0BOT``) and a user directory: settings and data.

    ``signing_secret`` signs the interactivity payloads sent to ``interactivity_url`` (the bot's Request URL,
    settable later). ``users`` maps user id -> display name and defaults to ``DEFAULT_USERS``;
    ``usergroups`` maps a group id -> member ids and starts as ``DEFAULT_USERGROUPS``. ``base_url`` is set
    by ``serve`` so payloads can carry a working ``response_url``.

    ``user_teams`` (settable, empty at first) maps a user id -> the team id of the user's own workspace,
    for people of a partner workspace in a Slack Connect channel shared with this one; everyone else
    belongs to ``team_id`` (``team_of``). Such a user is listed in ``users`` too, as Slack's users.info
    answers for external members of a shared channel. Their clicks and modal submits carry the two
    workspaces the way Slack sends them (see ``Sandbox.click_payload`` and ``Sandbox.submit_payload``).

    ``channel_members`` (settable, empty at first) maps a channel id -> the ids of its members, for a
    channel whose membership matters: chat.postEphemeral to a user outside a listed channel answers
    ``user_not_in_channel``, as Slack does; a channel not listed takes anyone.

    ``bot_token`` (settable, None at first) is the bot's token: when set, the Web API answers any other
    token ``invalid_auth``, as Slack answers a token it does not know; when None it takes any bot token.

    ``clock`` (unix seconds, default ``time.time``) times trigger_ids, recorded calls and chat.postMessage
    pacing; tests pass a fake clock instead of sleeping. ``post_rate_per_channel`` (messages per second,
    default None = off) paces chat.postMessage per channel the way Slack does (about 1 per second, short
    bursts of up to ``post_burst`` tolerated; https://docs.slack.dev/apis/web-api/rate-limits): over it the
    call answers HTTP 429 ``ratelimited`` with ``Retry-After``. ``method_limits`` (calls a minute by Web
    API method, e.g. ``limits.METHOD_CALLS_PER_MINUTE``; default None = off) does the same for each
    method's rate-limit tier.

    Tunable attributes: ``trigger_ttl_seconds`` (``TRIGGER_TTL_SECONDS``, how long a trigger_id stays usable)
    and ``ack_timeout_seconds`` (``ACK_TIMEOUT_SECONDS``, how long Slack waits for the ack of a
    view_submission). ``state`` holds the data; the methods here return copies of it.
    """

    def __init__(
        self,
        signing_secret: str,
        interactivity_url: str | None = None,
        team_id: str = "T0SANDBOX",
        users: dict[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        post_rate_per_channel: float | None = None,
        post_burst: int = POST_MESSAGE_BURST,
        method_limits: dict[str, int] | None = None,
    ) -> None:
        self.signing_secret = signing_secret
        self.interactivity_url = interactivity_url
        self.team_id = team_id
        self.users = dict(DEFAULT_USERS if users is None else users)
        self.usergroups = {group: list(members) for group, members in DEFAULT_USERGROUPS.items()}
        self.user_teams: dict[str, str] = {}
        self.channel_members: dict[str, list[str]] = {}
        self.bot_token: str | None = None
        self.base_url: str | None = None
        self.clock = clock
        self.trigger_ttl_seconds = TRIGGER_TTL_SECONDS
        self.ack_timeout_seconds = ACK_TIMEOUT_SECONDS
        self.post_rate_per_channel = post_rate_per_channel
        self.post_burst = post_burst
        self.method_limits = method_limits
        self.state = State()

    def team_of(self, user_id: str) -> str:
        """The team id of ``user_id``'s own workspace: theirs in ``user_teams``, else this workspace's."""
        return self.user_teams.get(user_id, self.team_id)

    def messages(self, channel: str | None = None) -> list[MessageRecord]:
        """Copies of the channel messages in post order, all channels when ``channel`` is None (a DM's
        messages are under the DM's ``D…`` id, as chat.postMessage answered it, not the user id).

        Each is ``{"channel", "ts", "text", "blocks", "metadata", "thread_ts", "user", "edited"}``;
        ``user`` is the poster (``U0BOT`` for the bot) and ``edited`` turns True after chat.update.
        """
        with self.state.lock:
            found = [m for m in self.state.messages.values() if channel is None or m["channel"] == channel]
            return copy.deepcopy(found)

    def ephemerals(self, user: str | None = None) -> list[EphemeralRecord]:
        """Copies of ephemeral messages ``{"channel", "user", "text", "blocks", "ts"}``, all or one user's."""
        with self.state.lock:
            return copy.deepcopy([e for e in self.state.ephemerals if user is None or e["user"] == user])

    def add_user_message(self, channel: str, user: str, text: str) -> str:
        """Post a plain message as a person (not the bot) and return its ts. chat.update cannot edit it."""
        with self.state.lock:
            return self.state.add_message(channel, text, [], user=user)["ts"]

    def views(self, user: str | None = None) -> list[ViewRecord]:
        """Copies of the open modal views, all users' or one user's: ``{"id", "user", "view", "errors",
        "response_error"}``.

        ``view`` is the Slack-shaped view (as views.open returns it; ``state.values`` holds what was last
        submitted). ``errors`` maps input block_id -> message shown under it (from the bot's
        ``response_action: errors`` or Slack's own client checks). ``response_error`` says why the bot's
        last answer was not applied (HTTP error, later than ``ack_timeout_seconds``, malformed), else None;
        Slack shows the user a generic error then. Each user's views come root first: the last is on screen.
        """
        with self.state.lock:
            views = self.state.views
            records = [
                views.records[view_id]
                for stack_user, stack in views.stacks.items()
                if user is None or stack_user == user
                for view_id in stack
            ]
            return copy.deepcopy(records)

    def calls(self, method: str | None = None) -> list[CallRecord]:
        """Copies of the recorded Web API calls, oldest first, all or one method's.

        Each is ``{"method", "params", "time", "status", "error"}``: ``params`` as parsed (without a
        ``token`` argument), ``time`` in clock seconds when the call arrived, ``status`` the HTTP status
        answered and ``error`` Slack's error code (None when ok). Injected faults and unknown methods count.
        """
        with self.state.lock:
            return copy.deepcopy([c for c in self.state.calls if method is None or c["method"] == method])

    def snapshot(self) -> Json:
        """Everything the page shows: ``{"team_id", "interactivity_url", "bot": {"id", "name"}, "users":
        [{"id", "name"}], "user_teams": {user id: team id}, "channels": [{"id", "messages": [...]}],
        "ephemerals": [...], "views": [...], "homes": {user id: Home view}}``.

        Channels are in first-post order; messages, ephemerals and views as ``messages()`` /
        ``ephemerals()`` / ``views()``.
        """
        with self.state.lock:
            messages, ephemerals, views = self.messages(), self.ephemerals(), self.views()
            homes = copy.deepcopy(self.state.homes)
        channels: dict[str, list[MessageRecord]] = {}
        for message in messages:
            channels.setdefault(message["channel"], []).append(message)
        return {
            "team_id": self.team_id,
            "interactivity_url": self.interactivity_url,
            "bot": {"id": BOT_USER_ID, "name": BOT_NAME},
            "users": [{"id": uid, "name": name} for uid, name in self.users.items()],
            "user_teams": dict(self.user_teams),
            "channels": [{"id": cid, "messages": msgs} for cid, msgs in channels.items()],
            "ephemerals": ephemerals,
            "views": views,
            "homes": homes,
        }
