"""Defaults used in more than one place. Durations are in seconds."""

from __future__ import annotations

GRANT_TTL_SECONDS = 15 * 60
"""How long an approval may be executed when the policy sets no `grant_ttl`."""

IDEMPOTENCY_TTL_SECONDS = 7 * 24 * 3600
"""How long Redis remembers an idempotency key → request id claim (the database keeps it for good)."""

RESUME_RESULT_TTL_SECONDS = 7 * 24 * 3600
"""How long RQ keeps a finished resume job (and so its id, which the relay's heal looks for)."""

SLACK_TIMEOUT_SECONDS = 10
"""The Web API client's timeout for one call."""
