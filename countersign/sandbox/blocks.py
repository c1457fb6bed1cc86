"""Block helpers shared by messages and modal views: generated ids and element lookup."""

from __future__ import annotations

import copy
import secrets
import string

from countersign.sandbox.types import Json

_ID_ALPHABET = string.ascii_letters + string.digits


def _random_id(taken: set[str]) -> str:
    """A short id like the ones Slack invents for blocks and actions that have none (e.g. ``"aB3dE"``)."""
    while True:
        candidate = "".join(secrets.choice(_ID_ALPHABET) for _ in range(5))
        if candidate not in taken:
            return candidate


def elements(block: Json) -> list[Json]:
    """Interactive elements of a block: an actions block's ``elements``, a section's ``accessory`` or an
    input block's ``element``."""
    if block.get("type") == "actions":
        return [e for e in block.get("elements", []) if isinstance(e, dict)]
    single = block.get("element") if block.get("type") == "input" else block.get("accessory")
    return [single] if isinstance(single, dict) and "type" in single else []


def fill_ids(blocks: list[Json]) -> list[Json]:
    """Deep copy of ``blocks`` with a ``block_id`` on every block and an ``action_id`` on every element.

    Slack generates these when the sender leaves them out, and the stored message or view (and so every
    later payload) carries the generated values. Expects blocks that passed ``limits.check_blocks``.
    """
    blocks = copy.deepcopy(blocks)
    block_ids = {b["block_id"] for b in blocks if "block_id" in b}
    for block in blocks:
        if "block_id" not in block:
            block["block_id"] = _random_id(block_ids)
            block_ids.add(block["block_id"])
        found = elements(block)
        action_ids = {e["action_id"] for e in found if "action_id" in e}
        for element in (e for e in found if "action_id" not in e):
            element["action_id"] = _random_id(action_ids)
            action_ids.add(element["action_id"])
    return blocks


def find_button(blocks: list[Json], action_id: str) -> tuple[Json, Json]:
    """Return ``(block, button)`` for the first button whose ``action_id`` matches; raise LookupError."""
    for block in blocks:
        for element in elements(block):
            if element.get("type") == "button" and element.get("action_id") == action_id:
                return block, element
    raise LookupError(f"no button with action_id {action_id!r}")
