"""The examples' reviewer: decide a request's card on the sandbox page that `make run` serves, as a
person pressing its button would (`POST /_sandbox/click`, which the sandbox signs and sends to the bot)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

from countersign import ApprovalClient, Decision, RequestDeadLettered, WaitTimeout
from countersign.router.cards import APPROVE_ACTION

SANDBOX_PORT_FILE = Path(".run/sandbox-port")  # written by `make run`
REVIEWER = "U0LEAD"  # lee.lead, an approver of refunds in examples/policy.yml
CARD_TIMEOUT_SECONDS = 30.0
WAIT_SECONDS = 600  # how long an example waits for the decision


def approve_in_sandbox(client: ApprovalClient, request_id: str, user: str = REVIEWER) -> None:
    """Wait for the request's card (at most `CARD_TIMEOUT_SECONDS`), then press Approve on it as
    `user`; for a request decided already (asked before: the same request), only say so. Raises
    `TimeoutError` when no card is posted in time, `httpx.HTTPError` when the sandbox does not
    answer (is `make run` running?)."""
    deadline = time.monotonic() + CARD_TIMEOUT_SECONDS
    while (state := client.get(request_id)).card is None and state.status in ("queued", "pending"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no card for request {request_id} after {CARD_TIMEOUT_SECONDS} s")
        time.sleep(0.2)
    if state.status == "dead_letter":  # refused at intake: waiting for the decision says why
        return
    if state.status != "pending" or state.card is None:
        print(f"request {request_id} is already {state.status}: nothing to press", flush=True)
        return
    card = state.card
    url = f"http://127.0.0.1:{SANDBOX_PORT_FILE.read_text().strip()}/_sandbox/click"
    click = {"channel": card["channel"], "ts": card["ts"], "action_id": APPROVE_ACTION, "user": user}
    httpx.post(url, json=click, timeout=10).raise_for_status()
    print(f"approved in the sandbox as {user}", flush=True)


def where_to_decide() -> str:
    """Where a person decides the card: the sandbox page `make run` serves (its port in
    `SANDBOX_PORT_FILE`), or the policy's channel in Slack."""
    if SANDBOX_PORT_FILE.exists():
        return f"on the sandbox page http://127.0.0.1:{SANDBOX_PORT_FILE.read_text().strip()}/ (or in Slack)"
    return "on its card in Slack, in the policy's channel (or on the sandbox page `make run` serves)"


def decision_of(client: ApprovalClient, request_id: str, approve: bool) -> Decision:
    """Approve the card in the sandbox (`approve`), or, while it is undecided, say where to decide it
    and how long this waits; then wait for the decision, at most `WAIT_SECONDS`. A request refused at
    intake, or still pending at the end, ends the example: the reason on one line (stderr), exit
    status 1."""
    try:
        if approve:
            approve_in_sandbox(client, request_id)
        elif client.get(request_id).status in ("queued", "pending"):  # decided already: nothing to ask
            print(
                f"decide it {where_to_decide()}; waiting up to {WAIT_SECONDS} s (Ctrl-C stops waiting)",
                flush=True,
            )
        return client.wait(request_id, timeout=WAIT_SECONDS)
    except RequestDeadLettered as refused:
        sys.exit(f"{refused}; nothing runs")
    except WaitTimeout:
        sys.exit(
            f"request {request_id}: no decision in {WAIT_SECONDS} s; it stays pending: run this again to wait"
        )
