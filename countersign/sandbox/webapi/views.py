"""views.*: opening, pushing and updating modal views (kept by ``viewstore.ViewStore``), and
publishing a user's Home tab (``State.homes``)."""

from __future__ import annotations

import hashlib
import secrets

from countersign.sandbox.identity import API_APP_ID
from countersign.sandbox.modals import ViewError, decode_view
from countersign.sandbox.types import Json
from countersign.sandbox.webapi.answers import ApiError, ApiResponse, ok
from countersign.sandbox.webapi.arguments import Params
from countersign.sandbox.workspace import Workspace


def _with_trigger(ws: Workspace, params: Params) -> tuple[str, Json]:
    """The user who issued ``trigger_id`` and the checked view, for views.open and views.push: the
    view is checked before the trigger is used, so a refused view leaves the trigger usable."""
    if not params.get("trigger_id"):
        raise ViewError("invalid_arguments", ["[ERROR] missing required field: trigger_id"])
    view = decode_view(params.get("view"))
    trigger = ws.state.views.exchange_trigger(params["trigger_id"], ws.clock(), ws.trigger_ttl_seconds)
    return trigger["user"], view


def open_view(ws: Workspace, params: Params) -> ApiResponse:
    """views.open: open a modal for the user whose interaction issued ``trigger_id``.

    https://docs.slack.dev/reference/methods/views.open . ``view`` is a dict or JSON string, checked by
    ``modals.decode_view`` (``invalid_arguments`` with ``response_metadata.messages``, ``view_too_large``)
    before the trigger is used, so a refused view leaves the trigger usable. Then the trigger must be
    known, unused and at most ``ws.trigger_ttl_seconds`` seconds old (``invalid_trigger_id``,
    ``exchanged_trigger_id``, ``expired_trigger_id``;
    https://docs.slack.dev/tools/bolt-python/concepts/opening-modals). Answers ``{"view": {..., "id",
    "hash", "state": {"values": {}}, "team_id", "app_id"}}``. A modal the user already had open is
    replaced (see ``ViewStore.open_view``).
    """
    user, view = _with_trigger(ws, params)
    return ok(view=ws.state.views.open_view(user, view, ws.team_id)["view"])


def push_view(ws: Workspace, params: Params) -> ApiResponse:
    """views.push: put a view on top of the open modal of the user who issued ``trigger_id``.

    https://docs.slack.dev/reference/methods/views.push . Checks as views.open, then ``not_found`` when
    that user has no open modal (sandbox choice) and ``push_limit_reached`` above root + 2 views.
    """
    user, view = _with_trigger(ws, params)
    return ok(view=ws.state.views.push_view(user, view, ws.team_id)["view"])


def update_view(ws: Workspace, params: Params) -> ApiResponse:
    """views.update: replace an open view, found by ``view_id`` or else ``external_id``.

    https://docs.slack.dev/reference/methods/views.update . Needs no trigger. ``hash`` (optional) must be
    the view's current hash, else ``hash_conflict``; an unknown or closed view is ``not_found``; the view
    is checked as in views.open. Answers ``{"view"}`` with the same id and a new hash.
    """
    if not params.get("view_id") and not params.get("external_id"):
        raise ViewError("invalid_arguments", ["[ERROR] view_id or external_id is required"])
    view = decode_view(params.get("view"))
    views = ws.state.views
    record = views.find_view(params.get("view_id"), params.get("external_id"))
    return ok(view=views.update_view(record, view, ws.team_id, params.get("hash") or None)["view"])


def publish_view(ws: Workspace, params: Params) -> ApiResponse:
    """views.publish: replace the Home tab of ``user_id`` with ``view`` (type ``home``).

    https://docs.slack.dev/reference/methods/views.publish . Needs no trigger. A missing ``user_id``
    is ``invalid_arguments``, one the workspace does not know ``user_not_found``; the view is checked
    as in views.open, for a Home tab (``modals.decode_view(home=True)``); ``hash`` (optional) must be
    the Home's current hash, else ``hash_conflict``. Answers ``{"view"}`` with the Home's id (the
    same for every publish to that user) and a new hash.
    """
    user = params.get("user_id")
    if not user:
        raise ViewError("invalid_arguments", ["[ERROR] missing required field: user_id"])
    if user not in ws.users:
        raise ApiError("user_not_found")
    view = decode_view(params.get("view"), home=True)
    current = ws.state.homes.get(user)
    if params.get("hash") and (current is None or params["hash"] != current["hash"]):
        raise ViewError("hash_conflict")
    view_id = current["id"] if current else "VH" + hashlib.sha256(user.encode()).hexdigest()[:9].upper()
    published = {
        **view,
        "id": view_id,
        "hash": f"{int(ws.clock())}.{secrets.token_hex(4)}",
        "team_id": ws.team_id,
        "app_id": API_APP_ID,
        "state": {"values": {}},
    }
    ws.state.homes[user] = published
    return ok(view=published)
