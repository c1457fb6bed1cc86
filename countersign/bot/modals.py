"""Opening countersign's modals, and answering their submits.

The robust shape for Slack's 3-second, single-use `trigger_id`
(https://docs.slack.dev/tools/bolt-python/concepts/opening-modals): `views.open` with a loading
view first, before any database work, then `views.update` with the real form (or a notice of why
not). A submit's field errors go back in the ack itself (`response_action: errors`,
https://docs.slack.dev/surfaces/modals).

A second modal button pressed before the first modal is filled (a double click, or Edit then Reject)
opens a second modal, which replaces the first: that one's `views.update` is then answered `not_found`
(the view no longer exists, https://docs.slack.dev/reference/methods/views.update). Opening a modal
records nothing, so a superseded modal is logged in one line and nobody is told of a failure.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from ..router import review
from ..router.cards import loading_view
from ..router.runtime import Runtime
from .payload import Click, metadata

log = logging.getLogger(__name__)


def open_modal(runtime: Runtime, client: WebClient, click: Click) -> None:
    """Edit / Reject / Details buttons: open a loading modal at once, then fill it. A modal closed or
    replaced before it is filled (`views.update` answers `not_found`) is left alone. Raises
    `SlackApiError` for Slack's other refusals, and what `review.modal_view` raises."""
    title = review.MODALS[click.action_id][0]
    view_id = client.views_open(trigger_id=click.trigger_id, view=loading_view(title))["view"]["id"]
    view = review.modal_view(runtime, click.request_id, click.user["slack_user_id"], click.action_id)
    if "private_metadata" in view:  # a form: its submit is to say where it was opened from
        view["private_metadata"] = metadata(click.request_id, click.where, click.shown)
    try:
        client.views_update(view_id=view_id, view=view)
    except SlackApiError as exc:
        if exc.response.get("error") != "not_found":
            raise
        log.info(
            "%s modal %s of %s was superseded before it was filled",
            click.action_id,
            view_id,
            click.request_id,
        )


def ack_for(submission: review.Submission) -> dict[str, Any]:
    """The keyword arguments of Bolt's `ack()` for a checked submit: the inline errors, if any
    (the modal stays open), else nothing (it closes)."""
    return {"response_action": "errors", "errors": submission.errors} if submission.errors else {}
