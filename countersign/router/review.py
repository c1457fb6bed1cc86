"""Review: what a reviewer's approval, rejection or edit does — authorise, vote, settle.

Called by the bot's listeners with the values they read from Slack's payload. Authorisation is
against the approvers the policy named at intake and against the request's state: a refused action
changes nothing, is audited, and is answered ephemerally or inline (DESIGN.md, invariant 4). Every
decision is authorised on the request row it locks (`Store.vote(refuse=...)`, `Store.decide(refuse=...)`),
so one transaction both authorises and decides. A modal submit must carry its field errors in the ack itself
(https://docs.slack.dev/surfaces/modals), so `check_edit` / `check_reject` read the request (one
primary-key read, no write) before the ack; the decision is written after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.exceptions import RedisError
from slack_sdk import WebClient

from ..exceptions import UnknownRequest
from ..store import (
    AlreadyDecided,
    Counted,
    Decided,
    Decider,
    Outcome,
    Refused,
    Request,
    Status,
    Store,
    TimedOut,
    Via,
)
from ..store.stats import DETAILS_OPENED
from . import cards, delivery, details, relay, texts
from .edits import EditCheck, check
from .runtime import Runtime

Step = Literal["approve", "reject", "edit", "details"]
"""What a reviewer tried, as a `refused` audit event's `step` names it: the same word for the button,
its modal and the modal's submit, wherever they acted (card or Home)."""
APPROVING_STEPS: frozenset[Step] = frozenset({"approve", "edit"})

Settled = Literal["decided", "counted", "refused"]

log = logging.getLogger(__name__)


def why_refused(request: Request | None, user_id: str, step: Step) -> dict[str, Any] | None:
    """The audit detail of refusing `step` to `user_id` (`{"why": code, "step": step, ...}`), or
    None when they may take it. Only approvers may act; the human the agent acts for
    (`on_behalf_of`) may not approve or edit their own request unless the policy sets
    `self_approval: true`; a decided request takes no action; a quorum request takes no edit. One
    who is not an approver now but was at an earlier escalation level is refused as `earlier_level`,
    the others as `not_an_approver`."""
    if request is None:
        why = "unknown_request"
    elif user_id not in request.approvers:
        why = "earlier_level" if was_approver(request, user_id) else "not_an_approver"
    elif step in APPROVING_STEPS and user_id not in request.eligible_approvers:
        why = "self_approval"
    elif request.status != Status.PENDING:
        return {"why": "already_decided", "step": step, "status": request.status}
    elif step == "edit" and request.required_approvals > 1:
        why = "edit_needs_single_approver"
    else:
        return None
    return {"why": why, "step": step}


def was_approver(request: Request, user_id: str) -> bool:
    """True when `user_id` was an approver of an escalation level before the request's current one,
    named by its `users` or a member of its `usergroups` alike: among the approvers stored as each
    level was left (`earlier_approvers`, user groups resolved when the level began; this runs on the
    row a decision locks, so Slack is not asked). A request escalated before migration 0017 stored
    none: for it, the users its stored rules name (`rules.levels`) count."""
    if user_id in request.earlier_approvers:
        return True
    return any(user_id in request.rules.level(number).users for number in range(request.level))


def queue(store: Store, user_id: str, limit: int = 50) -> list[Request]:
    """The requests `user_id` may decide now, oldest deadline first, at most `limit`: an approver of
    the current level, not timed out, without their vote at this level (`Store.queue_for`), and
    allowed to approve by `why_refused` (self-approval, the request's state): the same rule a click
    is authorised by. The one definition of "pending for a reviewer": App Home, `/countersign
    pending` and `countersign pending --approver` all list it."""
    rows = store.queue_for(user_id, limit)
    return [row for row in rows if why_refused(row, user_id, "approve") is None]


def refusal_text(request: Request | None, why: str, user_id: str, plain: bool = False) -> str:
    """What the refused reviewer `user_id` is told (`plain`: for a modal's inline error, no mrkdwn),
    the same words whichever surface they acted on."""
    if request is None:
        return texts.UNKNOWN_REQUEST
    answers: dict[str, Callable[[], str]] = {
        "not_an_approver": lambda: texts.not_an_approver_text(request),
        "earlier_level": lambda: texts.escalated_away_text(request, plain),
        "self_approval": lambda: texts.SELF_APPROVAL,
        "already_decided": lambda: texts.already_decided_text(request, plain, user_id),
        "edit_needs_single_approver": lambda: texts.NO_EDIT_UNDER_QUORUM,
    }
    return answers[why]()


