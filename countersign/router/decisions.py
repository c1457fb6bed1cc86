"""What a reviewer's click does: authorise it, decide, resume the agent, and update the card.

Called by the bot's listeners after `ack()`. Authorisation is against the approvers the policy
named at intake, and against the request's state (the store's conditional UPDATE): a refused
click changes nothing, is audited, and gets an ephemeral answer (DESIGN.md, invariant 4).
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from ..store import AlreadyDecided, ApprovalRequest
from . import cards, relay
from .runtime import Runtime

log = logging.getLogger(__name__)


def decide_from_click(runtime: Runtime, client: WebClient, body: dict[str, Any], outcome: str) -> str:
    """Apply an Approve/Reject `block_actions` payload. Returns `decided` | `refused`.

    `body` is the interactivity payload Slack signed: `user.id`, `actions[0].value` (the request
    id), `channel.id`. `outcome` is `approved` | `rejected`.
    """
    user = body["user"]
    request_id = body["actions"][0]["value"]
    store = runtime.store
    request = store.get(request_id)
    if request is None:
        store.refuse(request_id, user["id"], "unknown_request")
        _tell(client, body, cards.UNKNOWN_REQUEST_TEXT)
        return "refused"
    if user["id"] not in request.approvers:
        store.refuse(request_id, user["id"], "not_an_approver", outcome=outcome)
        _tell(client, body, cards.not_an_approver_text(request))
        return "refused"
    decided_by = [
        {"slack_user_id": user["id"], "name": user.get("username") or user.get("name") or user["id"]}
    ]
    result = store.decide(request_id, outcome, decided_by, via="slack")
    if isinstance(result, AlreadyDecided):
        store.refuse(request_id, user["id"], "already_decided", status=result.request.status, outcome=outcome)
        _tell(client, body, cards.already_decided_text(result.request))
        return "refused"
    relay.try_publish(store, runtime.redis, result.event)
    _update_card(client, result.request)
    return "decided"


def _update_card(client: WebClient, request: ApprovalRequest) -> None:
    if request.card_ts is None:
        return
    try:
        client.chat_update(
            channel=request.channel, ts=request.card_ts, **cards.decided_card(request).message()
        )
    except SlackApiError as exc:
        log.warning("request %s: card not updated (%s)", request.id, exc.response.get("error"))


def _tell(client: WebClient, body: dict[str, Any], text: str) -> None:
    channel = (body.get("channel") or {}).get("id") or body.get("container", {}).get("channel_id")
    try:
        client.chat_postEphemeral(channel=channel, user=body["user"]["id"], text=text)
    except SlackApiError as exc:
        log.warning("ephemeral answer not delivered (%s)", exc.response.get("error"))
