"""Token buckets: how Slack's rate limits let short bursts through and then pace calls."""

from __future__ import annotations

import math


def take(buckets: dict[str, tuple[float, float]], key: str, rate: float, burst: float, now: float) -> int:
    """Take a token from `key`'s bucket, which holds at most `burst` tokens and refills at `rate`
    tokens a second (`now`: unix seconds). Returns 0 when there was one, else the whole seconds until
    the next (at least 1), Slack's ``Retry-After``; a refused call takes nothing."""
    tokens, last = buckets.get(key, (burst, now))
    tokens = min(burst, tokens + max(0.0, now - last) * rate)
    if tokens < 1:
        buckets[key] = (tokens, now)
        return max(1, math.ceil((1 - tokens) / rate))
    buckets[key] = (tokens - 1, now)
    return 0
