"""A refund behind `@requires_approval`: calling it asks a human; it runs on the agent's worker once approved.

With `make run` in another terminal (its agent worker takes the `refund-agent` queue):

    make example-decorator          # python -m examples.decorator_refund 120.00 --approve

The call prints the request id; `--approve` presses Approve on the sandbox card as lee.lead (else
it says where to press it yourself, and waits up to 10 minutes); the `make run` terminal then shows
the worker's `REFUND EXECUTED: {...}` line, and this command prints the decision it waited for. A
request refused at intake (e.g. an amount that is no decimal) ends it with the reason, exit 1.
"""

from __future__ import annotations

import argparse
import json

from countersign import ApprovalClient
from countersign.integrations.decorator import requires_approval
from examples import payments
from examples.sandbox_review import decision_of


@requires_approval(action="issue_refund", summary=payments.SUMMARY, queue="refund-agent")
def issue_refund(amount: str, currency: str, customer: str) -> str:
    """Stands in for the payment provider; runs on the worker, with the approved arguments only."""
    return payments.refund(amount, currency, customer)


RUN_EVENTS = {"execution_started": "its run started", "executed": "executed", "failed": "its run failed"}


def _what_runs(client: ApprovalClient, request_id: str, outcome: str, decided_before: bool) -> str:
    """What the decision makes the worker do: for a request decided before this run (the same
    arguments asked again), nothing more, and how its run went (its latest execution event)."""
    if outcome != "approved":
        return "nothing runs"
    if not decided_before:
        return "the worker runs it"
    runs = [e for e in client.get(request_id).audit if e["event"] in RUN_EVENTS]
    ran = f"{RUN_EVENTS[runs[-1]['event']]} at {runs[-1]['at']}" if runs else "not run yet"
    return f"already approved before this run ({ran}); nothing runs again"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Ask a human to approve a refund, then run it.")
    parser.add_argument("amount", help="decimal string, e.g. 120.00")
    parser.add_argument("--customer", default="cus_ACME")
    parser.add_argument("--approve", action="store_true", help="approve the card in the sandbox as lee.lead")
    options = parser.parse_args()
    handle = issue_refund(options.amount, "USD", options.customer)  # enqueues; nothing runs here
    print(f"approval request {handle.request_id}", flush=True)
    client = ApprovalClient.from_env()
    decided_before = client.get(handle.request_id).status not in ("queued", "pending")  # asked before
    decision = decision_of(client, handle.request_id, options.approve)
    then = _what_runs(client, handle.request_id, decision.outcome, decided_before)
    print(f"{decision.outcome}: {json.dumps(decision.payload)}; {then}")
