"""Who the approvers are: Slack user ids from the policy plus the members of its user groups.

User groups are resolved with `usergroups.users.list` (https://docs.slack.dev/reference/methods/usergroups.users.list,
scope `usergroups:read`) and cached for `USERGROUP_TTL_SECONDS`, so a busy intake does not call Slack
for every request and a change of membership is seen within a minute.
"""

from __future__ import annotations

import threading
import time

from slack_sdk import WebClient

USERGROUP_TTL_SECONDS = 60.0

_cache: dict[str, tuple[float, tuple[str, ...]]] = {}
_lock = threading.Lock()


def members(client: WebClient, usergroup: str) -> tuple[str, ...]:
    """User ids in `usergroup`, from the cache when fresher than `USERGROUP_TTL_SECONDS`.

    Raises `slack_sdk.errors.SlackApiError` when Slack refuses (e.g. `no_such_subteam`).
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
    """The distinct user ids of `users` and every member of `usergroups`, in that order."""
    found = list(users)
    for group in usergroups:
        found += members(client, group)
    return list(dict.fromkeys(found))
