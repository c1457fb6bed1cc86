"""What `countersign pending` and `show` print of an agent's text, on real Redis, SQLite and
PostgreSQL: a bidirectional override or another control character an agent wrote is shown as the
card shows it, U+FFFD (`texts.sanitize`), never raw to the operator's terminal. Trial finding: a
summary with U+202E printed raw, reordering what the operator read."""

from __future__ import annotations

import json

import pytest
from redis import Redis

from countersign.cli import main
from tests.helpers import README_REQUEST, drain

SPOOF = "Refund 10\u202e00001 USD\u2066 via\x7f"
"""Displays reordered (RLO, LRI) with a DEL: the Trojan Source trick (CVE-2021-42574) on a terminal."""
SHOWN = "Refund 10\ufffd00001 USD\ufffd via\ufffd"


def _asking(**values: str) -> list[str]:
    """`README_REQUEST` with the values of the flags `values` names (`summary="…"` for `--summary`)."""
    args = list(README_REQUEST)
    for name, value in values.items():
        args[args.index(f"--{name}") + 1] = value
    return args


def test_pending_and_show_print_agent_text_as_the_card_does(
    env: dict[str, str], redis: Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = json.dumps({"amount": "120.00", "currency": "USD", "note": SPOOF})
    assert main(_asking(summary=SPOOF, payload=payload)) == 0
    request_id = capsys.readouterr().out.strip()
    drain(redis)
    assert main(["pending", "--approver", "U0ALICE"]) == 0
    printed = capsys.readouterr().out
    (listed,) = json.loads(printed)
    assert listed["request_id"] == request_id and listed["summary"] == SHOWN
    assert main(["show", request_id]) == 0
    printed += capsys.readouterr().out
    shown = json.loads(printed[printed.index("]") + 1 :])
    assert (shown["request"]["summary"], shown["request"]["payload"]["note"]) == (SHOWN, SHOWN)
    assert not set("\u202e\u2066\x7f") & set(printed)
