"""The reviewer's App Home tab: their queue with the card's buttons, what they decided recently, and
the counts, published with `views.publish` (https://docs.slack.dev/tools/bolt-python/concepts/app-home).

It is published when the reviewer opens it (`app_home_opened`: `opened`) and, after a change to a
request they may decide (`homedue.mark_due`, called where cards are posted and rewritten), by the
router's sweep (`publish_due`), debounced per reviewer and paced for Slack's tier (`homedue`). A
click on a Home button is the card's click: the same listeners, the same `review` code path.

The policy's `admins` also see "Gates": per action class and per reviewer, the numbers of
`countersign stats` over the last `GATES_DAYS` days (`store.stats`), computed at most once per
`GATES_TTL_SECONDS` for every process and kept in Redis (`GATES_KEY`), so publishing many Home tabs
runs the query once.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from slack_sdk.errors import SlackApiError

from ..exceptions import RetryLater
from ..store.stats import stats
from . import directory, homedue, inbox, review
from .delivery import rate_limited, retry_after, transient
from .runtime import Runtime

log = logging.getLogger(__name__)

PUBLISHES_PER_TICK = 10  # Home tabs one sweep tick publishes at most (the minute's budget still rules)
GATES_KEY = "countersign:home:gates:v3"  # JSON: `Gates`, the admins' "Gates"
GATES_TTL_SECONDS = 60
GATES_DAYS = 30


def view(runtime: Runtime, user_id: str) -> dict[str, Any]:
    """The Home view of `user_id` now: `review.queue` (the same rule as `/countersign pending`) and
    the requests they decided or voted on lately (`Store.decided_by_user`)."""
    queue = review.queue(runtime.store, user_id, inbox.HOME_LISTED + 1)
    decided = runtime.store.decided_by_user(user_id, inbox.HOME_RECENT)
    gates = gates_now(runtime) if is_admin(runtime, user_id) else None
    return inbox.home_view(queue[: inbox.HOME_LISTED], len(queue) > inbox.HOME_LISTED, decided, gates)


def is_admin(runtime: Runtime, user_id: str) -> bool:
    """True when the policy's `admins` (users, and members of user groups, `directory.approvers`)
    name `user_id`. A group Slack cannot resolve now counts as not naming them (logged): the Home
    tab is published without the admins' section rather than not at all, and `/countersign stats`
    refused (`commands`)."""
    admins = runtime.policy.file.admins
    if admins is None:
        return False
    if user_id in admins.users:
        return True
    try:
        return user_id in directory.approvers(runtime.slack, [], admins.usergroups)
    except (RetryLater, SlackApiError) as exc:
        log.warning("admins' user groups not resolved for %s, taken as not an admin (%s)", user_id, exc)
        return False


def gates_now(runtime: Runtime) -> inbox.Gates:
    """`{"actions": {action class: Tally.as_dict}, "reviewers": {user id: Tally.as_reviewer_dict}}` of
    the requests created in the last `GATES_DAYS` days (`store.stats.stats`): from Redis when
    computed less than `GATES_TTL_SECONDS` ago, else computed and kept there."""
    cached = runtime.redis.get(GATES_KEY)
    if cached is not None:
        found: inbox.Gates = json.loads(cast(bytes, cached))
        return found
    since = datetime.now(UTC) - timedelta(days=GATES_DAYS)
    numbers = stats(runtime.store.engine, since)
    gates: inbox.Gates = {
        "actions": {action: tally.as_dict() for action, tally in sorted(numbers.actions.items())},
        "reviewers": {user: tally.as_reviewer_dict() for user, tally in sorted(numbers.reviewers.items())},
    }
    runtime.redis.set(GATES_KEY, json.dumps(gates), ex=GATES_TTL_SECONDS)
    return gates


def publish(runtime: Runtime, user_id: str) -> None:
    """Publish `user_id`'s Home view. Raises slack_sdk's `SlackApiError` when Slack refuses."""
    runtime.slack.views_publish(user_id=user_id, view=view(runtime, user_id))


def opened(runtime: Runtime, user_id: str) -> None:
    """`app_home_opened` on the Home tab: publish now when this minute's budget allows, else mark it
    due at once for the sweep (which publishes in the next minute)."""
    if homedue.spend(runtime.redis):
        _publish_or_later(runtime, user_id)
    else:
        homedue.mark_due(runtime.redis, [user_id], seconds=0)


def publish_due(runtime: Runtime, limit: int = PUBLISHES_PER_TICK) -> int:
    """The sweep's step: publish the Home tabs due now, within the pace; returns how many."""
    users = homedue.take_due(runtime.redis, limit)
    return sum(_publish_or_later(runtime, user) for user in users)


def _publish_or_later(runtime: Runtime, user_id: str) -> bool:
    """Publish; when Slack is busy (429: its `Retry-After`) or unreachable, mark the user due again;
    a refusal for good is logged. True when published."""
    try:
        publish(runtime, user_id)
    except SlackApiError as exc:
        if transient(exc):
            wait = retry_after(exc) if rate_limited(exc) else homedue.DEBOUNCE_SECONDS
            homedue.mark_due(runtime.redis, [user_id], wait)
        else:
            log.warning("Home of %s not published (%s)", user_id, exc.response.get("error"))
        return False
    except OSError as exc:
        log.warning("Home of %s not published (%s); trying again", user_id, type(exc).__name__)
        homedue.mark_due(runtime.redis, [user_id])
        return False
    return True
