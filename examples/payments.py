"""The examples' payment provider: a refund that prints exactly what it runs."""

from __future__ import annotations

import json

SUMMARY = "Refund {amount} {currency} to {customer}"
"""The card's headline of a refund, a `str.format` template of its arguments."""


def refund(amount: str, currency: str, customer: str) -> str:
    """Print `REFUND EXECUTED: {...}` with the arguments it was given; say what was refunded."""
    print(
        f"REFUND EXECUTED: {json.dumps({'amount': amount, 'currency': currency, 'customer': customer})}",
        flush=True,
    )
    return f"refunded {amount} {currency} to {customer}"
