"""`countersign report --html FILE`: the self-contained HTML report (`router/report.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from . import cli_args
from .config import load_settings
from .exceptions import UsageError
from .router.policy import load_policy
from .router.report import report_html
from .router.suggest import MIN_DECISIONS
from .store import check_schema, create_db_engine


def add_parser(commands: Any) -> None:
    """Add `report` to the subcommands `commands`."""
    report = commands.add_parser(
        "report", help="write one self-contained HTML report with charts (works offline)"
    )
    report.add_argument("--html", type=Path, required=True, metavar="FILE", help="where to write it")
    cli_args.add_window(report, "requests created", 30)
    report.add_argument(
        "--policy", type=Path, help="policy file for the suggestions (default COUNTERSIGN_POLICY)"
    )
    report.add_argument("--min-decisions", type=cli_args.positive, default=MIN_DECISIONS)
    report.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> None:
    settings = load_settings()
    engine = create_db_engine(settings.DATABASE_URL)
    check_schema(engine)
    path = args.policy or settings.COUNTERSIGN_POLICY
    policy = load_policy(path) if path is not None else None
    since = cli_args.since(args, 30)
    page = report_html(engine, since, policy, args.min_decisions)
    try:
        args.html.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--html: cannot write {args.html} ({exc.strerror})") from None
    print(f"countersign report: wrote {args.html} ({len(page) // 1024} KiB)")
