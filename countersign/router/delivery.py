"""Every call that writes to Slack: cards (posted once, paced per channel), card rewrites, ephemeral
answers, reminders and status messages, and what to do when Slack says no.

- **One card.** Posting is claimed with a lease in the store; each card carries message metadata
  with the request id and level (https://docs.slack.dev/messaging/message-metadata), because
  `chat.postMessage` has no idempotency key. A retry after a crash between posting and storing the
  `ts` first looks the card up in `conversations.history` and adopts it.
- **DMs.** A card for a person (a policy's `channel: U…`, or the fallback below) is posted with
  their user id, and Slack answers with the id of the bot's DM with them (`D…`). That id, not the
  user id, is what chat.update, conversations.history and chat.postEphemeral take (they answer
  `channel_not_found` to a user id: Slack's maintainers in
  https://github.com/slackapi/bolt-python/issues/951 and
  https://github.com/slackapi/python-slack-sdk/issues/528; chat.postEphemeral's `channel` is a
  channel, private group or IM channel, https://docs.slack.dev/reference/methods/chat.postEphemeral),
  so the card is stored with the channel Slack answered (`Store.attach_card`), and a user id still
  stored (before the card is posted, or by an earlier version) is turned into the DM's id with
  `conversations.open` first (`conversation`).
- **Pace.** Slack allows about one message per second per channel
  (https://docs.slack.dev/apis/web-api/rate-limits, chat.postMessage). Each card reserves a time in its
  channel in Redis, once, `PACE_MILLISECONDS` after the channel's previous one (`pace.reserve_slot`, or
  intake's one script): a card whose time has come posts; the others wait for theirs (`RetryLater` until
  then, and a posting lease until then so the card sweep leaves them alone), keeping their reservation
  when they run again, unless it lapsed (`pace.LAPSED_MILLISECONDS` past, e.g. the router was down):
  then they reserve the channel's next free time, so a restart does not post them all at once. So a
  backlog of cards for one channel drains at the pace, each job runs about twice, and no job is
  rescheduled every second (a thundering herd that would delay the other channels' cards). A `429` is
  honoured the same way, for its `Retry-After` seconds, and the card gives up its time. No worker ever
  sleeps. A card that waits a second or more moves its level's deadline to its time plus the timeout
  (`Store.schedule_card`), so no reviewer's time runs out while the card waits; one that waits over
  `BACKLOG_LOG_SECONDS` is logged with the channel's backlog, and `countersign show` reads its time
  (`pace.expected_card`).
- **Refusals.** `invalid_blocks` / `msg_blocks_too_long` fall back once to a compact card;
  `not_in_channel` / `channel_not_found` / `is_archived` fall back once to the approvers' DM, or
  group DM for several, opened with `conversations.open`. What is still refused is audited as
  `delivery_failed` and tried again with a growing delay (the posting lease is pushed out), as is a
  `429` for its `Retry-After`; a post Slack did not answer (a network error, a timeout) too, sooner
  (after 5 s, 10 s, ...; the next try first looks for a card the post may have made).
- **Rewrites** send both `text` and `blocks` (text alone drops the blocks:
  https://docs.slack.dev/messaging/modifying-messages). A decided card Slack will not rewrite now
  (429, 5xx, a timeout) is retried by the card sweep until it tells the truth; one that is gone or
  no longer ours to edit is replaced by one status message, which later rewrites edit. A reminder
  Slack is busy for stays due; ephemeral answers are best effort (a Slack error is logged).
"""

from __future__ import annotations

import logging
from typing import Any, Literal, NamedTuple

from redis.exceptions import RedisError
from rq import Retry
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from ..exceptions import RetryLater
from ..store import CardFacts, Decider, Request, ResumeProblem, Status
from . import cards, homedue, jobs, texts
from .pace import CLOCK_SLACK_SECONDS, Slot, give_up_slot, reserve_slot
from .runtime import Runtime, current

log = logging.getLogger(__name__)

