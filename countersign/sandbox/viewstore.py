"""The modal views open in the workspace: the trigger_ids that open them and each user's view stack.

Slack shows a user one modal at a time, as a stack of at most ``MAX_VIEW_STACK`` views: the root first,
the top one on screen (https://docs.slack.dev/surfaces/modals). ``ViewStore`` keeps those stacks, the
Slack-shaped views in them and the trigger_ids handed out with interactions. It has no lock of its own:
hold ``State.lock`` while using it.
"""

from __future__ import annotations

import secrets
import string
from typing import Any

from countersign.sandbox import modals
from countersign.sandbox.interactivity import new_trigger_id
from countersign.sandbox.limits import MAX_VIEW_STACK
from countersign.sandbox.modals import ViewError
from countersign.sandbox.shapes import slack_view
from countersign.sandbox.types import Json, TriggerRecord, ViewRecord

_VIEW_ID_ALPHABET = string.ascii_uppercase + string.digits


class ViewStore:
    """Trigger ids and open modal views.

    ``triggers`` maps trigger_id -> ``TriggerRecord``; ``records`` maps an open view's id -> ``ViewRecord``;
    ``stacks`` maps a user to their open view ids, root first (the last one is on screen).
    """

    def __init__(self) -> None:
        self.triggers: dict[str, TriggerRecord] = {}
        self.records: dict[str, ViewRecord] = {}
        self.stacks: dict[str, list[str]] = {}

    # --- trigger_ids -------------------------------------------------------------------------------------

    def issue_trigger(self, user: str, now: float, view_id: str | None = None, trigger_id: str = "") -> str:
        """Record a trigger_id handed to the bot at ``now`` (clock seconds) for ``user``; return it.

        ``view_id`` is the modal the interaction happened in (None for a message button).
        """
        trigger_id = trigger_id or new_trigger_id()
        self.triggers[trigger_id] = {"user": user, "issued": now, "used": False, "view_id": view_id}
        return trigger_id

    def exchange_trigger(self, trigger_id: Any, now: float, ttl_seconds: float) -> TriggerRecord:
        """Use up a trigger_id for views.open / views.push and return its record.

        Slack accepts a trigger once, within 3 seconds of issuing it
        (https://docs.slack.dev/tools/bolt-python/concepts/opening-modals). Raises ViewError
        ``invalid_trigger_id`` (never issued), ``exchanged_trigger_id`` (already used) or
        ``expired_trigger_id`` (more than ``ttl_seconds`` seconds old).
        """
        trigger = self.triggers.get(trigger_id) if isinstance(trigger_id, str) else None
        if trigger is None:
            raise ViewError("invalid_trigger_id")
        if trigger["used"]:
            raise ViewError("exchanged_trigger_id")
        if now - trigger["issued"] > ttl_seconds:
            raise ViewError("expired_trigger_id")
        trigger["used"] = True
        return trigger

    # --- views -------------------------------------------------------------------------------------------

    def _new_view_id(self) -> str:
        while True:
            view_id = "V" + "".join(secrets.choice(_VIEW_ID_ALPHABET) for _ in range(10))
            if view_id not in self.records:
                return view_id

    def _check_external_id(self, view: Json, keep: str | None = None) -> None:
        external_id = view.get("external_id")
        if external_id and any(
            r["view"]["external_id"] == external_id and r["id"] != keep for r in self.records.values()
        ):
            raise ViewError("duplicate_external_id")

    def open_view(self, user: str, view: Json, team_id: str) -> ViewRecord:
        """Open ``view`` (validated by ``modals.decode_view``) as ``user``'s modal and return its record.

        A modal the user already had open is replaced without a ``view_closed`` payload (a sandbox choice;
        Slack does not document this case). ``duplicate_external_id`` when another open view has the same
        ``external_id`` (the sandbox checks open views only).
        """
        self._check_external_id(view)
        self.clear_views(user)
        return self._add_view(user, view, team_id, previous=None)

    def push_view(self, user: str, view: Json, team_id: str) -> ViewRecord:
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

    def _add_view(self, user: str, view: Json, team_id: str, previous: str | None) -> ViewRecord:
        view_id = self._new_view_id()
        stack = self.stacks.setdefault(user, [])
        root = stack[0] if stack else view_id
        shaped = slack_view(
            view, view_id=view_id, team_id=team_id, root_view_id=root, previous_view_id=previous, values={}
        )
        record: ViewRecord = {
            "id": view_id,
            "user": user,
            "view": shaped,
            "errors": {},
            "response_error": None,
        }
        self.records[view_id] = record
        stack.append(view_id)
        return record

    def find_view(self, view_id: Any = None, external_id: Any = None) -> ViewRecord:
        """The open view with ``view_id`` (or else ``external_id``); ViewError ``not_found`` if none."""
        if view_id:
            record = self.records.get(view_id) if isinstance(view_id, str) else None
        else:
            found = [
                r for r in self.records.values() if external_id and r["view"]["external_id"] == external_id
            ]
            record = found[0] if found else None
        if record is None:
            raise ViewError("not_found")
        return record

    def top_view(self, view_id: str, user_id: str) -> ViewRecord:
        """The live record of ``view_id`` if it is the view on ``user_id``'s screen; LookupError if not."""
        record = self.records.get(view_id)
        if record is None or record["user"] != user_id:
            raise LookupError(f"no open view {view_id!r} for user {user_id!r}")
        if self.stacks[user_id][-1] != view_id:
            raise LookupError(f"view {view_id!r} is under a pushed view; only the top one can be used")
        return record

    def update_view(
        self, record: ViewRecord, view: Json, team_id: str, view_hash: str | None = None
    ) -> ViewRecord:
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
        record["errors"] = {}
        record["response_error"] = None
        return record

    def close_view(self, view_id: str) -> list[str]:
        """Close an open view and every view pushed above it; return the closed ids (top first)."""
        record = self.records.get(view_id)
        if record is None:
            return []
        stack = self.stacks[record["user"]]
        closed = stack[stack.index(view_id) :][::-1]
        del stack[stack.index(view_id) :]
        for closed_id in closed:
            self.records.pop(closed_id, None)
        if not stack:
            del self.stacks[record["user"]]
        return closed

    def clear_views(self, user: str) -> list[str]:
        """Close all of ``user``'s open views; return the closed ids (top first)."""
        stack = self.stacks.get(user)
        return self.close_view(stack[0]) if stack else []
