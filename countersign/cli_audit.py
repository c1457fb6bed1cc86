"""`countersign audit seal | verify | head`: the tamper-evident audit chain (`store/chain.py`).

`verify` exits 1 naming the first event edited, deleted, inserted or reordered (or a cut tail,
against a head given with `--head`); `head` prints the last link signed with `COUNTERSIGN_SECRET`,
to be kept outside the database.
"""

from __future__ import annotations

import argparse
import hmac
import json
import sys
from typing import Any

from .config import load_settings
from .connections import Connections
from .exceptions import UsageError
from .store.chain import AuditChain, Head


def add_parsers(commands: Any) -> None:
    """Add `audit seal`, `audit verify` and `audit head` to the subcommands `commands`."""
    audit = commands.add_parser("audit", help="the tamper-evident audit chain").add_subparsers(
        required=True, metavar="ACTION"
    )
    audit.add_parser(
        "seal", help="seal the committed audit events now (the worker's sweep does it every second)"
    ).set_defaults(handler=_seal)
    verify = audit.add_parser(
        "verify",
        help="check every link; exit 1 naming the first event edited, deleted, inserted or reordered",
    )
    verify.add_argument(
        "--head", help="a head printed earlier by `audit head` (JSON): the chain must still hold it"
    )
    verify.set_defaults(handler=_verify)
    audit.add_parser(
        "head", help="print the chain's last link as JSON, signed with COUNTERSIGN_SECRET, for anchoring"
    ).set_defaults(handler=_head)


def _chain() -> AuditChain:
    connections = Connections(load_settings())
    connections.check()
    return AuditChain(connections.store.engine)


def _secret() -> str:
    settings = load_settings()
    settings.require("COUNTERSIGN_SECRET", needed_by="`countersign audit`")
    return settings.COUNTERSIGN_SECRET or ""


def _seal(_args: argparse.Namespace) -> None:
    chain, total = _chain(), 0
    while sealed := chain.seal():
        total += sealed
    print(f"countersign audit: {total} event(s) sealed")


def _head(_args: argparse.Namespace) -> None:
    """Print `{seq, event_id, hash, signature}`; `null` when nothing is sealed yet."""
    head = _chain().head()
    shown = None if head is None else {**vars(head), "signature": head.signature(_secret())}
    print(json.dumps(shown))


def _anchor(text: str) -> Head:
    """The head `--head` gives, its signature checked with `COUNTERSIGN_SECRET`."""
    try:
        given = json.loads(text)
        head = Head(int(given["seq"]), int(given["event_id"]), str(given["hash"]))
        signature = str(given["signature"])
    except (ValueError, TypeError, KeyError):
        raise UsageError("--head must be the JSON `countersign audit head` printed") from None
    if not hmac.compare_digest(signature, head.signature(_secret())):
        raise UsageError("--head: its signature does not match COUNTERSIGN_SECRET")
    return head


def _verify(args: argparse.Namespace) -> int:
    """Print `{sealed, unsealed}` and exit 0, or the first problem on stderr and exit 1."""
    anchor = None if args.head is None else _anchor(args.head)
    verdict = _chain().verify(anchor)
    if verdict.problem is not None:
        print(f"countersign: audit chain broken: {verdict.problem}", file=sys.stderr)
        return 1
    print(json.dumps({"sealed": verdict.sealed, "unsealed": verdict.unsealed}))
    return 0
