"""Who the approvers are: Slack user ids from the policy plus the members of its user groups.

User groups are resolved with `usergroups.users.list` (https://docs.slack.dev/reference/methods/usergroups.users.list,
scope `usergroups:read`) and cached for `USERGROUP_TTL_SECONDS`, so a busy intake does not call Slack
for every request and a change of membership is seen within a minute.

A lookup Slack cannot answer now is told apart from one it refuses, as for every other Slack call
(`delivery.transient`): rate-limited (a `429`, for its `Retry-After`), a 5xx, a timeout or a network
error raise `RetryLater`, so the caller tries again later; a refusal for good (`no_such_subteam`,
`missing_scope`, ...) raises `SlackApiError`.
"""

from __future__ import annotations

import threading
import time
from http.client import HTTPException

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from ..exceptions import RetryLater
from .delivery import retry_after, transient

USERGROUP_TTL_SECONDS = 60.0
# What the Web API client raises when Slack does not answer: urllib's URLError and socket timeouts
# are OSErrors, a connection dropped mid-answer an HTTPException (after the client's own retry).
UNREACHABLE = (OSError, HTTPException)
UNREACHABLE_RETRY_SECONDS = 1

_cache: dict[str, tuple[float, tuple[str, ...]]] = {}
_lock = threading.Lock()


def members(client: WebClient, usergroup: str) -> tuple[str, ...]:
    """User ids in `usergroup`, from the cache when fresher than `USERGROUP_TTL_SECONDS`.

    Raises `slack_sdk.errors.SlackApiError` when Slack refuses (e.g. `no_such_subteam`), and the
    client's network errors (`UNREACHABLE`).
    """
    now = time.monotonic()
    with _lock:
        cached = _cache.get(usergroup)
    if cached is not None and now - cached[0] < USERGROUP_TTL_SECONDS:
        return cached[1]
    users = tuple(client.usergroups_users_list(usergroup=usergroup)["users"])
    with _lock:
        _cache[usergroup] = (now, users)
    return users


def clear_cache() -> None:
    """Forget every cached membership (the next lookup asks Slack)."""
    with _lock:
        _cache.clear()


def approvers(client: WebClient, users: list[str], usergroups: list[str]) -> list[str]:
    """The distinct user ids of `users` and every member of `usergroups`, in that order.

    Raises `RetryLater` (with Slack's error code, or the network error's name, as `why`) when Slack
    is busy or unreachable, and `SlackApiError` when it refuses for good.
    """
    found = list(users)
    try:
        for group in usergroups:
            found += members(client, group)
    except SlackApiError as exc:
        if transient(exc):
            why = exc.response.get("error") or f"HTTP {exc.response.status_code}"
            raise RetryLater(retry_after(exc), why) from None
        raise
    except UNREACHABLE as exc:
        raise RetryLater(UNREACHABLE_RETRY_SECONDS, type(exc).__name__) from None
    return list(dict.fromkeys(found))
