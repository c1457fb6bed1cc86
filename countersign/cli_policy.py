"""`countersign policy check | replay | suggest`: a policy file checked (its routes, a dry run of
one request, whether a new version may replace it), a candidate policy run over the recorded
requests (`router/replay.py`), and the auto-approve rules the recorded human decisions support
(`router/suggest.py`). Replay and suggest only read the database; check needs none."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from . import cli_args
from .config import load_settings
from .exceptions import PolicyError, PolicyUnreadable, UsageError
from .router.dryrun import dry_run
from .router.policy import load_policy
from .router.replay import replay
from .router.suggest import MIN_DECISIONS, suggest
from .store import check_schema, create_db_engine
from .store.history import recorded
from .untrusted import escaped, sanitize


def add_parsers(policy: Any) -> None:
    """Add `check`, `replay` and `suggest` to the `policy` subcommands `policy`."""
    check = policy.add_parser("check", help="validate a policy file; print its routes or its errors")
    check.add_argument("file", type=Path)
    check.add_argument(
        "new", type=Path, nargs="?", help="a new version of FILE: may it replace FILE, and what it weakens"
    )
    check.add_argument(
        "--request", help="dry-run this request (a JSON object, as `request --file` takes) through the policy"
    )
    check.set_defaults(handler=_check)
    run = policy.add_parser(
        "replay",
        help="run the recorded requests through a candidate policy (exit 1: it lets a rejection through)",
    )
    run.add_argument("candidate", type=Path, metavar="CANDIDATE.yml")
    cli_args.add_window(run, "requests created", 30)
    run.set_defaults(handler=_replay)
    advise = policy.add_parser(
        "suggest", help="the auto-approve rule each action class's human decisions support"
    )
    advise.add_argument(
        "--min-decisions",
        type=cli_args.positive,
        default=MIN_DECISIONS,
        help=f"human decisions needed in range (default {MIN_DECISIONS})",
    )
    cli_args.add_window(advise, "decisions on requests created", 90)
    advise.add_argument(
        "--policy", type=Path, help="the policy file to compare with (default COUNTERSIGN_POLICY)"
    )
    advise.set_defaults(handler=_suggest)


def _check(args: argparse.Namespace) -> int:
    """Print the policy's routes, or with `--request` a dry run of that request through it; with NEW,
    first whether NEW may replace FILE and how it weakens it (then NEW is the policy shown), and on
    stderr the reload's warnings when NEW changes FILE but keeps its `version`, or lowers it. Returns 1
    for a policy that is not valid (the check's answer, `countersign: policy error: …`); a file it
    cannot read raises `PolicyUnreadable` (exit 2)."""
    request = None if args.request is None else cli_args.json_arg("--request", args.request)
    try:
        policy = load_policy(args.file)
        if args.new is not None:
            from .router.policydiff import successor, version_lowered, version_not_bumped

            old, policy = policy, load_policy(args.new)
            print(sanitize(successor(old, policy)))
            for warning in (
                version_not_bumped(old, policy),
                version_lowered(old.version, "in force", policy),
            ):
                if warning is not None:
                    print(f"countersign: warning: {escaped(warning)}", file=sys.stderr)
        print(sanitize(policy.summary() if request is None else dry_run(policy, request)))
    except PolicyUnreadable:
        raise  # no policy to judge: bad input, exit 2, as any command given a file that is not there
    except PolicyError as exc:
        print(f"countersign: policy error: {escaped(str(exc))}", file=sys.stderr)
        return 1
    return 0


def _engine() -> Engine:
    engine = create_db_engine(load_settings().DATABASE_URL)
    check_schema(engine)
    return engine


def _replay(args: argparse.Namespace) -> int:
    """Print what the candidate would have done; exit 1 when it would have auto-approved a request
    a human rejected. Nothing is written."""
    candidate = load_policy(args.candidate)
    found = replay(candidate, recorded(_engine(), cli_args.since(args, 30)))
    print(f"{args.candidate}: policy version {candidate.version}")
    print("\n".join(found.lines()))
    return 1 if found.lets_through_a_rejection else 0


def _suggest(args: argparse.Namespace) -> None:
    """Print one suggestion (a diff against the policy's entry) or one reason per action class."""
    path = args.policy or load_settings().COUNTERSIGN_POLICY
    if path is None:
        raise UsageError("policy suggest needs --policy FILE or COUNTERSIGN_POLICY")
    policy = load_policy(path)
    found = suggest(policy, recorded(_engine(), cli_args.since(args, 90)), args.min_decisions)
    print(f"--- {policy.path} (policy version {policy.version})")
    print(f"+++ suggested from the human decisions (at least {args.min_decisions} in range)")
    for suggestion in found:
        print("\n".join(suggestion.lines(policy)))
    if not found:
        print("# nothing suggested: no human decisions recorded in that time")
