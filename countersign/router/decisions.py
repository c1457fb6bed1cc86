"""What reviewers' clicks and modal submits do: authorise, decide, resume the agent, update the card.

Called by the bot's listeners. Authorisation is against the approvers the policy named at intake
and against the request's state (the store's conditional UPDATE): a refused action changes
nothing, is audited, and is answered ephemerally or inline (DESIGN.md, invariant 4).

Modals follow the robust shape for Slack's 3-second, single-use `trigger_id`
(https://docs.slack.dev/tools/bolt-python/concepts/opening-modals): `views.open` with a loading
view first, before any database work, then `views.update` with the real form. A `view_submission`
must carry its field errors in the ack itself (https://docs.slack.dev/surfaces/modals), so
`check_edit`/`check_reject` read the request (one primary-key read, no write) before the ack; the
decision is written after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from ..store import (
    APPROVED,
    PENDING,
    REJECTED,
    AlreadyDecided,
    ApprovalRequest,
    Counted,
    Decided,
    Refused,
    TimedOut,
)
from . import cards, relay
from .decision import decision_body
from .edits import EditCheck, check
from .runtime import Runtime, current

log = logging.getLogger(__name__)


def _user(body: dict[str, Any]) -> dict[str, str]:
    user = body["user"]
    return {"slack_user_id": user["id"], "name": user.get("username") or user.get("name") or user["id"]}


EDIT_STEPS = {cards.EDIT_ACTION, "edit_submit"}
APPROVING_STEPS = {"approve", *EDIT_STEPS}


def _refusal(
    runtime: Runtime,
    request: ApprovalRequest | None,
    request_id: str,
    user_id: str,
    step: str,
    plain: bool = False,
) -> str | None:
    """Why `user_id` may not take `step` on the request now (audited), or None when they may."""
    detail = _refused(request, user_id, step)
    if detail is None:
        return None
    runtime.store.record(request_id, "refused", user_id, **detail)
    return _refusal_text(request, detail["why"], plain)


def _refused(request: ApprovalRequest | None, user_id: str, step: str) -> dict[str, Any] | None:
    """The audit detail of refusing `step` to `user_id` (`{"why": code, "step": step, ...}`), or
    None when they may take it. Only approvers may act; the human the agent acts for
    (`on_behalf_of`) may not approve or edit their own request unless the policy sets
    `self_approval: true`."""
    if request is None:
        why = "unknown_request"
    elif user_id not in request.approvers:
        why = "not_an_approver"
    elif step in APPROVING_STEPS and user_id not in request.eligible_approvers:
        why = "self_approval"
    elif request.status != PENDING:
        return {"why": "already_decided", "step": step, "status": request.status}
    elif step in EDIT_STEPS and request.required_approvals > 1:
        why = "edit_needs_single_approver"
    else:
        return None
    return {"why": why, "step": step}


def _refusal_text(request: ApprovalRequest | None, why: str, plain: bool = False) -> str:
    """What the refused reviewer is told (`plain`: for a modal's inline error, no mrkdwn)."""
    if request is None:
        return cards.UNKNOWN_REQUEST_TEXT
    texts: dict[str, Callable[[], str]] = {
        "not_an_approver": lambda: cards.not_an_approver_text(request, plain),
        "self_approval": lambda: cards.SELF_APPROVAL_TEXT,
        "already_decided": lambda: cards.already_decided_text(request, plain),
        "edit_needs_single_approver": lambda: cards.NO_EDIT_UNDER_QUORUM_TEXT,
    }
    return texts[why]()


def _settle(
    runtime: Runtime,
    client: WebClient,
    result: Decided | AlreadyDecided | Counted | TimedOut | Refused,
    user_id: str,
) -> str:
    """Act on a store result: publish and rewrite the card (`decided`), show the quorum so far
    (`counted`), or refuse a late or unauthorised action (`refused`: audited, answered ephemerally)."""
    request = result.request
    if isinstance(result, Refused):
        tell(client, request.channel, user_id, _refusal_text(request, result.why))
        return "refused"
    if isinstance(result, TimedOut):
        runtime.store.record(request.id, "refused", user_id, why="timed_out")
        tell(client, request.channel, user_id, cards.timed_out_text(request))
        return "refused"
    if isinstance(result, AlreadyDecided):
        runtime.store.record(request.id, "refused", user_id, why="already_decided", status=request.status)
        tell(client, request.channel, user_id, cards.already_decided_text(request))
        return "refused"
    if isinstance(result, Counted):
        tell(client, request.channel, user_id, cards.counted_text(request, result.approvals, result.repeated))
        update_card(client, request, result.approvals)
        return "counted"
    relay.try_publish(runtime.redis, result.event)
    update_card(client, request)
    return "decided"


def cast(
    runtime: Runtime,
    client: WebClient,
    request_id: str,
    user: dict[str, str],
    vote: str,
    reason: str | None = None,
) -> str:
    """Count a reviewer's approval or rejection (quorum rules in `Store.vote`) and act on it:
    `decided` | `counted` | `refused`, or `unknown_request` (audited; the caller answers the reviewer,
    since only it knows where). Whether the reviewer may vote is checked on the request row as the
    vote locks it (`_refused`), so one transaction both authorises and counts."""
    user_id = user["slack_user_id"]
    step = "approve" if vote == APPROVED else "reject"
    try:
        result = runtime.store.vote(
            request_id,
            user,
            vote,
            decision_body(runtime),
            reason=reason,
            refuse=lambda r: _refused(r, user_id, step),
        )
    except LookupError:
        runtime.store.record(request_id, "refused", user_id, why="unknown_request", step=step)
        return "unknown_request"
    return _settle(runtime, client, result, user_id)


def approve_from_click(runtime: Runtime, client: WebClient, body: dict[str, Any]) -> str:
    """The Approve button (`block_actions`, `actions[0].value` = the request id): `decided` |
    `counted` | `refused`."""
    request_id, user = _request_id(body["actions"][0]), _user(body)
    outcome = cast(runtime, client, request_id, user, APPROVED)
    if outcome != "unknown_request":
        return outcome
    tell(client, _channel(body), user["slack_user_id"], cards.UNKNOWN_REQUEST_TEXT)
    return "refused"


def _channel(body: dict[str, Any]) -> str | None:
    return (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")


MODALS: dict[str, tuple[str, Callable[[ApprovalRequest], dict[str, Any]]]] = {
    cards.EDIT_ACTION: ("Edit and approve", cards.edit_view),
    cards.REJECT_ACTION: ("Reject request", cards.reject_view),
    cards.DETAILS_ACTION: ("Request details", cards.details_view),
}


def open_modal(runtime: Runtime, client: WebClient, body: dict[str, Any]) -> None:
    """Edit / Reject / Details buttons: open a loading modal at once, then fill it (or explain why not)."""
    action = body["actions"][0]
    title, render = MODALS[action["action_id"]]
    view_id = client.views_open(trigger_id=body["trigger_id"], view=cards.loading_view(title))["view"]["id"]
    request = runtime.store.get(_request_id(action))
    refusal = None
    if action["action_id"] != cards.DETAILS_ACTION or request is None:  # anyone may read the details
        refusal = _refusal(runtime, request, _request_id(action), body["user"]["id"], action["action_id"])
    if refusal is not None or request is None:
        view = cards.notice_view(title, refusal or cards.UNKNOWN_REQUEST_TEXT)
    else:
        view = render(request)
    client.views_update(view_id=view_id, view=view)


@dataclass
class Submission:
    """A checked `view_submission`: `ack` holds the arguments for Bolt's `ack()` (errors, if any);
    `request` and `edit` are set when the submission may proceed to a decision."""

    ack: dict[str, Any] = field(default_factory=dict)
    request: ApprovalRequest | None = None
    edit: EditCheck | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """True when the modal closes and the decision should be written."""
        return not self.ack and self.request is not None


def _request_id(action: dict[str, Any]) -> str:
    """The request id a button carries (`value`); anything malformed becomes "" (an unknown id)."""
    value = action.get("value")
    return value if isinstance(value, str) and len(value) <= 64 else ""


def _values(body: dict[str, Any]) -> dict[str, str | None]:
    """`{block_id: typed text}` from a view submission's `state.values`, ignoring malformed entries."""
    state = body["view"].get("state")
    blocks = state.get("values") if isinstance(state, dict) else None
    values: dict[str, str | None] = {}
    for block, elements in (blocks or {}).items() if isinstance(blocks, dict) else ():
        element = elements.get("value") if isinstance(elements, dict) else None
        typed = element.get("value") if isinstance(element, dict) else None
        values[block] = typed if isinstance(typed, str) else None
    return values


def _errors(errors: dict[str, str]) -> dict[str, Any]:
    return {"response_action": "errors", "errors": errors}


def _check_submitter(runtime: Runtime, body: dict[str, Any], error_block: str, step: str) -> Submission:
    """Refuse (inline, on `error_block`) a submit by a non-approver or on a decided request."""
    request_id = str(body["view"].get("private_metadata") or "")[:64]
    request = runtime.store.get(request_id)
    refusal = _refusal(runtime, request, request_id, body["user"]["id"], step, plain=True)
    if refusal is not None:
        return Submission(ack=_errors({error_block: refusal}))
    return Submission(request=request)


def check_edit(runtime: Runtime, body: dict[str, Any]) -> Submission:
    """Validate the Edit modal's submission: who submits, the request's state, each field."""
    first_input = next(iter(_values(body)), "edit")
    submission = _check_submitter(runtime, body, first_input, "edit_submit")
    if submission.request is None:
        return submission
    submission.edit = check(submission.request, _values(body))
    if submission.edit.errors:
        submission.ack = _errors(submission.edit.errors)
    return submission


def check_reject(runtime: Runtime, body: dict[str, Any]) -> Submission:
    """Validate the Reject modal's submission: who submits, the request's state, the reason."""
    submission = _check_submitter(runtime, body, cards.REASON_BLOCK, "reject_submit")
    if submission.request is None:
        return submission
    submission.reason = (_values(body).get(cards.REASON_BLOCK) or "").strip() or None
    if submission.request.rules.get("reject_reason") == "required" and submission.reason is None:
        submission.ack = _errors({cards.REASON_BLOCK: "A reason is required to reject this action class."})
    return submission


def approve_edited(runtime: Runtime, client: WebClient, body: dict[str, Any], submission: Submission) -> str:
    """After the ack of a valid Edit submit: approve with the edited payload and its diff."""
    assert submission.request is not None and submission.edit is not None
    user = _user(body)
    result = runtime.store.decide(
        submission.request.id,
        APPROVED,
        [user],
        via="slack",
        body=decision_body(runtime),
        approved_payload=submission.edit.payload,
        edits=submission.edit.edits,
        grant_ttl=submission.request.rules.get("grant_ttl", 900),
    )
    return _settle(runtime, client, result, user["slack_user_id"])


def reject_with_reason(
    runtime: Runtime, client: WebClient, body: dict[str, Any], submission: Submission
) -> str:
    """After the ack of a valid Reject submit: reject, carrying the reviewer's reason."""
    assert submission.request is not None
    return cast(runtime, client, submission.request.id, _user(body), REJECTED, reason=submission.reason)


def update_card(
    client: WebClient, request: ApprovalRequest, approvals: list[dict[str, str]] | None = None
) -> None:
    """Rewrite a request's card: the decided card (no buttons), or the pending card with the
    approvals counted so far. Both text and blocks are sent; a Slack error is logged."""
    if request.card_ts is None:
        return
    card = (
        cards.request_card(request, approvals or [])
        if request.status == PENDING
        else cards.decided_card(request)
    )
    try:
        client.chat_update(channel=request.channel, ts=request.card_ts, **card.message())
    except SlackApiError as exc:
        error = exc.response.get("error")
        log.warning("request %s: card not updated (%s)", request.id, error)
        if error in ("message_not_found", "cant_update_message") and request.status != PENDING:
            _post_status(client, request, card)


def _post_status(client: WebClient, request: ApprovalRequest, card: cards.Card) -> None:
    """The card is gone or not ours to edit: say how the request ended in a fresh message instead."""
    try:
        client.chat_postMessage(channel=request.channel, **card.message())
    except SlackApiError as exc:
        log.warning(
            "request %s: status message not posted either (%s)", request.id, exc.response.get("error")
        )


def refresh_card(request_id: str) -> None:
    """RQ job (router worker): rewrite a decided request's card, e.g. after the agent reported."""
    runtime = current()
    request = runtime.store.get(request_id)
    if request is not None and request.status != PENDING:
        update_card(runtime.slack, request)


def tell(client: WebClient, channel: str | None, user_id: str, text: str) -> None:
    """Post an ephemeral message to `user_id` in `channel`; a Slack error is logged, not raised."""
    try:
        client.chat_postEphemeral(channel=channel, user=user_id, text=text)
    except SlackApiError as exc:
        log.warning("ephemeral answer not delivered (%s)", exc.response.get("error"))
