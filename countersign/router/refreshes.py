"""Card refreshes asked for from outside the router: the agent's worker (an execution claimed, its
outcome, a refusal, a resume job that failed) and the relay's sweeps ask for a decided card to be
rewritten (`jobs.request_refresh`: the request id joins a Redis set), and the router's sweep
rewrites them every second (`refresh_requested`), each card once however often it was asked for;
a card whose rewrite Slack put off is left to the card sweep, which holds that rewrite (`delivery.refresh`).
The card is rendered from the database, so a refresh lost with Redis only leaves a card one step
behind until the next one.
"""

from __future__ import annotations

import logging
from typing import cast

from . import threads
from .jobs import REFRESH_KEY, request_refresh
from .runtime import Runtime

log = logging.getLogger(__name__)


def refresh_requested(runtime: Runtime, limit: int = 100) -> int:
    """Rewrite the decided cards asked for with `request_refresh` (up to `limit` of them, each
    once, taken off the set first, so an ask while one is rewritten makes another rewrite). An id
    whose rewrite raised (the database unreachable) is asked for again, logged. Returns how many
    were taken. Raises redis-py's `RedisError`."""
    popped = cast(list[bytes] | None, runtime.redis.spop(REFRESH_KEY, limit))
    asked = [member.decode() for member in popped or []]
    for request_id in asked:
        try:
            threads.refresh(runtime, request_id, leave_stored=True)  # the sweep holds a put-off rewrite
        except Exception:
            log.exception("request %s: card not refreshed; asking again", request_id)
            request_refresh(runtime.redis, request_id)
    return len(asked)
