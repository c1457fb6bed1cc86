"""Build and deliver interactivity payloads the way Slack does: form-encoded, signed, over real HTTP.

Payload shapes: https://docs.slack.dev/reference/interaction-payloads/block_actions-payload and, for
view_submission and view_closed,
https://docs.slack.dev/reference/interaction-payloads/view-interactions-payload . A slash command
is a form of its own fields, no ``payload``:
https://docs.slack.dev/interactivity/implementing-slash-commands .
Signing: https://docs.slack.dev/authentication/verifying-requests-from-slack/ . The signature is
``"v0=" + hex(HMAC-SHA256(secret, "v0:<timestamp>:<raw body>"))``, sent in ``X-Slack-Signature`` with
the unix-seconds timestamp in ``X-Slack-Request-Timestamp``.
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request

from slack_sdk.signature import SignatureVerifier

from countersign.sandbox.identity import API_APP_ID, BOT_USER_ID
from countersign.sandbox.types import Json

#: How long ``signed_post`` waits for the bot, in seconds. Slack itself gives up after 3 s
#: (https://docs.slack.dev/tools/bolt-python/concepts/acknowledge). The sandbox waits longer so a slow
#: bot still shows its answer; the page flags answers slower than 3 s.
CLICK_TIMEOUT_SECONDS = 10.0
#: The (deprecated) verification token carried in every payload, next to ``identity.API_APP_ID``.
VERIFICATION_TOKEN = "sandboxverificationtoken"
#: The User-Agent Slack sends on requests to apps.
USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"

# Talk to the bot directly, whatever proxy the environment configures.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _slack_ts() -> str:
    return f"{time.time():.6f}"


def new_trigger_id() -> str:
    """A fresh trigger_id shaped like Slack's: ``"<unix seconds>.<number>.<32 hex digits>"``."""
    return f"{int(time.time())}.{secrets.randbelow(10**12)}.{secrets.token_hex(16)}"


def _envelope(kind: str, team: Json, user: Json) -> Json:
    """The fields every interactivity payload starts with: its type, the workspace, who acted, the app."""
    return {"type": kind, "team": team, "user": user, "api_app_id": API_APP_ID, "token": VERIFICATION_TOKEN}


def _channel_name(channel_id: str) -> str:
    """Slack names direct-message channels ``directmessage``; other channels get a name from their id."""
    return "directmessage" if channel_id.startswith("D") else channel_id.lower()


def block_actions_payload(
    *,
    team: Json,
    user: Json,
    message: Json,
    channel_id: str,
    block_id: str,
    button: Json,
    response_url: str,
    trigger_id: str | None = None,
) -> Json:
    """The ``block_actions`` payload Slack sends when ``user`` presses ``button`` on ``message``.

    ``team`` is the payload's ``{"id", "domain"}`` and ``user`` its ``{"id", "username", "name", "team_id"}``
    (``Sandbox.click_payload`` says which workspace each names). ``message`` is the Slack-shaped message
    (see ``shapes.slack_message``). The action carries ``value`` and ``style`` only when the button has
    them, as Slack does. ``trigger_id`` defaults to a fresh one.
    """
    return {
        **_envelope("block_actions", team, user),
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel_id,
            "is_ephemeral": False,
        },
        "trigger_id": trigger_id or new_trigger_id(),
        "channel": {"id": channel_id, "name": _channel_name(channel_id)},
        "message": message,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [_action(button, block_id)],
    }


def _action(button: Json, block_id: str) -> Json:
    """The pressed button as a payload's action; ``value`` and ``style`` only when it has them."""
    action = {
        "action_id": button["action_id"],
        "block_id": block_id,
        "text": button.get("text"),
        "type": "button",
        "action_ts": _slack_ts(),
    }
    action.update({key: button[key] for key in ("value", "style") if key in button})
    return action


