"""An agent that refunds customers, but only what a human approved.

Ask (the agent's process enqueues the approval request and exits):

    python -m examples.refund_agent 120.00 --customer cus_ACME --run-id r1

Resume (a separate RQ worker runs `resume(decision)` once a reviewer decides; the JSON serializer
is required, countersign never pickles):

    countersign agent-worker refund-agent

`resume` runs the refund through `execute_approved`: only an approved decision with a valid,
unexpired grant, only the payload the reviewer approved (or edited), and only once. It prints one
line for every outcome: `REFUND EXECUTED: {payload}` once the refund has run, `REFUND REJECTED: …`,
`REFUND EXPIRED: …`, or `REFUND REFUSED: …` when the worker refuses to run an approval (e.g. its
grant expired); a refund that fails prints nothing (its job fails, and the card says Failed).
(`approved_action` is the same without the lines: it logs the outcomes it does not run.)
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from countersign import ApprovalClient, Decision, ExecutionRefused, Outcome, execute_approved

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


def refund(payload: dict[str, Any]) -> str:
    """Stands in for the payment provider call, and prints the exact payload it ran once it has run:
    a refund that fails (e.g. a payload without `currency`: KeyError) prints nothing, and
    `execute_approved` records it as failed on the card."""
    done = f"refunded {payload['amount']} {payload['currency']}"
    print(f"REFUND EXECUTED: {json.dumps(payload, sort_keys=True)}", flush=True)
    return done


def _line(text: str) -> str:
    """`text` (a reviewer's reason, a Slack name) as one line a terminal shows as it is: each line
    break as ⏎, and any other character Python deems unprintable (`str.isprintable`: controls such as
    ESC, which starts a terminal escape sequence; bidirectional overrides such as U+202E, which
    reorder what is read) as U+FFFD."""
    flat = text.replace("\r\n", "\n")
    return "".join("⏎" if c in "\r\n" else c if c.isprintable() else "\ufffd" for c in flat)


def resume(data: dict[str, Any]) -> str | None:
    """The resume job: run the approved refund once, or print why nothing runs."""
    decision = Decision.from_json(data)
    if decision.outcome == Outcome.REJECTED:
        who = ", ".join(d["name"] for d in decision.decided_by) or "the policy"
        print(f"REFUND REJECTED by {_line(who)}: {_line(decision.reason or 'no reason given')}", flush=True)
        return None
    if not decision.may_run:
        print("REFUND EXPIRED: nobody decided in time, and the policy's timeout denied it", flush=True)
        return None
    try:
        return execute_approved(decision, refund)
    except ExecutionRefused as refused:  # audited and on the card; running again would be refused too
        print(f"REFUND REFUSED: {refused}", flush=True)
        return None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Ask a human to approve a refund.")
    parser.add_argument("amount", help="decimal string, e.g. 120.00")
    parser.add_argument("--customer", default="cus_ACME")
    parser.add_argument("--run-id", default="demo-1")
    options = parser.parse_args()
    print(ask(options.amount, options.customer, options.run_id))
