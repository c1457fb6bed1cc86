"""`countersign stats`: per action class and per reviewer, how requests ended, how long humans took,
the rubber-stamp share and the rejection reasons (`store/stats.py`), as a table or JSON."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from . import cli_args
from .config import load_settings
from .router.policy import load_policy
from .store import check_schema, create_db_engine
from .store.stats import OUTCOMES, QUICK_SECONDS, REVIEWER_OUTCOMES, Stats, stats
from .untrusted import json_text, one_line, sanitize

COLUMNS = ("requests", *OUTCOMES, "escalated")
"""An action class's count columns: the outcomes add up to `requests`; `escalated` counts those of
them that reached a later level."""
REVIEWER_COLUMNS = ("decisions", *REVIEWER_OUTCOMES, "escalated")
"""A reviewer's: the decisions taken part in, by outcome, and those at a later level."""


def add_parser(commands: Any) -> None:
    """Add `stats` to the subcommands `commands`."""
    command = commands.add_parser(
        "stats", help="decisions per action class and reviewer: outcomes, times, rubber stamps"
    )
    cli_args.add_window(command, "requests created", 30)
    command.add_argument("--action", help="only this action class")
    command.add_argument(
        "--quick-seconds",
        type=cli_args.seconds,
        default=QUICK_SECONDS,
        help=f"quicker approvals, no edit or Details opened, are rubber stamps (default {QUICK_SECONDS})",
    )
    command.add_argument("--json", action="store_true", help="print JSON instead of a table")
    command.set_defaults(handler=_stats)


def _stats(args: argparse.Namespace) -> None:
    """Print `{since, actions: {class: tally}, reviewers: {user: tally}}` (`Tally.as_dict`) with
    `--json` (`untrusted.json_text`: a reviewer's reject reason parses back exact, its controls escaped),
    else two tables and the reject reasons, each on one line and `sanitize`d."""
    since = cli_args.since(args, 30)
    settings = load_settings()
    engine = create_db_engine(settings.DATABASE_URL)
    check_schema(engine)
    found = stats(engine, since, args.action, args.quick_seconds)
    if args.action is not None and not found.actions:
        print(_nothing_of(args.action, since, settings.COUNTERSIGN_POLICY), file=sys.stderr)
    if args.json:
        shown = {
            "since": since.isoformat(),
            "actions": {name: tally.as_dict() for name, tally in sorted(found.actions.items())},
            "reviewers": {name: tally.as_reviewer_dict() for name, tally in sorted(found.reviewers.items())},
        }
        print(json_text(shown))
        return
    actions = {name: tally.as_dict() for name, tally in found.actions.items()}
    print(_table("action class", COLUMNS, actions))
    print(f"(requests = {' + '.join(OUTCOMES)}; escalated: of those, reached a later level)")
    print()
    reviewers = {name: tally.as_reviewer_dict() for name, tally in found.reviewers.items()}
    print(_table("reviewer", REVIEWER_COLUMNS, reviewers))
    _reasons(found)


def _nothing_of(action: str, since: datetime, policy: Path | None) -> str:
    """The line for `--action ACTION` when no request (nor dead-lettered intake message) of it was
    created since `since`: whether the policy (`COUNTERSIGN_POLICY`, when set) names it."""
    when = f"since {since:%Y-%m-%d %H:%M} UTC"
    if policy is None:
        return (
            f"countersign stats: no request used {action} {when} (COUNTERSIGN_POLICY unset: no policy to ask)"
        )
    if action in load_policy(policy).file.actions:
        return f"countersign stats: {action} is in the policy, and no request used it {when}"
    return (
        f"countersign stats: {action} is not an action class: the policy does not name it and no request "
        f"used it {when}"
    )


def _table(title: str, columns: tuple[str, ...], shapes: dict[str, dict[str, Any]]) -> str:
    """`shapes` (name to `Tally.as_dict` or `as_reviewer_dict`) as a text table of `columns`, the
    times and the rubber-stamp share."""
    header = [title, *columns, "median s", "p95 s", "rubber stamps"]
    rows = [header]
    for name, shown in sorted(shapes.items()):
        share = shown["rubber_stamp_share"]
        rows.append(
            [
                name,
                *(str(shown[column]) for column in columns),
                str(shown["median_seconds"] if shown["median_seconds"] is not None else "-"),
                str(shown["p95_seconds"] if shown["p95_seconds"] is not None else "-"),
                f"{share:.0%}" if share is not None else "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows
    )


def _reasons(found: Stats) -> None:
    """Print `rejected <class>: <count>: <reason>` per reject reason, most given first; a reason (a
    reviewer's text) on one line (`untrusted.one_line`), its controls and bidirectional overrides as
    U+FFFD (`untrusted.sanitize`)."""
    for name, tally in sorted(found.actions.items()):
        for reason, count in tally.reasons.most_common():
            print(f"rejected {name}: {count}: {sanitize(one_line(reason))}")
