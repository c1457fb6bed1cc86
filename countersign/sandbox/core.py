"""The sandbox workspace: a lock-protected in-memory store and the ``Sandbox`` facade over it."""

from __future__ import annotations

import copy
import secrets
import string
import threading
import time
from collections.abc import Callable
from typing import Any

from countersign.sandbox import modals
from countersign.sandbox.blocks import fill_ids as fill_ids
from countersign.sandbox.blocks import find_button
from countersign.sandbox.interactivity import (
    API_APP_ID,
    block_actions_payload,
    new_trigger_id,
    signed_post,
    view_closed_payload,
    view_submission_payload,
)
from countersign.sandbox.limits import ACK_TIMEOUT_S, MAX_VIEW_STACK, POST_MESSAGE_BURST, TRIGGER_TTL_S
from countersign.sandbox.modals import SubmissionRefused, ViewError

BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
BOT_NAME = "countersign"
TEAM_NAME = "Sandbox"
TEAM_DOMAIN = "sandbox"
#: Stand-in base URL used for links (auth.test ``url``, ``response_url``) before ``serve`` sets the real one.
UNSERVED_BASE_URL = "http://sandbox.invalid"
#: Path prefix of the ``response_url`` handed out with each click; the server answers POSTs under it.
RESPONSE_URL_PATH = "/_sandbox/response/"
#: The default people in the workspace: user id -> display name.
DEFAULT_USERS: dict[str, str] = {
    "U0LEAD": "lee.lead",
    "U0ALICE": "alice",
    "U0BOB": "bob",
    "U0MALLORY": "mallory",
}
#: User groups (``usergroups.users.list``): group id -> member user ids. Settable as ``sb.usergroups``.
DEFAULT_USERGROUPS: dict[str, list[str]] = {
    "S0FINANCE": ["U0ALICE", "U0BOB"],
    "S0FINLEADS": ["U0LEAD"],
}
_VIEW_ID_ALPHABET = string.ascii_uppercase + string.digits


def slack_message(record: dict, team_id: str, *, include_metadata: bool = True) -> dict:
    """A stored message in the shape Slack's API returns it (``type``, ``user``, ``bot_id``, ``ts``, ...).

    ``metadata`` is included when the message has some and ``include_metadata`` is true.
    """
    message = {
        "type": "message",
        "user": record["user"],
        "ts": record["ts"],
        "text": record["text"],
        "blocks": copy.deepcopy(record["blocks"]),
        "team": team_id,
    }
    if record["user"] == BOT_USER_ID:
        message["bot_id"] = BOT_ID
    if record["thread_ts"]:
        message["thread_ts"] = record["thread_ts"]
    if record["metadata"] and include_metadata:
        message["metadata"] = copy.deepcopy(record["metadata"])
    return message


def slack_view(
    view: dict,
    *,
    view_id: str,
    team_id: str,
    root_view_id: str,
    previous_view_id: str | None,
    values: dict[str, dict],
) -> dict:
    """A validated modal (see ``modals.decode_view``) in the shape views.* return it, with a new ``hash``.

    Fields as in https://docs.slack.dev/reference/views/modal-views plus Slack's bookkeeping (``id``,
    ``team_id``, ``state``, ``hash``, ``root_view_id``, ``previous_view_id``, ``app_id``, ``bot_id``).
    """
    return {
        "id": view_id,
        "team_id": team_id,
        "type": view["type"],
        "blocks": view["blocks"],
        "private_metadata": view.get("private_metadata", ""),
        "callback_id": view.get("callback_id", ""),
        "state": {"values": values},
        "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
        "title": view["title"],
        "clear_on_close": view.get("clear_on_close", False),
        "notify_on_close": view.get("notify_on_close", False),
        "close": view.get("close"),
        "submit": view.get("submit"),
        "previous_view_id": previous_view_id,
        "root_view_id": root_view_id,
        "app_id": API_APP_ID,
        "external_id": view.get("external_id", ""),
        "app_installed_team_id": team_id,
        "bot_id": BOT_ID,
    }


