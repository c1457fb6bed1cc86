"""The sandbox workspace: a lock-protected in-memory store and the ``Sandbox`` facade over it."""

from __future__ import annotations

import copy
import secrets
import string
import threading
import time
from typing import Any

from countersign.sandbox.interactivity import block_actions_payload, signed_post

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
_ID_ALPHABET = string.ascii_letters + string.digits


def _random_id(taken: set[str]) -> str:
    """A short id like the ones Slack invents for blocks and actions that have none (e.g. ``"aB3dE"``)."""
    while True:
        candidate = "".join(secrets.choice(_ID_ALPHABET) for _ in range(5))
        if candidate not in taken:
            return candidate


def _elements(block: dict) -> list[dict]:
    """Interactive elements of a block: an actions block's ``elements`` or a section's ``accessory``."""
    if block.get("type") == "actions":
        return [e for e in block.get("elements", []) if isinstance(e, dict)]
    accessory = block.get("accessory")
    return [accessory] if isinstance(accessory, dict) and "type" in accessory else []


def fill_ids(blocks: list[dict]) -> list[dict]:
    """Deep copy of ``blocks`` with a ``block_id`` on every block and an ``action_id`` on every element.

    Slack generates these when the sender leaves them out, and the stored message (and so every later
    ``block_actions`` payload) carries the generated values. Expects blocks that passed ``check_blocks``.
    """
    blocks = copy.deepcopy(blocks)
    block_ids = {b["block_id"] for b in blocks if "block_id" in b}
    for block in blocks:
        if "block_id" not in block:
            block["block_id"] = _random_id(block_ids)
            block_ids.add(block["block_id"])
        elements = _elements(block)
        action_ids = {e["action_id"] for e in elements if "action_id" in e}
        for element in (e for e in elements if "action_id" not in e):
            element["action_id"] = _random_id(action_ids)
            action_ids.add(element["action_id"])
    return blocks


def find_button(blocks: list[dict], action_id: str) -> tuple[dict, dict]:
    """Return ``(block, button)`` for the first button whose ``action_id`` matches; raise LookupError."""
    for block in blocks:
        for element in _elements(block):
            if element.get("type") == "button" and element.get("action_id") == action_id:
                return block, element
    raise LookupError(f"no button with action_id {action_id!r}")


def slack_message(record: dict, team_id: str) -> dict:
    """A stored message in the shape Slack's API returns it (``type``, ``user``, ``bot_id``, ``ts``, ...)."""
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
    if record["metadata"]:
        message["metadata"] = copy.deepcopy(record["metadata"])
    return message


class State:
    """The workspace's mutable data. Hold ``lock`` while reading or changing any field.

    ``messages`` maps ``(channel, ts)`` to a record ``{"channel", "ts", "text", "blocks", "metadata",
    "thread_ts", "user", "edited"}``, in post order. ``ephemerals`` lists ``{"channel", "user", "text",
    "blocks", "ts"}``. ``response_urls`` maps a response_url key to the ``(channel, ts, user_id)`` it answers.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.ephemerals: list[dict[str, Any]] = []
        self.response_urls: dict[str, tuple[str, str, str]] = {}
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


class Sandbox:
    """A local stand-in for one Slack workspace with one bot (``U0BOT`` / ``B0BOT``) and a user directory.

    ``signing_secret`` signs the interactivity payloads sent to ``interactivity_url`` (the bot's Request URL,
    settable later). ``users`` maps user id -> display name and defaults to ``DEFAULT_USERS``.
    ``base_url`` is set by ``serve`` so payloads can carry a working ``response_url``.
    """

    def __init__(
        self,
        signing_secret: str,
        interactivity_url: str | None = None,
        team_id: str = "T0SANDBOX",
        users: dict[str, str] | None = None,
    ) -> None:
        self.signing_secret = signing_secret
        self.interactivity_url = interactivity_url
        self.team_id = team_id
        self.users = dict(DEFAULT_USERS if users is None else users)
        self.base_url: str | None = None
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

    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows: ``{"team_id", "interactivity_url", "bot": {"id", "name"}, "users":
        [{"id", "name"}], "channels": [{"id", "messages": [...]}], "ephemerals": [...]}``.

        Channels are in first-post order; messages and ephemerals as ``messages()`` / ``ephemerals()``.
        """
        with self.state.lock:
            messages, ephemerals = self.messages(), self.ephemerals()
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
        has not refreshed yet.
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
            )

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