CARD_EVENT = "countersign_request"
BACKLOG_LOG_SECONDS = 60  # a card that must wait longer than this for its channel is logged
RATE_LIMITED = {"ratelimited", "message_limit_exceeded", "rate_limited"}
BACKOFF_SECONDS = 30  # a refused card is tried again after 30 s, 60 s, ... at most every 10 minutes
MAX_BACKOFF_SECONDS = 600
NO_ANSWER_BACKOFF_SECONDS = 5  # a post Slack did not answer: again after 5 s, 10 s, ... at most each minute
MAX_NO_ANSWER_BACKOFF_SECONDS = 60
REFRESH_BACKOFF_SECONDS = 30  # a decided card Slack would not rewrite is tried again this often
UPDATE = "chat.update"  # held off after a 429 until its Retry-After (`pace.HeldOff`)
VANISHED = {"message_not_found", "cant_update_message"}
BAD_BLOCKS = {"invalid_blocks", "invalid_blocks_format", "msg_blocks_too_long"}
NO_CHANNEL = {"not_in_channel", "channel_not_found", "is_archived"}
NO_ANSWER = (SlackClientError, OSError)  # Slack did not answer (a network error, a timeout) or refused


Posted = Literal["posted", "found", "duplicate"]


class Message(NamedTuple):
    """Where a message is in Slack: the id of its conversation and its `ts`; what it `shown`
    (`cards.shown_in`: of a card we posted, as Slack answered, `_stored`; of one found in Slack, as
    `conversations.history` returns it, None when that has no blocks)."""

    channel: str
    ts: str
    shown: cards.Shown | None = None


def post_card(runtime: Runtime, row: Request, leased: bool = False, reserved: Slot | None = None) -> Posted:
    """Post the card of a pending request that has none yet, once: `posted` | `found` | `duplicate`.

    `leased`: `row` was just created with its posting lease (`Store.create(..., card_lease=True)`),
    so it is posted without claiming the lease again; a card that must wait for its channel's time
    then hands the lease on to that time (`Store.schedule_card`), so the job's next run claims it.
    `reserved`: the card's time in its channel, reserved by intake with its approvers' Home tabs
    marked due (`intake._admit`); else it is reserved here, and they are marked once it is posted.
    Raises `RetryLater` when the channel is busy or Slack rate-limits, and `SlackApiError` or a
    network error for the rest.
    """
    if row.card_ts is not None or row.status != Status.PENDING:
        return "duplicate"
    slot = reserved if reserved is not None else reserve_slot(runtime.redis, row)
    if slot.wait > CLOCK_SLACK_SECONDS:
        if slot.wait > BACKLOG_LOG_SECONDS:
            log.warning(
                "request %s: card scheduled in %.0f s in %s, %d cards ahead (%d waiting in that channel); "
                "its timeout counts from the card",
                row.id,
                slot.wait,
                row.channel,
                slot.ahead,
                slot.backlog,
            )
        if slot.wait >= 1 or leased:  # keep the card sweep away until its time, and the deadline after it
            runtime.store.schedule_card(row, int(slot.wait), unclaimed=leased)
        raise RetryLater(slot.wait)  # read now: the job runs again at its time, not after it
    claimed = row if leased else runtime.store.claim_card(row.id)
    if claimed is None:
        return "duplicate"
    try:
        card = _find_card(runtime, claimed) if claimed.card_attempts > 1 else None
        outcome: Posted = "found" if card is not None else "posted"
        if card is None:
            card = _post(runtime, claimed)
    except RetryLater as later:
        # Slack asks to wait after all: give up this card's time, take a new one later
        give_up_slot(runtime.redis, row)
        runtime.store.defer_card(row.id, int(later.seconds))
        raise
    except SlackApiError as exc:  # refused for good this time: back off, and say so in the audit trail
        _back_off(runtime, claimed, str(exc.response.get("error")), BACKOFF_SECONDS, MAX_BACKOFF_SECONDS)
        raise
    except NO_ANSWER as exc:  # no answer (network, timeout): Slack may be back soon
        why = texts.clip(" ".join(f"{type(exc).__name__}: {exc}".split()), 200)
        _back_off(runtime, claimed, why, NO_ANSWER_BACKOFF_SECONDS, MAX_NO_ANSWER_BACKOFF_SECONDS)
        raise
    attached = runtime.store.attach_card(claimed, card.channel, card.ts, card.shown)
    if reserved is None:
        _mark_home_due(runtime, claimed)  # their Home lists it
    log.info("request %s: card %s at %s in %s", row.id, outcome, card.ts, card.channel)
    if attached is not None and attached.status != Status.PENDING:  # decided while it was posted
        refresh(runtime, attached.id)
    return outcome


