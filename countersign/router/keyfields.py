"""Key fields: the payload fields a policy names under `key_fields` (e.g. `[amount, currency,
customer]`), which every card shows first and never folds (`cards.payload_lines`).

That promise holds only for a payload whose key fields a card can show, so the policy refuses a key
field a reviewer may edit to text longer than a card shows (`room`), and intake refuses a payload
that would hide a key field: a key field whose line is longer than a card's field
(`cards.CARD_FIELD_MAX`), or a field named like a key field (equal after `schema.fold`) anywhere
but at the top level under exactly that name, such as `payload.refund.amount` or
`payload.Amount`, which the card would show folded, clipped or not as the key field.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..exceptions import InvalidRequest
from ..schema import fold
from ..validation import field_name
from .cards import CARD_FIELD_MAX, field_line
from .texts import show


def check(action: str, payload: dict[str, Any], key_fields: list[str]) -> None:
    """Refuse a payload of class `action` in which a card could not show one of `key_fields`
    whole and as itself. Raises `InvalidRequest` naming the field, its path and what to do."""
    if not key_fields:
        return
    for field in key_fields:
        if field in payload and len(show(payload[field])) > room(field):
            raise InvalidRequest(
                f"payload.{field}: a key field of {action}, too long for the card (over {CARD_FIELD_MAX} "
                "characters as shown); a card must show it whole"
            )
    named = {fold(name): name for name in key_fields}
    for path, key, top in _keys(payload, "payload", top=True):
        name = named.get(fold(key))
        if name is None or (top and key == name):
            continue
        where = "nested, where the card does not show it" if not top else "not named exactly like it"
        raise InvalidRequest(
            f"{path}: named like the key field {name} of {action} but {where}; send it as payload.{name}"
        )


def room(name: str) -> int:
    """How many characters of the key field `name`'s value a card shows whole (as `show` writes it)."""
    return CARD_FIELD_MAX - len(field_line(name, ""))


def _keys(value: Any, where: str, top: bool) -> Iterator[tuple[str, str, bool]]:
    """`(path, key, at the top level)` for every key of every object within `value`."""
    if isinstance(value, list):
        for number, item in enumerate(value):
            yield from _keys(item, f"{where}[{number}]", top=False)
    elif isinstance(value, dict):
        for key, child in value.items():
            path = f"{where}.{field_name(key)}"
            yield path, key, top
            yield from _keys(child, path, top=False)
