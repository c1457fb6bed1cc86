"""The Bolt app: listeners for the card's buttons and the modals' submits.

Listeners stay tiny: `ack()` first (Slack wants the answer within 3 s:
https://docs.slack.dev/tools/bolt-python/concepts/acknowledge), then hand one domain call to the
app's decision pool, then return. Button listeners touch nothing before `ack()`. Modal submits are
the one exception Slack imposes: field errors travel in the ack itself, so a read-only check comes
first. The process's `Runtime` and the pool reach listeners through Bolt's injected `context`.

The app runs with `process_before_response=True`: Bolt runs the listener on the HTTP request's
own thread and answers as soon as it returns, which is right after `ack()` since the domain call
runs on the pool. In Bolt's default mode the listener itself, ack included, would wait for one of the
five threads of Bolt's listener executor while the request thread polls every 10 ms for the ack: at
50 clicks a second acks would queue behind earlier clicks' database and Slack work (BENCHMARKS.md,
"Decision latency").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from slack_bolt import Ack, App, BoltContext, Respond
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk import WebClient

from ..router import cards, commands, delivery, home, journal, review, texts
from ..router.cards import (
    APPROVE_ACTION,
    DETAILS_ACTION,
    EDIT_ACTION,
    EDIT_CALLBACK,
    REJECT_ACTION,
    REJECT_CALLBACK,
)
from ..router.runtime import Runtime
from . import modals, payload

log = logging.getLogger(__name__)

# Decisions in flight per process. Each holds a database connection only inside its transactions
# (SQLAlchemy's default pool: 5 + 10 overflow) and waits on Slack's Web API in between.
DECISION_THREADS = 16


class _OneTokenOnly(logging.Filter):
    """Drops Bolt's start-up warning "As you gave `client` as well, `token` will be unused". Bolt is
    given only the client, but reads `SLACK_BOT_TOKEN` from the environment by itself
    (`token or os.environ.get("SLACK_BOT_TOKEN")` in slack_bolt/app/app.py) and then warns, although
    the client holds that very token."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


_ONE_TOKEN_ONLY = _OneTokenOnly()


def create_app(runtime: Runtime, needed_by: str = "`countersign web`") -> App:
    """A Bolt `App` verifying Slack signatures with `SLACK_SIGNING_SECRET` and calling the Web API
    at `SLACK_API_URL`. Raises `ConfigError` if the token, signing secret or `COUNTERSIGN_SECRET`
    (which signs grants) is missing."""
    runtime.settings.require(
        "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "COUNTERSIGN_SECRET", needed_by=needed_by
    )
    logging.getLogger(f"slack_bolt.{App.__name__}").addFilter(_ONE_TOKEN_ONLY)  # added once
    app = App(
        client=runtime.slack,
        signing_secret=runtime.settings.SLACK_SIGNING_SECRET,
        token_verification_enabled=False,
        process_before_response=True,
    )
    pool = ThreadPoolExecutor(DECISION_THREADS, thread_name_prefix="countersign-decision")

    @app.middleware
    def inject_runtime(context: BoltContext, next: Any) -> None:
        context["runtime"] = runtime
        context["pool"] = pool
        # Bolt hands listeners a new urllib `WebClient` per request (`App._init_context`, since
        # 1.15, so that a listener may change its token); ours never do, and the process's pooled
        # client keeps its connections to Slack alive between clicks (`countersign.slackhttp`).
        context["client"] = runtime.slack
        next()

    for action_id, on_action in ACTIONS.items():
        app.action(action_id)(on_action)
    for callback_id, on_view in VIEWS.items():
        app.view(callback_id)(on_view)
    for command, on_command in COMMANDS.items():
        app.command(command)(on_command)
    for event, on_event in EVENTS.items():
        app.event(event)(on_event)
    return app


def _after_ack(
    context: BoltContext,
    work: Callable[..., object],
    client: WebClient,
    user_id: str,
    channel: str | None,
    *args: Any,
) -> None:
    """Run `work(runtime, client, *args)` on the decision pool. Slack has its ack already, so if the
    work fails (the database refuses or is gone, Slack errs), the reviewer is told in Slack that
    nothing was recorded — ephemerally in `channel`, or in a DM without one — and the error is
    logged. A decision's work raises only before its commit: what follows the commit
    (`review.after_commit`) logs its failures and answers the reviewer itself."""
    context["pool"].submit(_told_if_failed, work, context["runtime"], client, user_id, channel, *args)


def _told_if_failed(
    work: Callable[..., object],
    runtime: Runtime,
    client: WebClient,
    user_id: str,
    channel: str | None,
    *args: Any,
) -> None:
    try:
        work(runtime, client, *args)
    except Exception as exc:
        log.exception("%s failed after the ack", getattr(work, "__name__", work))
        delivery.tell(client, channel, user_id, texts.not_recorded(type(exc).__name__))


