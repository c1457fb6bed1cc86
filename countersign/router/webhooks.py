"""Resume by webhook: POST each decision to the URL its request named, signed per Standard Webhooks,
until the receiver takes it or countersign gives up.

The decision is the same JSON document an RQ resume job receives (`decision.Decision`), sent as the
request body. The headers follow the Standard Webhooks spec v1.0.0
(https://github.com/standard-webhooks/standard-webhooks, `spec/standard-webhooks.md`): `webhook-id`
is `msg_<request id>`, the same on every attempt, so a receiver drops a repeat by it;
`webhook-timestamp` is the attempt's Unix time in seconds; `webhook-signature` is `v1,<base64>`,
HMAC-SHA256 under `COUNTERSIGN_WEBHOOK_SECRET` over `id.timestamp.body`, computed by the
`standardwebhooks` package itself (`Webhook.sign`, given an aware UTC time: it replaces the time
zone, so any other would sign another second).

What the receiver's answer means (the spec's "status handling"): any 2xx delivers it. A timeout
(`COUNTERSIGN_WEBHOOK_TIMEOUT_SECONDS` to connect, to send and to answer), a connection error,
a 3xx (redirects are not followed), a 5xx, 408, 429 and every other 4xx are tried again, with
exponential back-off and jitter (`retry_in`) and at least the receiver's `Retry-After`, until
`COUNTERSIGN_WEBHOOK_GIVE_UP_SECONDS` (default 72 h, about the spec's example schedule) after the
decision; the first attempt started after that is the last. A 4xx is tried again too, because the
usual ones (401 while a secret is rotated, 404 during a deploy) are mended by a person within
hours, and a receiver drops repeats by `webhook-id`. Only `410 Gone` dead-letters at once: the spec
has it mean "stop sending". A dead letter is noted on the outbox row (`WebhookDeadLettered`), in
the audit trail and on the card, like a resume job that failed (`agent/callbacks.py`).

Durability: the outbox row is the delivery's state (`store/webhooks.py`), so a restart loses
nothing. Each attempt is claimed by a lease in the database, so two router workers' sweeps never
POST the same attempt at once, and one whose process died is tried again when its lease
(`lease_seconds`) runs out: at least once, with the same `webhook-id`. The sweep of the router
worker (`worker.sweep_forever`) claims what is due each second and POSTs it on a few threads of its
own (`Deliverer`), so a receiver that hangs holds up no timeout, card or relay step.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import random
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from redis.exceptions import RedisError
from standardwebhooks import Webhook

from ..schema import iso
from ..store import OutboxEvent, ResumeProblem, WebhookAttempt
from .jobs import request_refresh, webhook_id
from .runtime import Runtime

log = logging.getLogger(__name__)

WEBHOOK = "webhook"
"""The audit actor of webhook attempts."""
DELIVERY_THREADS = 4
"""Webhook POSTs one sweeping process runs at once."""
BACKOFF_BASE_SECONDS = 5
BACKOFF_CAP_SECONDS = 2 * 3600
LEASE_MARGIN_SECONDS = 10
GONE = 410
USER_AGENT = "countersign-webhooks/1"


def lease_seconds(timeout: int) -> int:
    """How long one attempt is held: longer than it can take (httpx bounds connecting, sending,
    answering and waiting for a connection by `timeout` each), plus a margin."""
    return 4 * timeout + LEASE_MARGIN_SECONDS


def retry_in(attempt: int, retry_after: int | None = None) -> int:
    """Seconds until the attempt after the failed `attempt` (1 for the first): exponential back-off
    from `BACKOFF_BASE_SECONDS`, doubling, capped at `BACKOFF_CAP_SECONDS`, with "equal jitter"
    (a random time in the upper half: 2.5-5 s, 5-10 s, …, 1-2 h), so receivers that failed together
    are not all tried again in the same second; and at least the receiver's `Retry-After`, up to the
    cap."""
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(attempt - 1, 30))
    wait = random.uniform(ceiling / 2, ceiling)
    if retry_after is not None:
        wait = max(wait, min(retry_after, BACKOFF_CAP_SECONDS))
    return math.ceil(wait)


@dataclass(frozen=True)
class Answer:
    """What one POST got: the HTTP `status` (None without one), the `error` in words the card may
    show (`"HTTP 500"`, `"no answer in 5 s"`, `"could not connect"`; never the URL), the exception
    for the audit trail (`detail`), and the receiver's `Retry-After` in seconds."""

    status: int | None
    error: str | None = None
    detail: str | None = None
    retry_after: int | None = None

    @property
    def delivered(self) -> bool:
        """Any 2xx."""
        return self.status is not None and 200 <= self.status < 300


