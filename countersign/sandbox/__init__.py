"""A local stand-in for Slack, so countersign runs and is tested without a Slack workspace.

``Sandbox`` keeps the workspace in memory: messages, ephemerals and a user directory. It also sends signed
``block_actions`` payloads to the bot's Request URL. ``serve`` exposes it over HTTP: the Slack Web API at
``<url>/api/<method>`` (usable by ``slack_sdk.WebClient(base_url=<url> + "/api/")``) and a card viewer
page with working buttons at ``<url>/``.
"""

from countersign.sandbox.core import DEFAULT_USERS, Sandbox
from countersign.sandbox.server import SandboxServer, serve

__all__ = ["DEFAULT_USERS", "Sandbox", "SandboxServer", "serve"]
