"""Opening countersign's modals, and answering their submits.

The robust shape for Slack's 3-second, single-use `trigger_id`
(https://docs.slack.dev/tools/bolt-python/concepts/opening-modals): `views.open` with a loading
view first, before any database work, then `views.update` with the real form (or a notice of why
not). A submit's field errors go back in the ack itself (`response_action: errors`,
https://docs.slack.dev/surfaces/modals).
"""

from __future__ import annotations

from typing import Any

from slack_sdk import WebClient

from ..router import review
from ..router.cards import loading_view
from ..router.runtime import Runtime
from .payload import Click, metadata


def open_modal(runtime: Runtime, client: WebClient, click: Click) -> None:
    """Edit / Reject / Details buttons: open a loading modal at once, then fill it."""
    title = review.MODALS[click.action_id][0]
    view_id = client.views_open(trigger_id=click.trigger_id, view=loading_view(title))["view"]["id"]
    view = review.modal_view(runtime, click.request_id, click.user["slack_user_id"], click.action_id)
    if "private_metadata" in view:  # a form: its submit is to say where it was opened from
        view["private_metadata"] = metadata(click.request_id, click.where, click.shown)
    client.views_update(view_id=view_id, view=view)


def ack_for(submission: review.Submission) -> dict[str, Any]:
    """The keyword arguments of Bolt's `ack()` for a checked submit: the inline errors, if any
    (the modal stays open), else nothing (it closes)."""
    return {"response_action": "errors", "errors": submission.errors} if submission.errors else {}