class State:
    """The workspace's mutable data. Hold ``lock`` while reading or changing any field.

    ``messages`` maps ``(channel, ts)`` to a record ``{"channel", "ts", "text", "blocks", "metadata",
    "thread_ts", "user", "edited"}``, in post order. ``ephemerals`` lists ``{"channel", "user", "text",
    "blocks", "ts"}``. ``response_urls`` maps a response_url key to the ``(channel, ts, user_id)`` it answers.

    Modals: ``triggers`` maps trigger_id -> ``{"user", "issued" (clock seconds), "used", "view_id"}``;
    ``views`` maps an open view's id -> ``{"id", "user", "view" (Slack-shaped), "errors", "response_error"}``;
    ``stacks`` maps a user to their open view ids, root first (the last one is on screen).

    Web API bookkeeping: ``calls`` lists ``{"method", "params", "time", "status", "error"}``; ``faults``
    maps a method to queued faults (see ``Sandbox.inject``); ``post_buckets`` maps a channel to
    ``(tokens, clock seconds)`` for chat.postMessage pacing.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.ephemerals: list[dict[str, Any]] = []
        self.response_urls: dict[str, tuple[str, str, str]] = {}
        self.triggers: dict[str, dict[str, Any]] = {}
        self.views: dict[str, dict[str, Any]] = {}
        self.stacks: dict[str, list[str]] = {}
        self.calls: list[dict[str, Any]] = []
        self.faults: dict[str, list[dict[str, Any]]] = {}
        self.post_buckets: dict[str, tuple[float, float]] = {}
        self._last_us = 0

    def next_ts(self) -> str:
        """A Slack message timestamp, ``"<unix seconds>.<6-digit microseconds>"``, unique and increasing."""
        self._last_us = max(time.time_ns() // 1000, self._last_us + 1)
        seconds, micros = divmod(self._last_us, 1_000_000)
        return f"{seconds}.{micros:06d}"

    def add_message(
        self,
        channel: str,
        text: str,
        blocks: list[dict],
        *,
        user: str = BOT_USER_ID,
        metadata: dict | None = None,
        thread_ts: str | None = None,
    ) -> dict[str, Any]:
        """Store a new channel message and return its (live) record."""
        ts = self.next_ts()
        record = {
            "channel": channel,
            "ts": ts,
            "text": text,
            "blocks": blocks,
            "metadata": metadata,
            "thread_ts": thread_ts,
            "user": user,
            "edited": False,
        }
        self.messages[(channel, ts)] = record
        return record

    def add_ephemeral(self, channel: str, user: str, text: str, blocks: list[dict]) -> str:
        """Store a message only ``user`` sees and return its ``message_ts``."""
        ts = self.next_ts()
        self.ephemerals.append({"channel": channel, "user": user, "text": text, "blocks": blocks, "ts": ts})
        return ts

    # --- trigger_ids -------------------------------------------------------------------------------------

    def issue_trigger(self, user: str, now: float, view_id: str | None = None, trigger_id: str = "") -> str:
        """Record a trigger_id handed to the bot at ``now`` (clock seconds) for ``user``; return it.

        ``view_id`` is the modal the interaction happened in (None for a message button).
        """
        trigger_id = trigger_id or new_trigger_id()
        self.triggers[trigger_id] = {"user": user, "issued": now, "used": False, "view_id": view_id}
        return trigger_id

    def exchange_trigger(self, trigger_id: Any, now: float, ttl_s: float) -> dict[str, Any]:
        """Use up a trigger_id for views.open / views.push and return its record.

        Slack accepts a trigger once, within 3 seconds of issuing it
        (https://docs.slack.dev/tools/bolt-python/concepts/opening-modals). Raises ViewError
        ``invalid_trigger_id`` (never issued), ``exchanged_trigger_id`` (already used) or
        ``expired_trigger_id`` (more than ``ttl_s`` seconds old).
        """
        trigger = self.triggers.get(trigger_id) if isinstance(trigger_id, str) else None
        if trigger is None:
            raise ViewError("invalid_trigger_id")
        if trigger["used"]:
            raise ViewError("exchanged_trigger_id")
        if now - trigger["issued"] > ttl_s:
            raise ViewError("expired_trigger_id")
        trigger["used"] = True
        return trigger

    # --- views -------------------------------------------------------------------------------------------

    def _new_view_id(self) -> str:
        while True:
            view_id = "V" + "".join(secrets.choice(_VIEW_ID_ALPHABET) for _ in range(10))
            if view_id not in self.views:
                return view_id

    def _check_external_id(self, view: dict, keep: str | None = None) -> None:
        external_id = view.get("external_id")
        if external_id and any(
            r["view"]["external_id"] == external_id and r["id"] != keep for r in self.views.values()
        ):
            raise ViewError("duplicate_external_id")

    def open_view(self, user: str, view: dict, team_id: str) -> dict[str, Any]:
        """Open ``view`` (validated by ``modals.decode_view``) as ``user``'s modal and return its record.

        A modal the user already had open is replaced without a ``view_closed`` payload (a sandbox choice;
        Slack does not document this case). ``duplicate_external_id`` when another open view has the same
        ``external_id`` (the sandbox checks open views only).
        """
        self._check_external_id(view)
        self.clear_views(user)
        return self._add_view(user, view, team_id, previous=None)

    def push_view(self, user: str, view: dict, team_id: str) -> dict[str, Any]:
        """Push ``view`` onto ``user``'s open modal and return its record.

        ViewError: ``not_found`` when the user has no open modal (sandbox choice), ``push_limit_reached``
        when the modal already holds ``MAX_VIEW_STACK`` views (https://docs.slack.dev/reference/methods/views.push),
        ``duplicate_external_id``.
        """
        stack = self.stacks.get(user)
        if not stack:
            raise ViewError("not_found")
        if len(stack) >= MAX_VIEW_STACK:
            raise ViewError("push_limit_reached")
        self._check_external_id(view)
        return self._add_view(user, view, team_id, previous=stack[-1])

    def _add_view(self, user: str, view: dict, team_id: str, previous: str | None) -> dict[str, Any]:
        view_id = self._new_view_id()
        stack = self.stacks.setdefault(user, [])
        root = stack[0] if stack else view_id
        shaped = slack_view(
            view, view_id=view_id, team_id=team_id, root_view_id=root, previous_view_id=previous, values={}
        )
        record = {"id": view_id, "user": user, "view": shaped, "errors": {}, "response_error": None}
        self.views[view_id] = record
        stack.append(view_id)
        return record

    def find_view(self, view_id: Any = None, external_id: Any = None) -> dict[str, Any]:
        """The open view with ``view_id`` (or else ``external_id``); ViewError ``not_found`` if none."""
        if view_id:
            record = self.views.get(view_id) if isinstance(view_id, str) else None
        else:
            found = [
                r for r in self.views.values() if external_id and r["view"]["external_id"] == external_id
            ]
            record = found[0] if found else None
        if record is None:
            raise ViewError("not_found")
        return record

    def update_view(
        self, record: dict[str, Any], view: dict, team_id: str, view_hash: str | None = None
    ) -> dict[str, Any]:
        """Replace an open view's content in place (same id, new hash) and return its record.

        ``view_hash``, when given, must be the view's current hash, else ViewError ``hash_conflict``
        (https://docs.slack.dev/reference/methods/views.update). Typed input survives where block_id and
        action_id are unchanged (``modals.carry_state``); errors from an earlier submission are cleared.
        A view without ``external_id`` keeps the old one (Slack does not document this; sandbox choice).
        """
        current = record["view"]
        if view_hash and view_hash != current["hash"]:
            raise ViewError("hash_conflict")
        if not view.get("external_id") and current["external_id"]:
            view = {**view, "external_id": current["external_id"]}
        self._check_external_id(view, keep=record["id"])
        record["view"] = slack_view(
            view,
            view_id=record["id"],
            team_id=team_id,
            root_view_id=current["root_view_id"],
            previous_view_id=current["previous_view_id"],
            values=modals.carry_state(current["state"]["values"], view["blocks"]),
        )
        record.update(errors={}, response_error=None)
        return record

    def close_view(self, view_id: str) -> list[str]:
        """Close an open view and every view pushed above it; return the closed ids (top first)."""
        record = self.views.get(view_id)
        if record is None:
            return []
        stack = self.stacks[record["user"]]
        closed = stack[stack.index(view_id) :][::-1]
        del stack[stack.index(view_id) :]
        for closed_id in closed:
            self.views.pop(closed_id, None)
        if not stack:
            del self.stacks[record["user"]]
        return closed

    def clear_views(self, user: str) -> list[str]:
        """Close all of ``user``'s open views; return the closed ids (top first)."""
        stack = self.stacks.get(user)
        return self.close_view(stack[0]) if stack else []

    # --- Web API bookkeeping -----------------------------------------------------------------------------

    def record_call(self, method: str, params: dict[str, Any], now: float) -> dict[str, Any]:
        """Append a Web API call ``{"method", "params", "time", "status": None, "error": None}``; return it.

        The caller fills in ``status`` (HTTP) and ``error`` (Slack error code or None) once answered.
        """
        call = {"method": method, "params": params, "time": now, "status": None, "error": None}
        self.calls.append(call)
        return call

    def take_fault(self, method: str) -> dict[str, Any] | None:
        """Use one of the queued faults for ``method``, oldest first; None when there is none."""
        queue = self.faults.get(method)
        if not queue:
            return None
        fault = queue[0]
        fault["times"] -= 1
        if fault["times"] <= 0:
            queue.pop(0)
        return dict(fault)


class Sandbox:
    """A local stand-in for one Slack workspace with one bot (``U0BOT`` / ``B0BOT``) and a user directory.

    ``signing_secret`` signs the interactivity payloads sent to ``interactivity_url`` (the bot's Request URL,
    settable later). ``users`` maps user id -> display name and defaults to ``DEFAULT_USERS``.
    ``base_url`` is set by ``serve`` so payloads can carry a working ``response_url``.

    ``clock`` (unix seconds, default ``time.time``) times trigger_ids, recorded calls and chat.postMessage
    pacing; tests pass a fake clock instead of sleeping. ``post_rate_per_channel`` (messages per second,
    default None = off) paces chat.postMessage per channel the way Slack does (about 1 per second, short
    bursts of up to ``post_burst`` tolerated; https://docs.slack.dev/apis/web-api/rate-limits): over it the
    call answers HTTP 429 ``ratelimited`` with ``Retry-After``.

    Tunable attributes: ``trigger_ttl_s`` (``TRIGGER_TTL_S``, how long a trigger_id stays usable) and
    ``ack_timeout_s`` (``ACK_TIMEOUT_S``, how long Slack waits for the ack of a view_submission).
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
    ) -> None:
        self.signing_secret = signing_secret
        self.interactivity_url = interactivity_url
        self.team_id = team_id
        self.users = dict(DEFAULT_USERS if users is None else users)
        self.usergroups = {group: list(members) for group, members in DEFAULT_USERGROUPS.items()}
        self.base_url: str | None = None
        self.clock = clock
        self.trigger_ttl_s = TRIGGER_TTL_S
        self.ack_timeout_s = ACK_TIMEOUT_S
        self.post_rate_per_channel = post_rate_per_channel
        self.post_burst = post_burst
        self.state = State()

    def messages(self, channel: str | None = None) -> list[dict]:
        """Copies of the channel messages in post order, all channels when ``channel`` is None.

        Each is ``{"channel", "ts", "text", "blocks", "metadata", "thread_ts", "user", "edited"}``;
        ``user`` is the poster (``U0BOT`` for the bot) and ``edited`` turns True after chat.update.
        """
        with self.state.lock:
            found = [m for m in self.state.messages.values() if channel is None or m["channel"] == channel]
            return copy.deepcopy(found)

    def ephemerals(self, user: str | None = None) -> list[dict]:
        """Copies of ephemeral messages ``{"channel", "user", "text", "blocks", "ts"}``, all or one user's."""
        with self.state.lock:
            return copy.deepcopy([e for e in self.state.ephemerals if user is None or e["user"] == user])

    def add_user_message(self, channel: str, user: str, text: str) -> str:
        """Post a plain message as a person (not the bot) and return its ts. chat.update cannot edit it."""
        with self.state.lock:
            return self.state.add_message(channel, text, [], user=user)["ts"]

    def views(self, user: str | None = None) -> list[dict]:
        """Copies of the open modal views, all users' or one user's: ``{"id", "user", "view", "errors",
        "response_error"}``.

        ``view`` is the Slack-shaped view (as views.open returns it; ``state.values`` holds what was last
        submitted). ``errors`` maps input block_id -> message shown under it (from the bot's
        ``response_action: errors`` or Slack's own client checks). ``response_error`` says why the bot's
        last answer was not applied (HTTP error, later than ``ack_timeout_s``, malformed), else None; Slack
        shows the user a generic error then. Each user's views come root first: the last is on screen.
        """
        with self.state.lock:
            records = [
                self.state.views[view_id]
                for stack_user, stack in self.state.stacks.items()
                if user is None or stack_user == user
                for view_id in stack
            ]
            return copy.deepcopy(records)

    def calls(self, method: str | None = None) -> list[dict]:
        """Copies of the recorded Web API calls, oldest first, all or one method's.

        Each is ``{"method", "params", "time", "status", "error"}``: ``params`` as parsed (without a
        ``token`` argument), ``time`` in clock seconds when the call arrived, ``status`` the HTTP status
        answered and ``error`` Slack's error code (None when ok). Injected faults and unknown methods count.
        """
        with self.state.lock:
            return copy.deepcopy([c for c in self.state.calls if method is None or c["method"] == method])

    def inject(
        self,
        method: str,
        *,
        error: str | None = None,
        status: int = 200,
        retry_after: int | None = None,
        delay_s: float = 0.0,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of Web API ``method`` (e.g. ``"chat.postMessage"``) misbehave.

        - ``status=429``: HTTP 429, header ``Retry-After: <retry_after or 1>`` (seconds), body
          ``{"ok": false, "error": error or "ratelimited"}``, as Slack rate-limits
          (https://docs.slack.dev/apis/web-api/rate-limits).
        - another ``status`` (e.g. 500, 503): that HTTP status with ``{"ok": false, "error": error or
          "internal_error"}`` (and ``Retry-After`` when ``retry_after`` is given).
        - ``error`` with status 200: ``{"ok": false, "error": error}``, as Slack reports most failures.
        - ``delay_s``: sleep that many seconds before answering (to trip client timeouts). Without an error
          or status the call then runs normally, so it takes effect even if the client gave up.

        Faults queue per method in the order injected; a call answered by a fault does not run.
        Raises ValueError for an unknown method or a fault that changes nothing.
        """
        from countersign.sandbox.webapi import METHODS

        if method not in METHODS:
            raise ValueError(f"unknown Web API method {method!r}")
        if times < 1 or delay_s < 0 or not 200 <= status <= 599:
            raise ValueError("times must be >= 1, delay_s >= 0 and status an HTTP status >= 200")
        if error is None and status == 200 and not delay_s:
            raise ValueError("give an error, a non-200 status or a delay")
        fault = {"error": error, "status": status, "retry_after": retry_after, "delay_s": delay_s}
        with self.state.lock:
            self.state.faults.setdefault(method, []).append({**fault, "times": times})

    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows: ``{"team_id", "interactivity_url", "bot": {"id", "name"}, "users":
        [{"id", "name"}], "channels": [{"id", "messages": [...]}], "ephemerals": [...], "views": [...]}``.

        Channels are in first-post order; messages, ephemerals and views as ``messages()`` /
        ``ephemerals()`` / ``views()``.
        """
        with self.state.lock:
            messages, ephemerals, views = self.messages(), self.ephemerals(), self.views()
        channels: dict[str, list[dict]] = {}
        for message in messages:
            channels.setdefault(message["channel"], []).append(message)
        return {
            "team_id": self.team_id,
            "interactivity_url": self.interactivity_url,
            "bot": {"id": BOT_USER_ID, "name": BOT_NAME},
            "users": [{"id": uid, "name": name} for uid, name in self.users.items()],
            "channels": [{"id": cid, "messages": msgs} for cid, msgs in channels.items()],
            "ephemerals": ephemerals,
            "views": views,
        }

    def click(self, channel: str, ts: str, action_id: str, user_id: str) -> tuple[int, str]:
        """Press a button on a card as ``user_id``: send the signed ``block_actions`` payload to the bot.

        Returns the bot's ``(HTTP status, body text)``, 4xx/5xx included. Raises as ``click_payload``
        does, RuntimeError when ``interactivity_url`` is unset, and OSError when the bot is unreachable
        or slower than ``CLICK_TIMEOUT_S`` (see ``interactivity``).
        """
        return self.send_signed(self.click_payload(channel, ts, action_id, user_id))

    def click_payload(self, channel: str, ts: str, action_id: str, user_id: str) -> dict:
        """The ``block_actions`` payload Slack would send when ``user_id`` presses ``action_id`` now.

        Looks the button up in the message's current blocks; raises LookupError for an unknown message
        or button. Sending the same payload twice with ``send_signed`` is a double click on a card that
        has not refreshed yet. The payload's ``trigger_id`` is recorded (issued now, for ``user_id``), so the
        bot can open a modal with it within ``trigger_ttl_s`` seconds.
        """
        with self.state.lock:
            record = self.state.messages.get((channel, ts))
            if record is None:
                raise LookupError(f"no message with ts {ts!r} in channel {channel!r}")
            block, button = find_button(record["blocks"], action_id)
            key = secrets.token_urlsafe(16)
            self.state.response_urls[key] = (channel, ts, user_id)
            return block_actions_payload(
                team_id=self.team_id,
                team_domain=TEAM_DOMAIN,
                user_id=user_id,
                user_name=self.users.get(user_id, user_id),
                message=slack_message(record, self.team_id),
                channel_id=channel,
                block_id=block["block_id"],
                button=button,
                response_url=f"{self.base_url or UNSERVED_BASE_URL}{RESPONSE_URL_PATH}{key}",
                trigger_id=self.state.issue_trigger(user_id, self.clock()),
            )

    def _top_view(self, view_id: str, user_id: str) -> dict[str, Any]:
        """The live record of ``view_id`` if it is the view on ``user_id``'s screen; LookupError if not."""
        record = self.state.views.get(view_id)
        if record is None or record["user"] != user_id:
            raise LookupError(f"no open view {view_id!r} for user {user_id!r}")
        if self.state.stacks[user_id][-1] != view_id:
            raise LookupError(f"view {view_id!r} is under a pushed view; only the top one can be used")
        return record

    def submit_payload(self, view_id: str, user_id: str, values: dict[str, str | None]) -> dict:
        """The ``view_submission`` payload Slack would send if ``user_id`` submitted ``view_id`` now.

        ``values`` maps input ``block_id`` -> the text typed (None, ``""`` or absent = left empty). The
        payload (https://docs.slack.dev/reference/interaction-payloads/view-interactions-payload) carries
        ``type``, ``team``, ``user {id, username, name, team_id}``, ``api_app_id``, ``token``, a new recorded
        ``trigger_id`` and ``view``: the current view with ``state.values`` = ``{block_id: {action_id:
        {"type": element type, "value": str | None}}}``. Builds only: nothing is sent, stored or checked
        the way Slack's client would (see ``submit_view``). Raises LookupError when the view is not the
        one open on the user's screen and ValueError for block ids that are not inputs of the view.
        """
        with self.state.lock:
            record = self._top_view(view_id, user_id)
            view = copy.deepcopy(record["view"])
            view["state"] = {"values": modals.state_values(view, values)}
            return view_submission_payload(
                team_id=self.team_id,
                team_domain=TEAM_DOMAIN,
                user_id=user_id,
                user_name=self.users.get(user_id, user_id),
                view=view,
                trigger_id=self.state.issue_trigger(user_id, self.clock(), view_id=view_id),
            )

    def submit_view(self, view_id: str, user_id: str, values: dict[str, str | None]) -> tuple[int, str]:
        """Submit the modal ``view_id`` as ``user_id`` with ``values`` (see ``submit_payload``) as Slack does.

        First Slack's client checks apply (``modals.client_errors``: required inputs, lengths, number
        ranges): if any fails, the errors are stored on the view, nothing is sent, and SubmissionRefused
        (a ValueError) is raised. Otherwise the signed ``view_submission`` goes to ``interactivity_url``
        and the bot's answer is applied (https://docs.slack.dev/surfaces/modals):

        - empty body or a JSON object without ``response_action``: close this view (and any above it);
        - ``{"response_action": "errors", "errors": {block_id: message}}``: keep it open with those errors;
        - ``"update"`` + ``view``: replace this view (same id, new hash); ``"push"`` + ``view``: push it;
        - ``"clear"``: close all of the user's views.

        A non-200 answer, one later than ``ack_timeout_s`` seconds, or a malformed one (bad JSON, unknown
        block ids in ``errors``, an invalid view) leaves the view open with ``response_error`` set, as Slack
        then shows the user an error. Returns the bot's ``(HTTP status, body text)``. Raises as
        ``submit_payload``, RuntimeError without ``interactivity_url``, OSError when the bot is unreachable.
        """
        with self.state.lock:
            record = self._top_view(view_id, user_id)
            record["view"]["state"]["values"] = modals.state_values(record["view"], values)
            refused = modals.client_errors(record["view"], values)
            record.update(errors=refused, response_error=None)
            if refused:
                raise SubmissionRefused(refused)
            payload = self.submit_payload(view_id, user_id, values)
        started = time.monotonic()
        try:
            status, body = self.send_signed(payload)
        except (OSError, RuntimeError) as error:
            with self.state.lock:
                if view_id in self.state.views:
                    self.state.views[view_id]["response_error"] = f"the submission was not delivered: {error}"
            raise
        with self.state.lock:
            self._apply_answer(view_id, user_id, status, body, time.monotonic() - started)
        return status, body

    def _apply_answer(self, view_id: str, user_id: str, status: int, body: str, elapsed_s: float) -> None:
        record = self.state.views.get(view_id)
        if record is None:
            return
        try:
            if status != 200:
                raise ValueError(f"the bot answered HTTP {status}")
            if elapsed_s > self.ack_timeout_s:
                raise ValueError(
                    f"the bot answered after {elapsed_s:.1f} s; Slack waits {self.ack_timeout_s} s"
                )
            answer = modals.parse_answer(body)
            action = answer.get("response_action")
            if action is None:
                self.state.close_view(view_id)
            elif action == "errors":
                inputs = {block["block_id"] for block, _ in modals.input_blocks(record["view"])}
                unknown = sorted(set(answer["errors"]) - inputs)
                if unknown:
                    raise ValueError(f"errors name blocks that are not inputs of the view: {unknown}")
                record["errors"] = dict(answer["errors"])
            elif action == "update":
                self.state.update_view(record, modals.decode_view(answer["view"]), self.team_id)
            elif action == "push":
                self.state.push_view(user_id, modals.decode_view(answer["view"]), self.team_id)
            else:
                self.state.clear_views(user_id)
        except (ValueError, ViewError) as problem:
            record["response_error"] = str(problem)

    def close_view(self, view_id: str, user_id: str) -> tuple[int, str] | None:
        """Press Close (or the x) on the modal ``view_id`` as ``user_id``.

        The view closes, with every view below it when it set ``clear_on_close``. If it set
        ``notify_on_close``, the signed ``view_closed`` payload (``is_cleared`` true for a cleared stack)
        is then sent and the bot's ``(HTTP status, body text)`` returned; otherwise nothing is sent and
        None returned (https://docs.slack.dev/reference/views/modal-views). Raises LookupError when the
        view is not the one on the user's screen, and as ``send_signed`` when sending.
        """
        with self.state.lock:
            record = self._top_view(view_id, user_id)
            view = copy.deepcopy(record["view"])
            cleared = bool(view["clear_on_close"])
            if cleared:
                self.state.clear_views(user_id)
            else:
                self.state.close_view(view_id)
        if not view["notify_on_close"]:
            return None
        payload = view_closed_payload(
            team_id=self.team_id,
            team_domain=TEAM_DOMAIN,
            user_id=user_id,
            user_name=self.users.get(user_id, user_id),
            view=view,
            is_cleared=cleared,
        )
        return self.send_signed(payload)

    def send_signed(
        self, payload: dict, *, timestamp: int | None = None, secret: str | None = None
    ) -> tuple[int, str]:
        """POST ``payload`` to ``interactivity_url`` as Slack does: form body ``payload=<json>``, signed.

        ``timestamp`` (unix seconds, default now) and ``secret`` (default ``signing_secret``) can be
        overridden to produce stale or forged requests. Returns ``(HTTP status, body text)``.
        """
        if not self.interactivity_url:
            raise RuntimeError("interactivity_url is not set")
        return signed_post(
            self.interactivity_url,
            payload,
            secret=self.signing_secret if secret is None else secret,
            timestamp=int(time.time()) if timestamp is None else timestamp,
        )