def on_approve(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Approve button: ack, then vote."""
    ack()
    click = payload.click(body)
    action = review.Action(
        "approve", click.request_id, click.user, channel=click.channel, where=click.where, shown=click.shown
    )
    _after_ack(context, journal.act, client, click.user["slack_user_id"], click.channel, action)


def on_modal_button(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Reject / Edit / Details buttons: ack, then open the modal with the click's trigger_id."""
    ack()
    click = payload.click(body)
    _after_ack(context, modals.open_modal, client, click.user["slack_user_id"], click.channel, click)


def on_edit_submit(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Edit modal submit: inline errors, or close the modal and approve with the edits."""
    _on_submit(ack, body, client, context, review.check_edit, "edit")


def on_reject_submit(ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
    """Reject modal submit: inline errors, or close the modal and reject with the reason."""
    _on_submit(ack, body, client, context, review.check_reject, "reject")


def _on_submit(
    ack: Ack,
    body: dict[str, Any],
    client: WebClient,
    context: BoltContext,
    check: Callable[[Runtime, str, str, dict[str, str | None]], review.Submission],
    kind: Literal["reject", "edit"],
) -> None:
    """A modal submit: `check` it (a read, before the ack, which carries any field errors), ack,
    then act on it (journaled) on the pool once the modal has closed."""
    submitted = payload.view_submission(body)
    user_id = submitted.user["slack_user_id"]
    try:
        submission = check(context["runtime"], submitted.request_id, user_id, submitted.values)
    except Exception as exc:  # the read before the ack failed: say so under the first field
        log.exception("%s failed before the ack", check.__name__)
        first = next(iter(submitted.values), cards.REASON_BLOCK)
        submission = review.Submission(errors={first: texts.not_recorded(type(exc).__name__)})
    ack(**modals.ack_for(submission))
    if submission.ok:
        action = review.Action(
            kind,
            submitted.request_id,
            submitted.user,
            reason=submission.reason,
            values=submitted.values,
            where=submitted.where,
            shown=submitted.shown,
        )
        _after_ack(context, journal.act, client, user_id, None, action)


def on_command(ack: Ack, body: dict[str, Any], respond: Respond, context: BoltContext) -> None:
    """`/countersign`: ack (an empty 200, so Slack shows nothing yet), then answer ephemerally
    through the command's `response_url` from the pool."""
    ack()
    user_id, text = str(body.get("user_id") or ""), str(body.get("text") or "")
    context["pool"].submit(_answer_command, context["runtime"], respond, user_id, text)


def _answer_command(runtime: Runtime, respond: Respond, user_id: str, text: str) -> None:
    """Post `commands.answer` to the response_url; when it fails, say so there (logged)."""
    try:
        answer = commands.answer(runtime, user_id, text)
    except Exception as exc:
        log.exception("/countersign %s failed after the ack", text[:40])
        answer = {"response_type": "ephemeral", "text": texts.not_answered(type(exc).__name__)}
    try:
        respond(**answer)
    except Exception:
        log.exception("the answer to /countersign was not delivered to its response_url")


def on_home_opened(event: dict[str, Any], context: BoltContext) -> None:
    """`app_home_opened`: on the Home tab, publish the reviewer's Home from the pool (Bolt acks the
    event as the listener returns)."""
    if event.get("tab") == "home":
        context["pool"].submit(_logged, home.opened, context["runtime"], str(event["user"]))


def _logged(work: Callable[..., object], *args: Any) -> None:
    try:
        work(*args)
    except Exception:
        log.exception("%s failed after the ack", getattr(work, "__name__", work))


ACTIONS: dict[str, Callable[..., None]] = {
    APPROVE_ACTION: on_approve,
    REJECT_ACTION: on_modal_button,
    EDIT_ACTION: on_modal_button,
    DETAILS_ACTION: on_modal_button,
}
"""The listener of each button's `action_id` (Slack delivers them by interactivity, manifest.yml's
`settings.interactivity`)."""

VIEWS: dict[str, Callable[..., None]] = {EDIT_CALLBACK: on_edit_submit, REJECT_CALLBACK: on_reject_submit}
"""The listener of each modal's `callback_id` (its submits, by interactivity)."""

COMMANDS: dict[str, Callable[..., None]] = {commands.COMMAND: on_command}
"""The listener of each slash command (manifest.yml's `features.slash_commands`)."""

EVENTS: dict[str, Callable[..., None]] = {"app_home_opened": on_home_opened}
"""The listener of each Events API event (manifest.yml's `settings.event_subscriptions.bot_events`)."""
