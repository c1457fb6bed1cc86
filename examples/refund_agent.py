"""An agent that refunds customers, but only what a human approved.

Ask (the agent's process enqueues the approval request and exits):

    python -m examples.refund_agent 120.00 --customer cus_ACME --run-id r1

Resume (a separate RQ worker runs `resume(decision)` once a reviewer decides; the JSON serializer
is required, countersign never pickles):

    countersign agent-worker refund-agent

`resume` runs the refund through `approved_action`: only an approved decision with a valid,
unexpired grant, only the payload the reviewer approved (or edited), and only once.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from countersign import ApprovalClient, approved_action

QUEUE = "refund-agent"


def ask(amount: str, customer: str, run_id: str) -> str:
    """Ask for approval to refund `amount` (a decimal string, USD) to `customer`; returns the request id."""
    return ApprovalClient.from_env().request(
        action="issue_refund",
        payload={"amount": amount, "currency": "USD", "customer": customer},
        summary=f"Refund {amount} USD to {customer}",
        reason="Customer reported a duplicate charge",
        requester="refund-agent",
        run_id=run_id,
        step="refund",
        resume={"queue": QUEUE, "func": "examples.refund_agent.resume"},
    )


@approved_action
def resume(payload: dict[str, Any]) -> str:
    """The resume job: stands in for the payment provider call and prints the exact payload it runs."""
    print(f"REFUND EXECUTED: {json.dumps(payload, sort_keys=True)}", flush=True)
    return f"refunded {payload['amount']} {payload['currency']}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Ask a human to approve a refund.")
    parser.add_argument("amount", help="decimal string, e.g. 120.00")
    parser.add_argument("--customer", default="cus_ACME")
    parser.add_argument("--run-id", default="demo-1")
    options = parser.parse_args()
    print(ask(options.amount, options.customer, options.run_id))