def _back_off(runtime: Runtime, claimed: Request, why: str, unit: int, most: int) -> None:
    """Keep everyone from posting `claimed`'s card for `unit` seconds per attempt so far (at most
    `most`), the card sweep posting or finding it then, and record `delivery_failed` with `why`. The
    posting lease would otherwise hold it for a minute (`store.deliveries.CARD_LEASE_SECONDS`)."""
    seconds = min(unit * claimed.card_attempts, most)
    runtime.store.defer_card(claimed.id, seconds)
    runtime.store.record(claimed.id, "delivery_failed", None, why=why, retry_in=seconds)


def _post(runtime: Runtime, request: Request, compact: bool = False, rerouted: bool = False) -> Message:
    """Post the request's card; where Slack put it (for a user id, in the bot's DM with them)."""
    card = cards.compact_card(request) if compact else cards.request_card(request)
    metadata = {"event_type": CARD_EVENT, "event_payload": {"request_id": request.id, "level": request.level}}
    try:
        response = runtime.slack.chat_postMessage(
            channel=request.channel, metadata=metadata, **card.message()
        )
        return Message(str(response["channel"]), str(response["ts"]), _stored(response, card.message()))
    except SlackApiError as exc:
        error = exc.response.get("error")
        if rate_limited(exc):
            raise RetryLater(retry_after(exc)) from None
        if error in BAD_BLOCKS and not compact:
            log.warning("request %s: Slack refused the card (%s); posting a compact one", request.id, error)
            return _post(runtime, request, compact=True, rerouted=rerouted)
        if error in NO_CHANNEL and not rerouted:
            return _post(runtime, _reroute(runtime, request, error), compact, rerouted=True)
        raise


def rate_limited(exc: SlackApiError) -> bool:
    """Slack answered 429, or an error that means the same (`ratelimited`, ...)."""
    return exc.response.status_code == 429 or exc.response.get("error") in RATE_LIMITED


def transient(exc: SlackApiError) -> bool:
    """Slack is busy or failing (rate-limited, or 5xx): try the same call again later."""
    return rate_limited(exc) or exc.response.status_code >= 500


def retry_after(exc: SlackApiError) -> int:
    """The seconds Slack's `Retry-After` header asks to wait (at least 1; 1 when it sent none)."""
    try:
        return max(
            1, int(exc.response.headers.get("Retry-After", exc.response.headers.get("retry-after", 1)))
        )
    except (TypeError, ValueError):
        return 1


def _reroute(runtime: Runtime, request: Request, error: str) -> Request:
    """Send the card to the approvers directly instead (once); audited as `delivery_failed`.

    Raises the original `SlackApiError` when there is nobody to send it to: a DM already, or no
    approver but the human the agent acts for.
    """
    users = request.eligible_approvers[:8]
    if request.channel.startswith((*texts.USER_ID_PREFIXES, "D")) or not users:
        raise SlackApiError(f"cannot deliver to {request.channel} ({error})", {"ok": False, "error": error})
    try:
        direct = str(runtime.slack.conversations_open(users=",".join(users))["channel"]["id"])
    except SlackApiError as exc:
        if rate_limited(exc):  # the DM is the way to deliver: wait as Slack asks, like posting
            raise RetryLater(retry_after(exc)) from None
        raise
    log.error(
        "request %s: cannot post to %s (%s); sending it to the approvers in %s",
        request.id,
        request.channel,
        error,
        direct,
    )
    rerouted = runtime.store.reroute(
        request.id, direct, request.level, why=error, from_channel=request.channel
    )
    return rerouted or request


def conversation(client: WebClient, channel: str) -> str:
    """The id of the conversation a card for `channel` is in: `channel` itself, or for a user id
    the bot's DM with them, which `conversations.open` returns (the DM chat.postMessage posts in)."""
    if not channel.startswith(texts.USER_ID_PREFIXES):
        return channel
    return str(client.conversations_open(users=channel)["channel"]["id"])