def refuse(
    runtime: Runtime, request: Request | None, request_id: str, user_id: str, step: Step, plain: bool
) -> str | None:
    """Why `user_id` may not take `step` on the request now (audited `refused`), as the text to
    show them, or None when they may."""
    detail = why_refused(request, user_id, step)
    if detail is None:
        return None
    runtime.store.record(request_id, "refused", user_id, **detail)
    return refusal_text(request, detail["why"], user_id, plain)


def settle(
    runtime: Runtime,
    client: WebClient,
    result: Decided | AlreadyDecided | Counted | TimedOut | Refused,
    user_id: str,
    where: str = "card",
    channel: str | None = None,
) -> Settled:
    """Act on a store result: publish the resume event and rewrite the card (`decided`), show the
    quorum so far (`counted`), or refuse a late or unauthorised action (`refused`: audited). The
    reviewer is answered where they acted (`answer_in`; `channel`: the one they clicked in, if
    known)."""
    request = result.request
    answer_in = _answer_in(request, where, channel, result.why if isinstance(result, Refused) else None)
    if isinstance(result, Refused):
        delivery.tell(client, answer_in, user_id, refusal_text(request, result.why, user_id))
        return "refused"
    if isinstance(result, TimedOut):
        runtime.store.record(request.id, "refused", user_id, why="timed_out")
        delivery.tell(client, answer_in, user_id, texts.timed_out_text(request))
        return "refused"
    if isinstance(result, AlreadyDecided):
        runtime.store.record(request.id, "refused", user_id, why="already_decided", status=request.status)
        delivery.tell(client, answer_in, user_id, refusal_text(request, "already_decided", user_id))
        return "refused"
    if isinstance(result, Counted):
        answer = texts.counted_text(request, result.approvals, result.repeated)
        delivery.tell(client, answer_in, user_id, answer)
        after_commit(request, lambda: delivery.update_card(runtime, client, request, result.approvals))
        return "counted"
    if not after_commit(request, lambda: relay.try_publish(runtime.redis, result.event)):
        delivery.tell(client, answer_in, user_id, texts.recorded_resume_later(request))
    after_commit(request, lambda: delivery.update_card(runtime, client, request))
    return "decided"


def _answer_in(request: Request, where: str, channel: str | None, why: str | None) -> str | None:
    """Where a reviewer is answered, ephemerally, or None for their DM with the app: for a click on
    a card, the channel they clicked in (`channel`), or without one (a modal's submit) the card's,
    the request's channel. The DM for an action on the Home tab (`where` `home`), which cannot show
    an ephemeral message, and for an earlier level's approver (`why` `earlier_level`) whose channel
    is not known: the request's channel is now the next level's, where they may not be, and an
    ephemeral message cannot reach a reviewer outside its channel
    (https://docs.slack.dev/reference/methods/chat.postEphemeral: `user_not_in_channel`)."""
    if where != "card":
        return None
    if channel is not None:
        return channel
    return None if why == "earlier_level" else request.channel


def after_commit(request: Request, effect: Callable[[], object]) -> bool:
    """Run one `effect` of a vote or decision the database has committed (the resume job and bell:
    `relay.try_publish`; the card rewrite with the Home tabs marked due: `delivery.update_card`), on
    its own, so one failing (Redis gone, Slack erring) stops none of the others. The action is
    recorded whatever they do, so a failure is logged, never raised: an exception reaching the
    listener would tell the reviewer nothing changed. What they did not do is done later from the
    database: the relay sweep publishes the outbox (the resume job and the bell), and a decided card
    Slack did not rewrite is rewritten by the card sweep, or when the agent's run is recorded.
    Returns False when the effect raised or returned False (`relay.try_publish`: Redis refused)."""
    try:
        return effect() is not False
    except Exception as exc:
        unexpected = not isinstance(exc, RedisError)  # a bug: its traceback
        log.warning("request %s: after the commit, %r", request.id, exc, exc_info=unexpected)
        return False


