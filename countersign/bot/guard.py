"""What `/slack/events` refuses before Bolt sees it, so bad input gets a 4xx and never a 500.

- a body over `MAX_BODY_BYTES`: 413;
- a missing or malformed `X-Slack-Request-Timestamp`, a timestamp more than 5 minutes off, or a
  signature that is not Slack's: 401 (https://docs.slack.dev/authentication/verifying-requests-from-slack/,
  checked with slack_sdk's `SignatureVerifier`; Bolt checks it again);
- a signed interactivity payload without the shape Slack always sends (a `type`, a `user` with an
  id, a non-empty `actions` list for `block_actions`, a `view` with a `type` and a `callback_id`
  for view payloads): 400. Bolt would fail on it with a 500;
- a payload meant for another app or another installation than the bot token's: 403 (`is_ours`). A
  reviewer from a partner workspace in a Slack Connect channel is not "another installation": their
  clicks and modal submits are for ours, and pass.
"""

from __future__ import annotations

import io
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

MAX_BODY_BYTES = 1024 * 1024  # interactivity payloads are a few kB; a full modal stays far below this
UNAUTHORIZED = "401 Unauthorized"
BAD_REQUEST = "400 Bad Request"


@dataclass(frozen=True)
class Installation:
    """The installation the bot token belongs to: our app's id and where it is installed, a workspace
    (`T…`), or for an org-wide install in an Enterprise organization the org (`E…`, `org_wide`)."""

    app_id: str
    installed_in: str
    org_wide: bool = False


def installation(slack: WebClient) -> Installation:
    """Ours, asked of Slack: auth.test names the token's workspace, or its org and
    `is_enterprise_install` for an org-wide install (https://docs.slack.dev/reference/methods/auth.test),
    and bots.info the app of the token's bot (https://docs.slack.dev/reference/methods/bots.info; its
    scope `users:read` is in manifest.yml). Raises slack_sdk's `SlackApiError` when Slack refuses."""
    auth = slack.auth_test()
    app_id = slack.bots_info(bot=auth["bot_id"])["bot"]["app_id"]
    if auth.get("is_enterprise_install") is True:
        return Installation(app_id, auth["enterprise_id"], org_wide=True)
    return Installation(app_id, auth["team_id"])


def is_ours(payload: dict[str, Any], ours: Installation) -> bool:
    """Whether an interactivity payload (block_actions, view_submission, view_closed) is meant for
    `ours`, whichever workspace the person who acted belongs to.

    The payload's `api_app_id` must be our app. The installation it is for is named
    - for an org-wide install (`is_enterprise_install` true), by its org: `enterprise.id`, else
      `team.enterprise_id` (`team` may then be null, say the comments of Bolt for Python's
      `extract_team_id` in slack_bolt/request/internals.py);
    - otherwise by the workspace: `view.app_installed_team_id` when the payload has it, else `team.id`,
      the order Bolt reads them in since https://github.com/slackapi/bolt-python/pull/734. In a Slack
      Connect channel a partner's modal submit names the submitter's workspace in `team.id` and ours only
      in `view.app_installed_team_id` (Slack support, in https://github.com/slackapi/bolt-js/issues/1614),
      while their button click names ours in `team.id`
      (https://github.com/slackapi/java-slack-sdk/issues/1041).

    `user.team_id` is the person's own workspace and never names the installation. Slack has no org
    counterpart of `app_installed_team_id` (Bolt's comment), so a modal submit that a partner from
    another org sends to an org-wide install may name their org, and be refused.
    """
    if payload.get("api_app_id") != ours.app_id:
        return False
    org_wide = payload.get("is_enterprise_install") is True
    named = _org(payload) if org_wide else _installing_workspace(payload)
    return org_wide == ours.org_wide and named == ours.installed_in


def _installing_workspace(payload: dict[str, Any]) -> Any:
    view = payload.get("view")
    installed = view.get("app_installed_team_id") if isinstance(view, dict) else None
    if isinstance(installed, str):
        return installed
    team = payload.get("team")
    return team.get("id") if isinstance(team, dict) else None


def _org(payload: dict[str, Any]) -> Any:
    enterprise = payload.get("enterprise")
    if isinstance(enterprise, dict):
        return enterprise.get("id")
    team = payload.get("team")
    return team.get("enterprise_id") if isinstance(team, dict) else None


def refuse(environ: dict[str, Any], signing_secret: str, ours: Installation) -> str | None:
    """The HTTP status line to answer instead of Bolt, or None to let Bolt handle the request.

    An interactivity payload not meant for `ours` (`is_ours`) gets 403. Reads the body and puts it
    back in `environ["wsgi.input"]` for Bolt.
    """
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return BAD_REQUEST
    if length > MAX_BODY_BYTES:
        return "413 Request Entity Too Large"
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    timestamp = str(environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", ""))
    signature = str(environ.get("HTTP_X_SLACK_SIGNATURE", ""))
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return UNAUTHORIZED
    if not SignatureVerifier(signing_secret).is_valid(body, timestamp, signature):
        return UNAUTHORIZED
    form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    if "payload" not in form:
        return None  # not an interactivity payload: Bolt answers it (or 404s it)
    try:
        payload = json.loads(form["payload"][0])
    except ValueError:
        return BAD_REQUEST
    if not isinstance(payload, dict) or not _shape_ok(payload):
        return BAD_REQUEST
    return None if is_ours(payload, ours) else "403 Forbidden"


def _is_dict_with_str(value: Any, key: str) -> bool:
    return isinstance(value, dict) and isinstance(value.get(key), str)


def _shape_ok(payload: dict[str, Any]) -> bool:
    kind = payload.get("type")
    if not isinstance(kind, str) or not _is_dict_with_str(payload.get("user"), "id"):
        return False
    if any(
        payload.get(k) is not None and not isinstance(payload[k], dict)
        for k in ("team", "channel", "container")
    ):
        return False
    if kind == "block_actions":
        actions = payload.get("actions")
        return (
            isinstance(actions, list)
            and bool(actions)
            and all(_is_dict_with_str(a, "action_id") for a in actions)
        )
    if kind in ("view_submission", "view_closed"):
        view = payload.get("view")
        return _is_dict_with_str(view, "callback_id") and _is_dict_with_str(view, "type")
    return True