def _find_card(runtime: Runtime, row: Request) -> Message | None:
    """This request's card at its level if an earlier attempt posted it, else None. A card for a
    user id is looked for in their DM with the bot (`conversation`)."""
    oldest = row.level_started_at.timestamp() - 60 if row.level_started_at else 0
    try:
        channel = conversation(runtime.slack, row.channel)
        messages = runtime.slack.conversations_history(
            channel=channel, oldest=f"{oldest:.6f}", limit=200, include_all_metadata=True
        )["messages"]
    except SlackApiError as exc:
        if transient(exc):
            raise RetryLater(retry_after(exc)) from None  # look again later; never post blind on a blip
        # Cannot read this conversation at all (not a member, a missing scope): posting
        # again is the only way the card is seen; at worst it shows twice, and either copy works.
        log.warning(
            "request %s: cannot look for an earlier card (%s); posting", row.id, exc.response.get("error")
        )
        return None
    for message in messages:
        metadata = message.get("metadata") or {}
        if metadata.get("event_type") == CARD_EVENT and metadata.get("event_payload") == {
            "request_id": row.id,
            "level": row.level,
        }:
            return Message(channel, str(message["ts"]), cards.shown_in(message))
    return None


def _stored(response: Any, sent: dict[str, Any]) -> cards.Shown:
    """What a card posted or rewritten shows (`cards.shown_in`), as Slack answered it: the `message`
    chat.postMessage and chat.update return (https://docs.slack.dev/reference/methods/chat.postMessage,
    https://docs.slack.dev/reference/methods/chat.update) is the message as Slack keeps it, which is
    what a later click on it carries; else the `sent` `{"text", "blocks"}`."""
    return cards.shown_in(response.get("message")) or cards.shown(sent["text"], sent["blocks"])


def update_card(
    runtime: Runtime,
    client: WebClient,
    request: Request,
    approvals: list[Decider] | None = None,
    refused: str | None = None,
    problem: ResumeProblem | None = None,
    home_due: bool = True,
) -> None:
    """Rewrite a request's card: the decided card (no buttons; `refused`: why the agent's worker
    refused to run it, if it did; `problem`: why the agent has not run it, if so), or the pending
    card with the approvals counted so far.

    A decided card is the one that must not lie, so when Slack will not rewrite it now (429, for its
    `Retry-After`; 5xx; a timeout or a network error) the card sweep tries again
    (`Store.refresh_card_later`, every `REFRESH_BACKOFF_SECONDS` at most) until it succeeds; so
    does one decided while chat.update is held off after a 429 (`Runtime.held_off`), without a call
    that Slack would only answer with another 429 (the sweep's own rewrites, when due, call it); a
    decided card that is gone or no longer ours to edit is replaced by one status message, which
    later rewrites edit. A decided request whose card was posted by a process that died before
    storing its `ts` has the card looked up and adopted first (`_adopt`). Any other error is
    logged. The approvers' App Home tabs are marked due first (`_mark_home_due`: Redis gone is
    logged, and the card rewritten all the same) unless `home_due` is False (a rewrite with news
    the Home does not show: `refresh`). Redis or Slack failing raises nothing."""
    if home_due:
        _mark_home_due(runtime, request)
    decided = request.status != Status.PENDING
    if request.card_ts is None and decided and request.card_attempts > 0:
        request = _adopt(runtime, request) or request
    if request.card_ts is None:
        return
    if decided and request.card_refresh_due_at is None and (left := runtime.held_off.seconds_left(UPDATE)):
        log.warning("request %s: card not updated (chat.update held off %d s after a 429)", request.id, left)
        runtime.store.refresh_card_later(request.id, left)  # as after its own 429: the sweep's, when due
        return
    card = (
        cards.decided_card(request, refused, problem)
        if decided
        else cards.request_card(request, approvals or [])
    )
    try:
        response = client.chat_update(
            channel=conversation(client, request.channel), ts=request.card_ts, **card.message()
        )
    except (SlackApiError, OSError) as exc:
        log.warning("request %s: card not updated (%s)", request.id, _error(exc))
        if isinstance(exc, SlackApiError) and rate_limited(exc):
            runtime.held_off.hold(UPDATE, retry_after(exc))
        if decided:
            _not_rewritten(runtime, client, request, card, exc)
        return
    if not decided:
        _audit_version(runtime, request.id, request.card_ts, _stored(response, card.message()), "counted")
    if request.card_refresh_due_at is not None:
        runtime.store.card_refreshed(request.id)