def cast(
    runtime: Runtime,
    client: WebClient,
    request_id: str,
    user: Decider,
    vote: Literal[Outcome.APPROVED, Outcome.REJECTED],
    reason: str | None = None,
    where: str = "card",
    shown: cards.Shown | None = None,
    channel: str | None = None,
) -> Settled | Literal["unknown_request"]:
    """Count a reviewer's approval or rejection (quorum rules in `Store.vote`; `where` they clicked
    and what they were `shown`, audited) and act on it: `decided` | `counted` | `refused`, or
    `unknown_request` (audited; the caller answers the reviewer, since only it knows where).
    `channel`: the one they clicked in, where they are answered (`settle`)."""
    user_id = user["slack_user_id"]
    step: Step = "approve" if vote == Outcome.APPROVED else "reject"
    try:
        result = runtime.store.vote(
            request_id,
            user,
            vote,
            runtime.resume_event,
            reason=reason,
            refuse=lambda row: why_refused(row, user_id, step),
            where=where,
            shown=shown,
        )
    except UnknownRequest:
        runtime.store.record(request_id, "refused", user_id, why="unknown_request", step=step)
        return "unknown_request"
    return settle(runtime, client, result, user_id, where, channel)


def approve(
    runtime: Runtime,
    client: WebClient,
    request_id: str,
    user: Decider,
    channel: str | None,
    where: str = "card",
    shown: cards.Shown | None = None,
) -> Settled:
    """The Approve button (on a card, or the Home tab: `where`; what the clicker was `shown`): vote
    to approve; the clicker is answered in `channel`, where the click came from (`settle`), a click on
    a request countersign does not know too."""
    outcome = cast(
        runtime, client, request_id, user, Outcome.APPROVED, where=where, shown=shown, channel=channel
    )
    if outcome != "unknown_request":
        return outcome
    delivery.tell(client, channel, user["slack_user_id"], texts.UNKNOWN_REQUEST)
    return "refused"


MODALS: dict[str, tuple[str, Callable[[Request], dict[str, Any]], Step]] = {
    cards.EDIT_ACTION: ("Edit and approve", cards.edit_view, "edit"),
    cards.REJECT_ACTION: ("Reject request", cards.reject_view, "reject"),
    cards.DETAILS_ACTION: ("Request details", details.details_view, "details"),
}
"""The modal each button (by `action_id`) opens: its title, its view and the step it is."""


def modal_view(runtime: Runtime, request_id: str, user_id: str, action_id: str) -> dict[str, Any]:
    """The view the Edit / Reject / Details button opens for `user_id`: the form, or a notice of why
    they may not (audited). Anyone may read the details of a request countersign knows, pending or
    decided (a decided card keeps its Details button)."""
    title, render, step = MODALS[action_id]
    request = runtime.store.get(request_id)
    refusal = None
    if step != "details" or request is None:
        refusal = refuse(runtime, request, request_id, user_id, step, plain=False)
    if refusal is not None or request is None:
        return cards.notice_view(title, refusal or texts.UNKNOWN_REQUEST)
    if step == "details" and request.status == Status.PENDING:
        runtime.store.record(request_id, DETAILS_OPENED, user_id)  # `countersign stats`: not a rubber stamp
    return render(request)


@dataclass
class Submission:
    """A checked modal submit: `errors` (`{block_id: message}`) to show inline, or the `request`
    (with the checked `edit`, or the rejection's `reason`) to decide once the modal has closed."""

    errors: dict[str, str] = field(default_factory=dict)
    request: Request | None = None
    edit: EditCheck | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """True when the modal closes and the decision should be written."""
        return not self.errors and self.request is not None


def _check_submitter(
    runtime: Runtime, request_id: str, user_id: str, error_block: str, step: Step, plain: bool = True
) -> Submission:
    """Refuse (on `error_block`; `plain` for a modal's inline error) a submit by a non-approver or
    on a decided request."""
    request = runtime.store.get(request_id)
    refusal = refuse(runtime, request, request_id, user_id, step, plain=plain)
    if refusal is not None:
        return Submission(errors={error_block: refusal})
    return Submission(request=request)


