"""The Bolt app: listeners for the card's buttons and the modals' submits.

Listeners stay tiny: `ack()` first (Slack wants the answer within 3 s, and Bolt sends the HTTP
response at `ack()`: https://docs.slack.dev/tools/bolt-python/concepts/acknowledge), then one
domain call, then return. Button listeners touch nothing before `ack()`. Modal submits are the one
exception Slack imposes: field errors travel in the ack itself, so a read-only check comes first.
The process's `Runtime` reaches listeners through Bolt's injected `context`.
"""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App, BoltContext
from slack_sdk import WebClient

from ..router import decisions
from ..router.cards import (
    APPROVE_ACTION,
    DETAILS_ACTION,
    EDIT_ACTION,
    EDIT_CALLBACK,
    REJECT_ACTION,
    REJECT_CALLBACK,
)
from ..router.runtime import Runtime


def create_app(runtime: Runtime) -> App:
    """A Bolt `App` verifying Slack signatures with `SLACK_SIGNING_SECRET` and calling the Web API
    at `SLACK_API_URL`. Raises `ConfigError` if the token, signing secret or `COUNTERSIGN_SECRET`
    (which signs grants) is missing."""
    runtime.settings.require(
        "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "COUNTERSIGN_SECRET", needed_by="`countersign web`"
    )
    app = App(
        client=runtime.slack,
        signing_secret=runtime.settings.SLACK_SIGNING_SECRET,
        token_verification_enabled=False,
    )

    @app.middleware
    def inject_runtime(context: BoltContext, next: Any) -> None:
        context["runtime"] = runtime
        next()

    app.action(APPROVE_ACTION)(on_approve)
    for action_id in (REJECT_ACTION, EDIT_ACTION, DETAILS_ACTION):
        app.action(action_id)(on_modal_button)
    app.view(EDIT_CALLBACK)(on_edit_submit)
    app.view(REJECT_CALLBACK)(on_reject_submit)
    return app


def on_approve(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Approve button: ack, then decide."""
    ack()
    decisions.approve_from_click(context["runtime"], client, body)


def on_modal_button(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Reject / Edit / Details buttons: ack, then open the modal with the click's trigger_id."""
    ack()
    decisions.open_modal(context["runtime"], client, body)


def on_edit_submit(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Edit modal submit: inline errors, or close the modal and approve with the edits."""
    submission = decisions.check_edit(context["runtime"], body)
    ack(**submission.ack)
    if submission.ok:
        decisions.approve_edited(context["runtime"], client, body, submission)


def on_reject_submit(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Reject modal submit: inline errors, or close the modal and reject with the reason."""
    submission = decisions.check_reject(context["runtime"], body)
    ack(**submission.ack)
    if submission.ok:
        decisions.reject_with_reason(context["runtime"], client, body, submission)
