"""`countersign socket`: the Bolt app over Socket Mode, for a workspace without a public URL.

Slack sends events over a WebSocket the app opens with `SLACK_APP_TOKEN` (an `xapp-` token), so no
request is signed and `SLACK_SIGNING_SECRET` is not needed
(https://docs.slack.dev/apis/events-api/using-socket-mode).
"""

from __future__ import annotations

from slack_bolt.adapter.socket_mode import SocketModeHandler

from ..config import Settings
from ..router.runtime import Runtime, slack_at_start
from .app import create_app


def serve(settings: Settings) -> None:
    """Connect to Slack over Socket Mode and handle clicks and submits until stopped. Raises
    `ConfigError` if `SLACK_BOT_TOKEN`, `SLACK_APP_TOKEN` or `COUNTERSIGN_SECRET` is unset, or at
    start when the database, Redis or Slack do not answer or Slack refuses a token (`Runtime.check`,
    `slack_at_start`); `SchemaOutOfDate` when the database is not migrated."""
    needed_by = "`countersign socket`"
    settings.require("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "COUNTERSIGN_SECRET", needed_by=needed_by)
    unsigned = settings.model_copy(update={"SLACK_SIGNING_SECRET": settings.SLACK_SIGNING_SECRET or "unused"})
    runtime = Runtime(unsigned)
    runtime.check()
    runtime.check_slack()
    app_token = settings.SLACK_APP_TOKEN or ""
    with slack_at_start(settings, token="SLACK_APP_TOKEN") as slack:  # the call the handler connects with
        slack.apps_connections_open(app_token=app_token)
    SocketModeHandler(create_app(runtime, needed_by), app_token).start()
