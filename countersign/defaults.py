"""Defaults used in more than one place. Durations are in seconds."""

from __future__ import annotations

GRANT_TTL_SECONDS = 15 * 60
"""How long an approval may be executed when the policy sets no `grant_ttl`."""

IDEMPOTENCY_TTL_SECONDS = 7 * 24 * 3600
"""How long Redis remembers an idempotency key → request id claim (the database keeps it for good)."""

RESUME_MARKER_TTL_SECONDS = 2 * 24 * 3600
"""How long Redis keeps the marker a finished resume job leaves (its RQ job is deleted when it
finishes), which the relay's heal and `clear_taken` look for."""

SLACK_TIMEOUT_SECONDS = 10
"""The Web API client's timeout for one call."""
