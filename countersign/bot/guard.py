"""What `/slack/events` refuses before Bolt sees it, so bad input gets a 4xx and never a 500, and no
check reads another object than the one Bolt acts on (`check`, called by `bot.web` on each body).

- a missing or malformed `X-Slack-Request-Timestamp`, a timestamp more than 5 minutes off, or a
  signature that is not Slack's for the body's bytes: 401 (`signed`);
- a body that is not the one form Slack posts interactions in (`bot.body.parse`: one `payload` form
  field holding one JSON object) or slash commands in (their fields, each once), a command without the
  fields Slack always sends (`COMMAND_FIELDS`), or a payload without the shape Slack always sends (a `type`, a
  `user` with an id, a non-empty `actions` list for `block_actions`, a `view` with a `type` and a
  `callback_id` for view payloads): 400. Bolt would fail on some of them with a 500;
- a payload meant for another app or another installation than the bot token's: 403 (`is_ours`). A
  reviewer from a partner workspace in a Slack Connect channel is not "another installation": their
  clicks and modal submits are for ours, and pass.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient

from ..exceptions import BadSlackBody
from . import body

MAX_SKEW_SECONDS = 5 * 60  # Slack's replay window


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


def is_our_command(fields: dict[str, Any], ours: Installation) -> bool:
    """Whether a slash command's fields are meant for `ours`: `api_app_id` is our app, and
    `team_id` our workspace, or for an org-wide install (`is_enterprise_install` "true")
    `enterprise_id` our org (https://docs.slack.dev/interactivity/implementing-slash-commands)."""
    org_wide = fields.get("is_enterprise_install") == "true"
    named = fields.get("enterprise_id") if org_wide else fields.get("team_id")
    return (
        fields.get("api_app_id") == ours.app_id and org_wide == ours.org_wide and named == ours.installed_in
    )


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


@dataclass(frozen=True)
class Refusal:
    """What `/slack/events` answers instead of Bolt: an HTTP `status` and one line saying `why`."""

    status: int
    why: str


def check(
    raw: bytes, headers: Mapping[str, str], secret: str, ours: Installation
) -> dict[str, Any] | Refusal:
    """The interactivity payload of a request to `/slack/events`, or the `Refusal` to answer instead.

    `raw` is the body as received and `headers` the request's, names in lower case. In order: a
    timestamp or signature that is not Slack's for `raw` under `secret` (`signed`): 401; a body that
    is not the one form Slack sends (`body.parse`), or a payload without the shape Slack always
    sends: 400; a payload meant for another app or installation than `ours` (`is_ours`): 403. The
    payload returned is the one object every later reader gets: Bolt, its listeners and
    `bot.payload`.
    """
    timestamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    if not signed(raw, timestamp, signature, secret, time.time()):
        return Refusal(401, "the request is not signed by Slack, or not in the last 5 minutes")
    try:
        payload = body.parse(raw, headers.get("content-type", ""))
    except BadSlackBody as exc:
        return Refusal(400, str(exc))
    if "type" not in payload and "command" in payload:
        return _command(payload, ours)
    if payload.get("type") in body.EVENT_TYPES:
        return _event(payload, ours)
    if not _shape_ok(payload):
        return Refusal(400, "the payload does not have the shape of a Slack interaction")
    if not is_ours(payload, ours):
        return Refusal(403, "the payload is meant for another app or installation")
    return payload


def _event(sent: dict[str, Any], ours: Installation) -> dict[str, Any] | Refusal:
    """An Events API body, or the refusal: a challenge must carry it (400); an event needs an `event`
    object with a `type` and a `user` (400), and must be for our app (`api_app_id`) and workspace
    (`team_id`), or org for an org-wide install (`enterprise_id`) (403)."""
    if sent["type"] == "url_verification":
        return sent if isinstance(sent.get("challenge"), str) else Refusal(400, "a challenge without one")
    event = sent.get("event")
    if not (_is_dict_with_str(event, "type") and _is_dict_with_str(event, "user")):
        return Refusal(400, "an event must have an event object with a type and a user")
    if not _bolt_reads_ok(sent):
        return Refusal(400, "the event does not have the shape Slack sends")
    named = sent.get("enterprise_id") if ours.org_wide else sent.get("team_id")
    if sent.get("api_app_id") != ours.app_id or named != ours.installed_in:
        return Refusal(403, "the event is meant for another app or installation")
    return sent


COMMAND_FIELDS = ("command", "user_id", "team_id", "api_app_id", "response_url")
"""The fields of a slash command countersign and Bolt read, which Slack always sends."""


def _command(fields: dict[str, Any], ours: Installation) -> dict[str, Any] | Refusal:
    """A slash command's fields, or the refusal: 400 without a field of `COMMAND_FIELDS`, 403 when
    meant for another app or installation (`is_our_command`)."""
    if not all(fields.get(name) for name in COMMAND_FIELDS):
        return Refusal(400, f"a slash command must have {', '.join(COMMAND_FIELDS)}")
    if not is_our_command(fields, ours):
        return Refusal(403, "the command is meant for another app or installation")
    return fields


def signed(raw: bytes, timestamp: str, signature: str, secret: str, now: float) -> bool:
    """Whether `signature` is Slack's v0 signature of the body `raw` sent at `timestamp` (unix
    seconds, digits only, at most 5 minutes from `now`): `"v0=" + hex(HMAC-SHA256(secret,
    b"v0:" + timestamp + b":" + raw))`, compared in constant time
    (https://docs.slack.dev/authentication/verifying-requests-from-slack/). Computed over the bytes
    as received, so any body is checked before it is read; slack_sdk's `SignatureVerifier` decodes
    the body as UTF-8 first, and raises on other bytes."""
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return False
    if abs(now - int(timestamp)) > MAX_SKEW_SECONDS:
        return False
    base = b"v0:" + timestamp.encode() + b":" + raw
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace"))


def _is_dict_with_str(value: Any, key: str) -> bool:
    return isinstance(value, dict) and isinstance(value.get(key), str)


def _object(value: Any) -> bool:
    return isinstance(value, dict)


def _object_or_null(value: Any) -> bool:
    return value is None or isinstance(value, dict)


def _objects_or_null(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(item, dict) for item in value))


def _one_object_at_most(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= 1 and all(isinstance(item, dict) for item in value)


# The fields Bolt reads from any payload before a listener runs (`build_context` in
# slack_bolt/request/internals.py, and its log of a request no listener matches), each with the JSON
# types Slack sends it as; Bolt fails with a 500 on others (a number for `team`, a null `view` or
# `response_urls`, a string for `authorizations`, ...). countersign's modals ask for no response URL,
# and Bolt fails on more than one.
BOLT_READS: dict[str, Callable[[Any], bool]] = {
    "team": _object_or_null,
    "enterprise": _object_or_null,
    "channel": _object_or_null,
    "container": _object_or_null,
    "view": _object,
    "event": _object,
    "authorizations": _objects_or_null,
    "response_urls": _one_object_at_most,
}


def _bolt_reads_ok(payload: dict[str, Any]) -> bool:
    return all(key not in payload or sent_by_slack(payload[key]) for key, sent_by_slack in BOLT_READS.items())


def _shape_ok(payload: dict[str, Any]) -> bool:
    kind = payload.get("type")
    if not isinstance(kind, str) or not _is_dict_with_str(payload.get("user"), "id"):
        return False
    if not _bolt_reads_ok(payload):
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