def check_edit(
    runtime: Runtime, request_id: str, user_id: str, values: dict[str, str | None], plain: bool = True
) -> Submission:
    """Validate the Edit modal's submit (`values`: `{block_id: typed text}`): who submits, the
    request's state, each field and the policy's edit rule. A refusal is worded for a modal's
    inline error (plain text), or with `plain` False for a message (mentions)."""
    first_input = next(iter(values), "edit")
    submission = _check_submitter(runtime, request_id, user_id, first_input, "edit", plain)
    if submission.request is None:
        return submission
    submission.edit = check(submission.request, values)
    submission.errors = submission.edit.errors
    return submission


def check_reject(
    runtime: Runtime, request_id: str, user_id: str, values: dict[str, str | None]
) -> Submission:
    """Validate the Reject modal's submit: who submits, the request's state, the reason."""
    submission = _check_submitter(runtime, request_id, user_id, cards.REASON_BLOCK, "reject")
    if submission.request is None:
        return submission
    submission.reason = (values.get(cards.REASON_BLOCK) or "").strip() or None
    if submission.request.rules.reject_reason == "required" and submission.reason is None:
        submission.errors = {cards.REASON_BLOCK: texts.REJECT_REASON_REQUIRED}
    return submission


def approve_edited(
    runtime: Runtime,
    client: WebClient,
    user: Decider,
    submission: Submission,
    where: str = "card",
    shown: cards.Shown | None = None,
) -> Settled:
    """After the ack of a valid Edit submit: approve with the edited payload and its diff, when the
    submitter may still edit the request as the decision finds it. That is checked on the row the
    decision locks, not on the read `check_edit` made: an escalation in between refuses an earlier
    level's approver (audited, answered ephemerally)."""
    assert submission.request is not None and submission.edit is not None
    user_id = user["slack_user_id"]
    result = runtime.store.decide(
        submission.request.id,
        Outcome.APPROVED,
        [user],
        via=Via.SLACK,
        resume=runtime.resume_event,
        approved_payload=submission.edit.payload,
        edits=submission.edit.edits,
        grant_ttl=submission.request.rules.grant_ttl_seconds,
        refuse=lambda row: why_refused(row, user_id, "edit"),
        where=where,
        shown=shown,
    )
    return settle(runtime, client, result, user_id, where)


@dataclass(frozen=True)
class Action:
    """A reviewer's decision as Slack delivered it, in a form that can be journaled and replayed
    (`router.journal`): `approve` (the button; `channel` is where it was clicked), `reject` (the
    Reject modal's checked `reason`) or `edit` (the Edit modal's `values`, `{block_id: text}`);
    `where` the surface: `card`, or `home` (the App Home tab), and `shown`, what Slack says the
    reviewer was shown (`bot.payload.shown`: the card, or the request's entry on the Home tab, kept
    through the Reject / Edit modal), audited with the decision."""

    kind: Literal["approve", "reject", "edit"]
    request_id: str
    user: Decider
    channel: str | None = None
    reason: str | None = None
    values: dict[str, str | None] = field(default_factory=dict)
    where: str = "card"
    shown: cards.Shown | None = None


def act(runtime: Runtime, client: WebClient, action: Action) -> Settled | Literal["unknown_request"]:
    """Do what the reviewer asked: vote to approve or reject, or approve with the edit (checked again
    on the request as it is now; an edit no longer allowed is answered with why)."""
    if action.kind == "approve":
        return approve(
            runtime, client, action.request_id, action.user, action.channel, action.where, action.shown
        )
    if action.kind == "reject":
        request_id, user, where = action.request_id, action.user, action.where
        return cast(runtime, client, request_id, user, Outcome.REJECTED, action.reason, where, action.shown)
    user_id = action.user["slack_user_id"]
    submission = check_edit(runtime, action.request_id, user_id, action.values, plain=False)  # a message
    if not submission.ok:
        delivery.tell(client, action.channel, user_id, next(iter(submission.errors.values()), ""))
        return "refused"
    return approve_edited(runtime, client, action.user, submission, action.where, action.shown)


def already_recorded(runtime: Runtime, action: Action) -> bool:
    """True when the store already has this reviewer's vote or decision on the request (so a replay
    of the action must not count it, or refuse it, a second time)."""
    request = runtime.store.get(action.request_id)
    if request is None:
        return False
    user_id = action.user["slack_user_id"]
    if any(decider["slack_user_id"] == user_id for decider in request.decided_by or []):
        return True
    return any(vote.slack_user_id == user_id for vote in runtime.store.votes(action.request_id))
