"""`countersign token create | list | revoke`: the per-agent API tokens of the HTTP API (`/v1`).

A token's secret is printed once, by `create`; the database keeps its SHA-256 (`store/tokens.py`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import ValidationError

from .config import load_settings
from .connections import Connections
from .exceptions import UnknownAction, UnknownToken, UsageError
from .schema import ACTION_CLASS, QueueResume, check_requester, iso, one_line
from .store.tokens import Tokens
from .untrusted import json_text


def add_parsers(commands: Any) -> None:
    """Add `token create`, `token list` and `token revoke` to the subcommands `commands`."""
    token = commands.add_parser("token", help="API tokens of the HTTP API (/v1)").add_subparsers(
        required=True, metavar="COMMAND"
    )
    create = token.add_parser(
        "create", help="create a token; prints its secret once on stdout (only its SHA-256 is kept)"
    )
    create.add_argument("--requester", required=True, help="the agent's identity: its requests' requester")
    create.add_argument(
        "--actions", required=True, help="the action classes it may request, comma-separated, e.g. a,b"
    )
    create.add_argument(
        "--resume-queue",
        action="append",
        default=[],
        metavar="QUEUE",
        help="an RQ queue its requests may name as their resume queue (repeatable); without one, "
        "its requests may resume by webhook or not at all",
    )
    create.set_defaults(handler=_token_create)
    token.add_parser("list", help="print every token (never its secret) as JSON").set_defaults(
        handler=_token_list
    )
    revoke = token.add_parser("revoke", help="revoke a token: its next API call gets 401")
    revoke.add_argument("token_id", help="the token's id, as `token list` prints it")
    revoke.set_defaults(handler=_token_revoke)


def _tokens() -> Tokens:
    connections = Connections.for_cli(load_settings())
    connections.check()
    return Tokens(connections.store.engine)


def _token_create(args: argparse.Namespace) -> None:
    """Print the new token's secret on stdout, and on stderr its id and scope."""
    requester = args.requester
    actions = [action.strip() for action in args.actions.split(",") if action.strip()]
    if not 1 <= len(requester) <= 128 or "\x00" in requester:
        raise UsageError("--requester must be 1 to 128 characters")
    try:
        check_requester(requester)
    except ValueError as hidden:
        raise UsageError(f"--requester {hidden}") from None
    bad = [action for action in actions if not ACTION_CLASS.matches(action)]
    if bad or not actions:
        raise UsageError(
            f"--actions: each action class should be {ACTION_CLASS.allowed}; got {args.actions!r}"
        )
    _must_be_in_the_policy(actions)
    queues = sorted(set(args.resume_queue))
    for queue in queues:
        try:
            QueueResume(queue=queue, func="agent.resume")
        except ValidationError as refused:
            raise UsageError(f"--resume-queue: {one_line(refused).removeprefix('queue: ')}") from None
    token = _tokens().create_token(requester, actions, queues)
    print(token.secret)
    scope = ", ".join(sorted(set(actions)))
    reach = f"resume queues {', '.join(queues)}" if queues else "no resume queue (webhook or none)"
    print(
        f"countersign token: {token.id} acts as requester {requester!r} for {scope}, with {reach}; "
        "the secret above is shown once (only its SHA-256 is kept)",
        file=sys.stderr,
    )


def _must_be_in_the_policy(actions: list[str]) -> None:
    """Raise `UsageError` for the first of `actions` that `COUNTERSIGN_POLICY` (when set) refuses as
    unknown (`Policy.must_know`), as `countersign request` and intake would refuse its requests: a
    token for a typo would be refused every request. No flag overrides it: add the action class to
    the policy first (a class no agent sends yet costs nothing), then create the token."""
    settings = load_settings()
    if settings.COUNTERSIGN_POLICY is None:
        return
    from .router.policy import load_policy

    policy = load_policy(settings.COUNTERSIGN_POLICY)
    for action in actions:
        try:
            policy.must_know(action)
        except UnknownAction as unknown:
            raise UsageError(f"--actions: {unknown}") from None


def _token_list(_args: argparse.Namespace) -> None:
    """Print `[{id, requester, actions, resume_queues, created_at, revoked_at}]`, oldest first (times
    ISO 8601 UTC; `resume_queues` null for a token from before they were kept: any queue but
    countersign's own)."""
    listing = [
        {
            "id": row.id,
            "requester": row.requester,
            "actions": row.actions,
            "resume_queues": row.resume_queues,
            "created_at": iso(row.created_at),
            "revoked_at": iso(row.revoked_at),
        }
        for row in _tokens().tokens()
    ]
    print(json_text(listing))


def _token_revoke(args: argparse.Namespace) -> None:
    if not _tokens().revoke_token(args.token_id):
        raise UnknownToken(f"no live token {args.token_id!r} (`countersign token list` lists them)")
    print(f"token {args.token_id} revoked")
