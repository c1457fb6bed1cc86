"""The `/countersign` slash command: what each subcommand answers, ephemerally, to the reviewer who
typed it (rendered by `router/inbox.py`).

`pending` is the reviewer's queue (`review.queue`: the same authorisation a click gets), `show ID`
one request with its trail, `stats [ACTION]` counts by status and outcome, `help` the list; anything
else is answered with the list. Slack wants the command acked within 3 s
(https://docs.slack.dev/interactivity/implementing-slash-commands): the bot acks first and posts
this answer to the command's `response_url` afterwards.
"""

from __future__ import annotations

from typing import Any

from . import inbox, review
from .runtime import Runtime

COMMAND = inbox.COMMAND


def answer(runtime: Runtime, user_id: str, text: str) -> dict[str, Any]:
    """The ephemeral message (`response_type`, `text`, `blocks`) answering `/countersign text` typed
    by `user_id` (a Slack user id). Raises what the store raises when the database fails."""
    word, _, rest = text.strip().partition(" ")
    argument = rest.strip()
    if word == "pending":
        queue = review.queue(runtime, user_id, inbox.MAX_LISTED + 1)
        return inbox.pending_message(queue[: inbox.MAX_LISTED], more=len(queue) > inbox.MAX_LISTED)
    if word == "show" and argument:
        request = runtime.store.get(argument)
        trail = runtime.store.audit_trail(argument) if request is not None else []
        return inbox.show_message(request, argument, trail)
    if word == "stats":
        return inbox.stats_message(runtime.store.counts(argument or None), argument or None)
    return inbox.help_message(None if word in ("", "help") else word)
