"""`countersign audit seal | verify | head | export`: the tamper-evident audit chain (`store/chain.py`).

`verify` exits 1 naming the first event edited, deleted, inserted or reordered (or a cut tail,
against a head given with `--head`); `head` prints the last link signed with `COUNTERSIGN_SECRET`,
to be kept outside the database.
"""

from __future__ import annotations

import argparse
import csv
import hmac
import json
import sys
from typing import Any

from sqlalchemy import Engine

from . import cli_args
from .config import load_settings
from .exceptions import UsageError
from .router.texts import counted
from .schema import iso
from .store import check_schema, create_db_engine
from .store.chain import AuditChain, Head
from .store.history import export
from .untrusted import escaped, json_text

COLUMNS = (
    "id",
    "at",
    "request_id",
    "action",
    "event",
    "actor",
    "decision",
    "edits",
    "reason",
    "policy_version",
    "hash",
    "detail",
)


def add_parsers(commands: Any) -> None:
    """Add `audit seal`, `audit verify` and `audit head` to the subcommands `commands`."""
    audit = commands.add_parser("audit", help="the tamper-evident audit chain").add_subparsers(
        required=True, metavar="COMMAND"
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
    export = audit.add_parser("export", help="stream audit events as JSON lines or CSV, in constant memory")
    cli_args.add_window(export, "events", None, until=True)
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="default jsonl")
    export.add_argument("--action", help="only requests of this action class")
    export.set_defaults(handler=_export)


def _engine() -> Engine:
    """The database of `DATABASE_URL`, at the latest schema (the audit commands need no Redis)."""
    engine = create_db_engine(load_settings().DATABASE_URL)
    check_schema(engine)
    return engine


def _chain() -> AuditChain:
    return AuditChain(_engine())


def _secret() -> str:
    settings = load_settings()
    settings.require("COUNTERSIGN_SECRET", needed_by="`countersign audit`")
    return settings.COUNTERSIGN_SECRET or ""


def _seal(_args: argparse.Namespace) -> None:
    chain, total = _chain(), 0
    while sealed := chain.seal():
        total += sealed
    print(f"countersign audit: {counted(total, 'event')} sealed")


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
        print(f"countersign: audit chain broken: {escaped(verdict.problem)}", file=sys.stderr)
        return 1
    print(json.dumps({"sealed": verdict.sealed, "unsealed": verdict.unsealed}))
    return 0


def _export(args: argparse.Namespace) -> None:
    """Write one line per audit event on stdout (`store.history.export`): JSON lines, or CSV with a
    header whose `edits` and `detail` cells are JSON (`untrusted.json_text`: controls and bidirectional
    characters escaped, losslessly; CSV's text cells exact); times ISO 8601 UTC. Raises `UsageError` when
    `--since` is not before `--until`."""
    since, until = cli_args.window(args.since, args.until, days=0)
    rows = export(_engine(), since, until, args.action)
    out = sys.stdout
    if args.format == "csv":
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for row in rows:
            shown = {
                **row,
                "at": iso(row["at"]),
                "edits": _json(row["edits"]),
                "detail": _json(row["detail"]),
            }
            writer.writerow([shown[column] for column in COLUMNS])
        return
    for row in rows:
        out.write(json_text({**row, "at": iso(row["at"])}, indent=None) + "\n")


def _json(value: Any) -> str:
    return "" if value is None else json_text(value, indent=None)