def home_block_actions_payload(
    *, team: Json, user: Json, view: Json, block_id: str, button: Json, trigger_id: str
) -> Json:
    """The ``block_actions`` payload of a button pressed on the user's Home tab ``view``: its
    ``container`` is the view, and it has no ``channel``, ``message`` or ``response_url``
    (https://docs.slack.dev/reference/interaction-payloads/block_actions-payload)."""
    return {
        **_envelope("block_actions", team, user),
        "container": {"type": "view", "view_id": view["id"]},
        "trigger_id": trigger_id,
        "view": view,
        "state": {"values": {}},
        "is_enterprise_install": False,
        "enterprise": None,
        "actions": [_action(button, block_id)],
    }


def app_home_opened_body(*, team_id: str, user_id: str, channel: str, view: Json | None) -> Json:
    """The Events API body Slack posts when ``user_id`` opens the app's Home tab
    (https://docs.slack.dev/reference/events/app_home_opened): an ``event_callback`` holding the
    event, with the Home view last published to them, if any."""
    event: Json = {
        "type": "app_home_opened",
        "user": user_id,
        "channel": channel,
        "tab": "home",
        "event_ts": _slack_ts(),
    }
    if view is not None:
        event["view"] = view
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "api_app_id": API_APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": "Ev" + secrets.token_hex(5).upper(),
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }


def view_submission_payload(*, team: Json, user: Json, view: Json, trigger_id: str) -> Json:
    """The ``view_submission`` payload Slack sends when ``user`` presses a modal's submit button.

    ``view`` is the Slack-shaped view (``id``, ``hash``, ``callback_id``, ``private_metadata``, ``blocks``,
    ...) whose ``state.values`` holds what the user entered. ``response_urls`` stays empty: the sandbox
    has no ``response_url_enabled`` inputs.
    """
    return {
        **_envelope("view_submission", team, user),
        "trigger_id": trigger_id,
        "view": view,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def view_closed_payload(*, team: Json, user: Json, view: Json, is_cleared: bool) -> Json:
    """The ``view_closed`` payload Slack sends when a user dismisses a modal whose view set
    ``notify_on_close``. ``is_cleared`` is True when the whole view stack closed (``clear_on_close``)."""
    return {
        **_envelope("view_closed", team, user),
        "view": view,
        "is_cleared": is_cleared,
        "is_enterprise_install": False,
        "enterprise": None,
    }


def slash_command_fields(
    *, team: Json, user: Json, channel_id: str, command: str, text: str, response_url: str, trigger_id: str
) -> dict[str, str]:
    """The fields Slack posts when ``user`` types ``command text`` in ``channel_id`` (``team`` and
    ``user`` as in ``block_actions_payload``), every value a string as in a form."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team["id"],
        "team_domain": team["domain"],
        "channel_id": channel_id,
        "channel_name": _channel_name(channel_id),
        "user_id": user["id"],
        "user_name": user["username"],
        "command": command,
        "text": text,
        "api_app_id": API_APP_ID,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }


def encode_payload(payload: Json) -> bytes:
    """The form body Slack sends: ``payload=<url-encoded JSON>``."""
    return urllib.parse.urlencode({"payload": json.dumps(payload, separators=(",", ":"))}).encode()


FORM = "application/x-www-form-urlencoded"


def signed_post(
    url: str, body: bytes, *, secret: str, timestamp: int, content_type: str = FORM
) -> tuple[int, str]:
    """POST ``body`` (a form, or with ``content_type`` JSON) to ``url``, signed with ``secret`` at
    ``timestamp`` (unix seconds).

    Returns ``(HTTP status, body text)``, including 4xx/5xx answers. Connection failures and timeouts
    (``CLICK_TIMEOUT_SECONDS``) raise OSError (``urllib.error.URLError`` or ``TimeoutError``).
    """
    signature = SignatureVerifier(secret).generate_signature(timestamp=str(timestamp), body=body)
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": str(timestamp),
            "X-Slack-Signature": str(signature),
            "User-Agent": USER_AGENT,
        },
    )
    try:
        with _OPENER.open(request, timeout=CLICK_TIMEOUT_SECONDS) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")
