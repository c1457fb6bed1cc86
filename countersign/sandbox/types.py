"""Types shared across the sandbox: ``Json`` for Slack's JSON objects and the records the store keeps.

Slack-shaped data (blocks, views, payloads, Web API arguments and answers) is plain ``Json``: the
sandbox passes it through as Slack would and checks it where Slack does (``limits``, ``modals``). The
records below are the sandbox's own bookkeeping, with fixed keys; ``State`` documents what each holds.
"""

from __future__ import annotations

from typing import Any, TypedDict

Json = dict[str, Any]
"""A JSON object as Slack sends or receives it."""


class MessageRecord(TypedDict):
    """A channel message (``State.messages``); ``user`` is the poster, ``U0BOT`` for the bot."""

    channel: str
    ts: str
    text: str
    blocks: list[Json]
    metadata: Json | None
    thread_ts: str | None
    user: str
    edited: bool


class EphemeralRecord(TypedDict):
    """A message only ``user`` sees (``State.ephemerals``)."""

    channel: str
    user: str
    text: str
    blocks: list[Json]
    ts: str


class TriggerRecord(TypedDict):
    """A trigger_id handed to the bot (``ViewStore.triggers``): issued at ``issued`` clock seconds for
    ``user``, from the modal ``view_id`` (None for a message button); ``used`` once exchanged."""

    user: str
    issued: float
    used: bool
    view_id: str | None


class ViewRecord(TypedDict):
    """An open modal view (``ViewStore.records``): ``view`` is Slack-shaped, ``errors`` maps input
    block_id -> the message shown under it, ``response_error`` says why the bot's last answer was not
    applied (None when it was)."""

    id: str
    user: str
    view: Json
    errors: dict[str, str]
    response_error: str | None


class CallRecord(TypedDict):
    """A Web API call (``State.calls``): ``status`` (HTTP) and ``error`` (Slack's code, None when ok)
    are filled in once it is answered."""

    method: str
    params: Json
    time: float
    status: int | None
    error: str | None


class Fault(TypedDict):
    """A fault queued by ``Sandbox.inject`` for the next ``times`` calls of one method."""

    error: str | None
    status: int
    retry_after: int | None
    delay_seconds: float
    times: int