def _mark_home_due(runtime: Runtime, request: Request) -> None:
    """Mark the approvers' App Home tabs due (`homedue.mark_due`). Redis refusing (down, a timeout)
    is logged, not raised: the Slack write that goes with it (a card posted, rewritten) matters
    more, and a Home tab missed now shows the change at its next publish (opened, or a later change)."""
    try:
        homedue.mark_due(runtime.redis, request.approvers)
    except (RedisError, OSError) as exc:
        log.warning("request %s: approvers' Home tabs not marked due (%r)", request.id, exc)


def _audit_version(runtime: Runtime, request_id: str, ts: str, shown: cards.Shown, why: str) -> None:
    """Audit a pending request's card rewritten to show `shown` (`Store.card_rewritten`: only when
    it differs from the version last recorded). The card is rewritten already and the reviewer's
    vote committed, so a failure here is logged, not raised: the trail then lacks that version."""
    try:
        runtime.store.card_rewritten(request_id, ts, shown, why)
    except Exception:
        log.exception("request %s: the rewrite of card %s not audited", request_id, ts)


def _adopt(runtime: Runtime, request: Request) -> Request | None:
    """The decided `request` with its card's `ts` stored, if a posting attempt left a card in Slack
    without storing it; else None. Slack busy: the card sweep looks again later."""
    try:
        card = _find_card(runtime, request)
    except RetryLater as later:
        runtime.store.refresh_card_later(request.id, max(int(later.seconds), 1))
        return None
    if card is None:
        return None
    log.info("request %s: adopting card %s, posted before the request was decided", request.id, card.ts)
    attached = runtime.store.attach_card(request, card.channel, card.ts, card.shown)
    return attached or runtime.store.get(request.id)


def refresh(runtime: Runtime, request_id: str, leave_stored: bool = False) -> CardFacts | None:
    """Rewrite a decided request's card with everything known now: the decision, the edit, and the
    execution's outcome, or why the agent has not run it (`OutboxEvent.problem`) or its worker
    refused to (`Store.card_facts`, one read), and return those facts. A pending request's card is
    left as it is (None).

    `leave_stored` (the refreshes asked for by the agent's worker and the relay,
    `refreshes.refresh_requested`): a card whose rewrite Slack put off (`card_refresh_due_at`: a
    429's `Retry-After`, a 5xx's back-off, an expiry's rewrite) is left to the card sweep
    (`timeouts.sweep`), which rewrites it when due, at Slack's pace for chat.update, from the
    database, so with this news too. The news then costs no chat.update into a rate limit (Slack's
    Tier 3 answers 429 again while its bucket is empty) and no second stored retry. Their news (the
    execution's outcome, a refusal, a problem) is not on the App Home tab, which shows the queue and
    the verdicts (`inbox.home_view`), marked due when the request was decided: they do not mark the
    approvers' Home due again (three Redis commands and a script call a cycle)."""
    facts = runtime.store.card_facts(request_id)
    if facts is None or facts.request.status == Status.PENDING:
        return None
    if not (leave_stored and facts.request.card_refresh_due_at is not None):
        update_card(
            runtime,
            runtime.slack,
            facts.request,
            refused=facts.refused,
            problem=facts.problem,
            home_due=not leave_stored,
        )
    return facts


def _error(exc: Exception) -> str:
    return str(exc.response.get("error")) if isinstance(exc, SlackApiError) else type(exc).__name__


def _not_rewritten(
    runtime: Runtime, client: WebClient, request: Request, card: cards.Card, exc: Exception
) -> None:
    """A decided card Slack did not rewrite: replace a vanished one, retry a transient failure."""
    if isinstance(exc, SlackApiError) and _error(exc) in VANISHED:
        _post_status(runtime, client, request, card)
    elif (wait := _wait_after(exc)) is not None:
        runtime.store.refresh_card_later(request.id, wait)


def _wait_after(exc: Exception) -> int | None:
    """Seconds to wait before trying a Slack write again: Slack's `Retry-After` after a 429,
    `REFRESH_BACKOFF_SECONDS` after a 5xx, a timeout or a network error; None when Slack refused
    for good."""
    if not isinstance(exc, SlackApiError):
        return REFRESH_BACKOFF_SECONDS
    if not transient(exc):
        return None
    return retry_after(exc) if rate_limited(exc) else REFRESH_BACKOFF_SECONDS