def signed_headers(signer: Webhook, message_id: str, body: str, now: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of `body` sent at `now` (an aware UTC time), and its type."""
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(math.floor(now.timestamp())),
        "webhook-signature": signer.sign(message_id, now, body),
    }


def post(url: str, body: str, headers: dict[str, str], timeout: int) -> Answer:
    """POST `body` to `url` once, reading the status and headers only (not the answer's body),
    following no redirect. Never raises for the network: a failure is an `Answer` without status."""
    try:
        with httpx.stream(
            "POST", url, content=body.encode(), headers=headers, timeout=timeout, follow_redirects=False
        ) as response:
            status = response.status_code
            error = None if 200 <= status < 300 else f"HTTP {status}"
            return Answer(status, error, retry_after=_seconds(response.headers.get("retry-after")))
    except httpx.TimeoutException as exc:
        return Answer(None, f"no answer in {timeout} s", _described(exc))
    except httpx.ConnectError as exc:
        return Answer(None, "could not connect", _described(exc))
    except httpx.HTTPError as exc:
        return Answer(None, type(exc).__name__, _described(exc))


def _described(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _seconds(retry_after: str | None) -> int | None:
    """`Retry-After` (RFC 9110 section 10.2.3: seconds, or an HTTP date) in whole seconds from now."""
    if not retry_after:
        return None
    if retry_after.strip().isdigit():
        return int(retry_after)
    try:
        moment = email.utils.parsedate_to_datetime(retry_after)
    except (TypeError, ValueError):
        return None
    return max(0, math.ceil((moment - datetime.now(UTC)).total_seconds())) if moment.tzinfo else None


class Deliverer:
    """Claims the webhook attempts due and makes them, for one sweeping process: `tick` (the sweep's
    step) claims as many as it has idle threads and makes each on a daemon thread of its own, so an
    exiting process never waits for a receiver (the lease covers an attempt cut short). Without
    `COUNTERSIGN_WEBHOOK_SECRET` it claims nothing: intake dead-letters webhook requests then, and a
    decision taken before the secret was unset waits for it."""

    def __init__(self, runtime: Runtime, threads: int = DELIVERY_THREADS) -> None:
        settings = runtime.settings
        self.runtime = runtime
        self.timeout = settings.COUNTERSIGN_WEBHOOK_TIMEOUT_SECONDS
        self.give_up_seconds = settings.COUNTERSIGN_WEBHOOK_GIVE_UP_SECONDS
        secret = settings.COUNTERSIGN_WEBHOOK_SECRET
        self.signer = Webhook(secret) if secret else None
        self.threads = threads
        self._running: list[threading.Thread] = []
        logging.getLogger("httpx").setLevel(settings.COUNTERSIGN_LIBRARY_LOG_LEVEL)  # a line per POST

    def tick(self) -> int:
        """Claim as many due attempts as there are idle threads and start them. Returns how many."""
        self._running = [thread for thread in self._running if thread.is_alive()]
        claimed = self.claim(self.threads - len(self._running))
        for attempt in claimed:
            thread = threading.Thread(
                target=self.attempt, args=(attempt,), name="countersign-webhook", daemon=True
            )
            thread.start()
            self._running.append(thread)
        return len(claimed)

    def claim(self, limit: int) -> list[WebhookAttempt]:
        """Claim up to `limit` due attempts (`Store.claim_webhooks`), each held for `lease_seconds`."""
        if self.signer is None or limit <= 0:
            return []
        store = self.runtime.store
        return store.claim_webhooks(limit, lease_seconds(self.timeout), self.give_up_seconds)

    def attempt(self, claimed: WebhookAttempt) -> None:
        """POST one claimed attempt and record its answer (`record`). Never raises: an error is
        logged, and the attempt is made again when its lease runs out."""
        event = claimed.event
        try:
            assert self.signer is not None and event.webhook is not None  # claimed only then
            body = json.dumps(event.body, separators=(",", ":"), ensure_ascii=False)
            headers = signed_headers(self.signer, webhook_id(event.request_id), body, datetime.now(UTC))
            self.record(claimed, post(event.webhook, body, headers, self.timeout))
        except Exception:
            log.exception("request %s: webhook attempt %d not recorded", event.request_id, event.attempts)

    def record(self, claimed: WebhookAttempt, answer: Answer) -> None:
        """Keep what one attempt got: delivered (a 2xx), tried again after `retry_in`, or, for its
        `last` attempt or a 410, dead-lettered; and ask for the card's rewrite when what it says
        about the agent changes (each failure: the card counts the attempts)."""
        event = claimed.event
        store = self.runtime.store
        detail = {
            "attempt": event.attempts,
            "webhook_id": webhook_id(event.request_id),
            "status": answer.status,
            "error": answer.detail or answer.error,
        }
        if answer.delivered:
            changed = store.webhook_delivered(event, WEBHOOK, **detail) and event.problem is not None
            log.info("request %s: webhook delivered (attempt %d)", event.request_id, event.attempts)
        else:
            give_up = claimed.last or answer.status == GONE
            wait = None if give_up else retry_in(event.attempts, answer.retry_after)
            problem = self._problem(event, answer, give_up)
            changed = store.webhook_failed(event, wait, problem, WEBHOOK, **detail)
            log.warning(
                "request %s: webhook attempt %d failed (%s); %s",
                event.request_id,
                event.attempts,
                answer.error,
                "dead-lettered" if give_up else f"trying again in {wait} s",
            )
        if changed:
            try:
                request_refresh(self.runtime.redis, event.request_id)
            except RedisError as exc:
                log.warning("request %s: card not rewritten (%s)", event.request_id, exc)

    def _problem(self, event: OutboxEvent, answer: Answer, give_up: bool) -> ResumeProblem:
        error = answer.error or "failed"
        if give_up:
            return {"event": "webhook_dead_lettered", "error": error, "attempts": event.attempts}
        give_up_at = iso(event.created_at + timedelta(seconds=self.give_up_seconds)) or ""
        return {
            "event": "webhook_failing",
            "error": error,
            "attempts": event.attempts,
            "give_up_at": give_up_at,
        }
