"""The `/countersign` slash command: what each subcommand answers, ephemerally, to the reviewer who
typed it (rendered by `router/inbox.py`).

`pending` is the reviewer's queue (`review.queue`: the same authorisation a click gets), `show ID`
one request with its trail, `stats [ACTION]` counts by status and outcome, `help` the list; anything
else is answered with the list. `show` answers only those who may see the request (`may_see`: its
approvers at any level, the policy's `admins`); anyone else, and an id countersign does not know,
get the same refusal, so it reveals nothing, not even whether the request exists. `stats` answers
the policy's `admins` only, as the Home tab's "Gates" (`home.is_admin`). Slack wants the command
acked within 3 s (https://docs.slack.dev/interactivity/implementing-slash-commands): the bot acks
first and posts this answer to the command's `response_url` afterwards.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from slack_sdk.errors import SlackApiError

from ..exceptions import RetryLater
from ..store import Request
from ..store.stats import dead_lettered
from . import directory, home, inbox, review
from .runtime import Runtime

log = logging.getLogger(__name__)

COMMAND = inbox.COMMAND
EVER = datetime(1970, 1, 1, tzinfo=UTC)  # `stats` counts every request, of any age


def answer(runtime: Runtime, user_id: str, text: str) -> dict[str, Any]:
    """The ephemeral message (`response_type`, `text`, `blocks`) answering `/countersign text` typed
    by `user_id` (a Slack user id). Raises what the store raises when the database fails."""
    word, _, rest = text.strip().partition(" ")
    argument = rest.strip()
    if word == "pending":
        queue = review.queue(runtime.store, user_id, inbox.MAX_LISTED + 1)
        return inbox.pending_message(queue[: inbox.MAX_LISTED], more=len(queue) > inbox.MAX_LISTED)
    if word == "show":
        return _show(runtime, user_id, argument)
    if word == "stats":
        return _stats(runtime, user_id, argument or None)
    return inbox.help_message(None if word in ("", "help") else word)


def _show(runtime: Runtime, user_id: str, request_id: str) -> dict[str, Any]:
    if not request_id:
        return inbox.missing_id_message()
    request = runtime.store.get(request_id)
    if request is None or not may_see(runtime, user_id, request):
        return inbox.not_shown_message(request_id)
    return inbox.show_message(request, runtime.store.audit_trail(request_id))


def _stats(runtime: Runtime, user_id: str, action: str | None) -> dict[str, Any]:
    if not home.is_admin(runtime, user_id):
        return inbox.admins_only_message()
    counts = runtime.store.counts(action)
    refused = dead_lettered(runtime.store.engine, EVER, action)
    if action is not None and not counts and action not in runtime.policy.file.actions:
        return inbox.unknown_action_message(action, refused)
    return inbox.stats_message(counts, action, refused)


def may_see(runtime: Runtime, user_id: str, request: Request) -> bool:
    """True when `user_id` (a Slack user id) may read `request` with `show`: one of its approvers at
    any level (the current level's, those who decided it, and the users and user-group members of
    every level of its stored rules, `directory.approvers`) or one of the policy's `admins`
    (`home.is_admin`). A user group Slack cannot resolve now counts as not naming them (logged)."""
    deciders = [decider["slack_user_id"] for decider in request.decided_by or []]
    if user_id in request.approvers or user_id in deciders:
        return True
    levels = request.rules.levels
    if any(user_id in level.users for level in levels):
        return True
    groups = [group for level in levels for group in level.usergroups]
    if groups:
        try:
            if user_id in directory.approvers(runtime.slack, [], groups):
                return True
        except (RetryLater, SlackApiError) as exc:
            log.warning("approvers' user groups not resolved for `show` by %s (%s)", user_id, exc)
    return home.is_admin(runtime, user_id)