def _post_status(runtime: Runtime, client: WebClient, request: Request, card: cards.Card) -> None:
    """The card is gone or not ours to edit: say how the request ended in a fresh message instead,
    which becomes the request's card (so it is posted once)."""
    try:
        posted = client.chat_postMessage(channel=request.channel, **card.message())
    except (SlackApiError, OSError) as exc:
        log.warning("request %s: status message not posted either (%s)", request.id, _error(exc))
        runtime.store.refresh_card_later(request.id, REFRESH_BACKOFF_SECONDS)
        return
    runtime.store.card_refreshed(request.id, moved_to=(str(posted["channel"]), str(posted["ts"])))


def mark_escalated(runtime: Runtime, old: Request, to_channel: str) -> None:
    """Rewrite the card of the level `old` was at to say where the request went (no buttons). When
    Slack will not rewrite it now (429, 5xx, a timeout), the rewrite becomes a router job
    (`jobs.enqueue_rewrite`) that tries again at Slack's pace; a refusal for good is logged."""
    _mark_home_due(runtime, old)  # no longer theirs to decide
    if old.card_ts is None:
        return
    message = cards.escalated_card(old, to_channel).message()
    wait = _rewrite(runtime, old.id, old.channel, old.card_ts, message)
    if wait is not None:
        jobs.enqueue_rewrite(runtime.redis, old.id, old.channel, old.card_ts, message, wait)


def rewrite_message(request_id: str, channel: str, ts: str, message: dict[str, Any]) -> Retry | None:
    """RQ job (router worker, `jobs.REWRITE_JOB`): replace the text and blocks of the message at
    (`channel`, `ts`) with `message`; a `Retry` in Slack's `Retry-After` seconds (30 for a 5xx or a
    timeout) while Slack is busy, at most `jobs.MAX_REWRITES` times."""
    wait = _rewrite(current(), request_id, channel, ts, message)
    return None if wait is None else Retry(max=jobs.MAX_REWRITES, interval=[wait])


def _rewrite(runtime: Runtime, request_id: str, channel: str, ts: str, message: dict[str, Any]) -> int | None:
    """chat.update the escalated card at `ts` to `message` (`{"text", "blocks"}`), audited as a
    version of that card (`_audit_version`, `escalated`); the seconds to wait before trying again,
    or None when done (or refused for good: logged)."""
    client = runtime.slack
    try:
        response = client.chat_update(channel=conversation(client, channel), ts=ts, **message)
    except (SlackApiError, OSError) as exc:
        log.warning("request %s: message %s not rewritten (%s)", request_id, ts, _error(exc))
        return _wait_after(exc)
    _audit_version(runtime, request_id, ts, _stored(response, message), "escalated")
    return None


def remind(client: WebClient, request: Request, missing: list[str]) -> None:
    """Post the reminder, mentioning the approvers still `missing`, as a thread reply under the card.
    Raises `RetryLater` when Slack is busy or unreachable (429, 5xx, a timeout), and `SlackApiError`
    when it refuses for good."""
    try:
        client.chat_postMessage(
            channel=conversation(client, request.channel),
            thread_ts=request.card_ts,
            text=texts.reminder_text(request, missing),
        )
    except SlackApiError as exc:
        if transient(exc):
            raise RetryLater(retry_after(exc), _error(exc)) from None
        raise
    except OSError as exc:
        raise RetryLater(REFRESH_BACKOFF_SECONDS, type(exc).__name__) from None


def tell(client: WebClient, channel: str | None, user_id: str, text: str) -> None:
    """Post an ephemeral message to `user_id` in `channel`, or without a channel (a modal's submit
    has none) a direct message from the app. Best effort: Slack refusing or not answering (a
    network error, a timeout: `NO_ANSWER`) is logged, not raised, since the answer follows an
    action already recorded."""
    try:
        if channel is None:
            client.chat_postMessage(channel=user_id, text=text)
        else:
            client.chat_postEphemeral(channel=conversation(client, channel), user=user_id, text=text)
    except NO_ANSWER as exc:
        log.warning("answer to %s not delivered (%s)", user_id, _error(exc))
