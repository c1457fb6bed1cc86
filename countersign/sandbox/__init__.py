"""A local stand-in for Slack, so countersign runs and is tested without a Slack workspace.

``Sandbox`` keeps the workspace in memory: messages, ephemerals, a user directory (with users of partner
workspaces, as in a Slack Connect channel) and open modals. It sends signed ``block_actions``,
``view_submission`` and ``view_closed`` payloads to the bot's Request URL, records every Web API call
and can inject faults (429, 5xx, errors, delays). ``serve`` exposes it over
HTTP: the Slack Web API at ``<url>/api/<method>`` (usable by ``slack_sdk.WebClient(base_url=<url> +
"/api/")``) and a card viewer page with working buttons and modals at ``<url>/``.
"""

from countersign.sandbox.identity import DEFAULT_USERS
from countersign.sandbox.modals import SubmissionRefused
from countersign.sandbox.sandbox import Sandbox
from countersign.sandbox.server import SandboxServer, serve

__all__ = ["DEFAULT_USERS", "Sandbox", "SandboxServer", "SubmissionRefused", "serve"]
