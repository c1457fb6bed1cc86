"""`countersign socket`: the Bolt app over Socket Mode, for a workspace without a public URL.

Slack sends events over a WebSocket the app opens with `SLACK_APP_TOKEN` (an `xapp-` token), so no
request is signed and `SLACK_SIGNING_SECRET` is not needed
(https://docs.slack.dev/apis/events-api/using-socket-mode).
"""

from __future__ import annotations

from slack_bolt.adapter.socket_mode import SocketModeHandler

from ..config import Settings
from ..router.runtime import Runtime
from .app import create_app


def serve(settings: Settings) -> None:
    """Connect to Slack over Socket Mode and handle clicks and submits until stopped. Raises
    `ConfigError` if `SLACK_BOT_TOKEN`, `SLACK_APP_TOKEN` or `COUNTERSIGN_SECRET` is unset."""
    needed_by = "`countersign socket`"
    settings.require("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "COUNTERSIGN_SECRET", needed_by=needed_by)
    unsigned = settings.model_copy(update={"SLACK_SIGNING_SECRET": settings.SLACK_SIGNING_SECRET or "unused"})
    SocketModeHandler(create_app(Runtime(unsigned), needed_by), settings.SLACK_APP_TOKEN).start()
