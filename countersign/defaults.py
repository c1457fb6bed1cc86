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

INTAKE_QUEUE = "countersign"
"""The router worker's RQ queue (`countersign worker`): intake jobs and card rewrites Slack was too
busy for (`router.jobs`)."""

ROUTER_QUEUES = frozenset({INTAKE_QUEUE})
"""Every RQ queue a countersign worker listens on. None of them may be a request's resume queue
(`schema.QueueResume`): a resume job runs `func(decision)` on whatever worker takes its queue, and
countersign's own workers run only countersign's own jobs (`router.worker.RouterWorker`, DESIGN.md,
invariant 11)."""

INTAKE_JOB_PREFIX = "intake-"
"""An intake job's RQ id is this and the request id (`router.jobs.intake_job_id`)."""

RESUME_JOB_PREFIX = "resume-"
"""A resume job's RQ id is this and the request id (`router.jobs.resume_job_id`)."""

OWN_JOB_PREFIXES = (INTAKE_JOB_PREFIX, RESUME_JOB_PREFIX)
"""The ids of the jobs countersign enqueues with `result_ttl=0` and no job depending on them, which
countersign's worker deletes in one transaction as they succeed (`workers.CountersignWorker`)."""
