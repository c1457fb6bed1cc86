"""Driving countersign's modals and App Home tab through the sandbox as a reviewer (or a crafted
client) would."""

from __future__ import annotations

import json
from typing import Any

from countersign.sandbox import Sandbox

from . import wait_for


def opened_home(sb: Sandbox, user: str, *expected: str) -> dict[str, Any]:
    """Open `user`'s Home tab; wait until the published view lists every id in `expected`."""
    assert sb.open_home(user) == (200, "")

    def published() -> dict[str, Any] | None:
        view = sb.home(user)
        shown = json.dumps(view, ensure_ascii=False)
        return view if view is not None and all(i in shown for i in expected) else None

    return wait_for(published, what=f"{user}'s Home listing {expected}")


def open_view(
    sb: Sandbox, card: dict[str, Any], action_id: str, user: str, input_block: str | None
) -> dict[str, Any]:
    """Press `action_id` on `card` as `user`; wait until the modal holds its real content."""
    assert sb.click(card["channel"], card["ts"], action_id, user)[0] == 200

    def filled() -> dict[str, Any] | None:
        views = [
            v for v in sb.views(user) if "Loading…" not in json.dumps(v["view"]["blocks"], ensure_ascii=False)
        ]
        if input_block is None:
            return views[0] if views else None
        return next((v for v in views if input_block in json.dumps(v["view"]["blocks"])), None)

    return wait_for(filled, what=f"the {action_id} modal")


def raw_submit(sb: Sandbox, view: dict[str, Any], user: str, values: dict[str, str | None]) -> dict[str, Any]:
    """Send a view_submission as a crafted client would (no client-side checks); return the ack body."""
    code, body = sb.send_signed(sb.submit_payload(view["id"], user, values))
    assert code == 200
    return json.loads(body) if body else {}
