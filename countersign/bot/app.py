"""The Bolt app: listeners for the card's buttons.

Listeners stay tiny: `ack()` first (Slack wants the answer within 3 s, and Bolt sends the HTTP
response at `ack()`: https://docs.slack.dev/tools/bolt-python/concepts/acknowledge), then one
domain call, then return. Nothing touches Redis or the database before `ack()`. The process's
`Runtime` reaches listeners through Bolt's injected `context`.
"""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App, BoltContext
from slack_sdk import WebClient

from ..router.cards import APPROVE_ACTION, REJECT_ACTION
from ..router.decisions import decide_from_click
from ..router.runtime import Runtime
from ..store import APPROVED, REJECTED


def create_app(runtime: Runtime) -> App:
    """A Bolt `App` verifying Slack signatures with `SLACK_SIGNING_SECRET` and calling the Web API
    at `SLACK_API_URL`. Raises `ConfigError` if the token or signing secret is missing."""
    runtime.settings.require("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", command="web")
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
    app.action(REJECT_ACTION)(on_reject)
    return app


def on_approve(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Approve button: ack, then decide."""
    ack()
    decide_from_click(context["runtime"], client, body, APPROVED)


def on_reject(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Reject button: ack, then decide."""
    ack()
    decide_from_click(context["runtime"], client, body, REJECTED)
