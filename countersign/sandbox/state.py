"""The workspace's mutable data: one lock-protected in-memory store for everything the sandbox keeps."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from countersign.sandbox.identity import BOT_USER_ID
from countersign.sandbox.types import CallRecord, EphemeralRecord, Fault, Json, MessageRecord
from countersign.sandbox.viewstore import ViewStore

RESPONSE_URL_USES = 5
RESPONSE_URL_SECONDS = 30 * 60
"""A ``response_url`` takes up to 5 POSTs within 30 minutes of the click or command that gave it
(https://api.slack.com/interactivity/handling#message_responses)."""


@dataclass
class ResponseUrl:
    """What one ``response_url`` answers: the message ``(channel, ts)`` clicked on (``ts`` empty for a
    slash command), the ``user`` who clicked, when it was ``issued`` (clock seconds) and its ``uses``."""

    channel: str
    ts: str
    user: str
    issued: float
    uses: int = 0

    def use(self, now: float) -> bool:
        """Count one POST at ``now`` (clock seconds); False once the budget is spent or expired."""
        if self.uses >= RESPONSE_URL_USES or now - self.issued > RESPONSE_URL_SECONDS:
            return False
        self.uses += 1
        return True


class State:
    """The workspace's mutable data. Hold ``lock`` while reading or changing any field.

    ``messages`` maps ``(channel, ts)`` to a channel message (``MessageRecord``), in post order; a DM's
    messages are kept under the DM's ``D…`` id, never under a user id. ``dms`` maps the id of each DM
    (``D…``) and group DM (``G…``) the bot has opened to its members' user ids.
    ``ephemerals`` lists the ephemeral messages (``EphemeralRecord``). ``response_urls`` maps a
    response_url key to what it answers (``ResponseUrl``). ``views`` holds the trigger_ids and the
    open modal views (``viewstore.ViewStore``), ``homes`` each user's Home tab (views.publish's view,
    with its ``id`` and ``hash``).

    Web API bookkeeping: ``calls`` lists the calls (``CallRecord``); ``faults`` maps a method to its queued
    faults (``Fault``, see ``Sandbox.inject``); ``post_buckets`` maps a channel to ``(tokens, clock
    seconds)`` for chat.postMessage pacing, ``method_buckets`` a method to the same for its tier.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.messages: dict[tuple[str, str], MessageRecord] = {}
        self.ephemerals: list[EphemeralRecord] = []
        self.dms: dict[str, list[str]] = {}
        self.response_urls: dict[str, ResponseUrl] = {}
        self.views = ViewStore()
        self.homes: dict[str, Json] = {}
        self.calls: list[CallRecord] = []
        self.faults: dict[str, list[Fault]] = {}
        self.post_buckets: dict[str, tuple[float, float]] = {}
        self.method_buckets: dict[str, tuple[float, float]] = {}
        self._last_microseconds = 0

    def next_ts(self) -> str:
        """A Slack message timestamp, ``"<unix seconds>.<6-digit microseconds>"``, unique and increasing."""
        self._last_microseconds = max(time.time_ns() // 1000, self._last_microseconds + 1)
        seconds, micros = divmod(self._last_microseconds, 1_000_000)
        return f"{seconds}.{micros:06d}"

    def add_message(
        self,
        channel: str,
        text: str,
        blocks: list[Json],
        *,
        user: str = BOT_USER_ID,
        metadata: Json | None = None,
        thread_ts: str | None = None,
    ) -> MessageRecord:
        """Store a new channel message and return its (live) record."""
        ts = self.next_ts()
        record: MessageRecord = {
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

    def open_dm(self, users: list[str]) -> str:
        """Open the bot's DM with one user (or group DM with several), or find the one already open,
        and return its id: ``D…`` for one user, ``G…`` for several, the same id for the same users.

        Slack keeps one DM per user and app: conversations.open resumes it, and chat.postMessage to
        the user's id lands in it (https://docs.slack.dev/reference/methods/conversations.open).
        """
        members = sorted(users)
        prefix = "D" if len(members) == 1 else "G"
        channel = prefix + "".join(u.removeprefix("U") for u in members)[:20]
        self.dms[channel] = members
        return channel

    def add_ephemeral(self, channel: str, user: str, text: str, blocks: list[Json]) -> str:
        """Store a message only ``user`` sees and return its ``message_ts``."""
        ts = self.next_ts()
        self.ephemerals.append({"channel": channel, "user": user, "text": text, "blocks": blocks, "ts": ts})
        return ts

    # --- Web API bookkeeping -----------------------------------------------------------------------------

    def record_call(self, method: str, params: Json, now: float) -> CallRecord:
        """Append a Web API call ``{"method", "params", "time", "status": None, "error": None}``; return it.

        The caller fills in ``status`` (HTTP) and ``error`` (Slack error code or None) once answered.
        """
        call: CallRecord = {"method": method, "params": params, "time": now, "status": None, "error": None}
        self.calls.append(call)
        return call

    def take_fault(self, method: str) -> Fault | None:
        """Use one of the queued faults for ``method``, oldest first; None when there is none."""
        queue = self.faults.get(method)
        if not queue:
            return None
        fault = queue[0]
        fault["times"] -= 1
        if fault["times"] <= 0:
            queue.pop(0)
        return fault.copy()
