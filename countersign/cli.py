"""`countersign` command line (DESIGN.md, "CLI").

Every failure the user can fix ends in one line on stderr, `countersign: error: ...`, and an exit
status of one convention, argparse's (`exit_status`): `BAD_INPUT` (2) for what the user gave, `FAILED`
(1) for what failed at run time, `WAIT_TIMED_OUT` (3) when `wait` or `request --wait` gave up with the
request still undecided. A check whose answer is no says so with its own prefix (`countersign: policy
error: …`, `countersign: audit chain broken: …`, exit 1), and advice is `countersign: warning: …`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from . import cli_args, cli_audit, cli_demo, cli_policy, cli_report, cli_stats, cli_tokens
from .agent import ApprovalClient
from .config import Settings, load_settings
from .connections import Connections, migrate
from .exceptions import (
    ConfigError,
    CountersignError,
    IdempotencyConflict,
    InvalidRequest,
    PolicyError,
    RequestDeadLettered,
    SchemaOutOfDate,
    ServiceUnavailable,
    StackError,
    UsageError,
    WaitTimeout,
)
from .ports import port_is_free
from .schema import ALLOW_HTTP, ApprovalRequestV1, parse
from .untrusted import escaped, json_text, log_to_stderr

REQUEST_HELP = {
    "action": "required: the action class, e.g. issue_refund (the policy is keyed by it)",
    "summary": "required: one-line headline for the reviewer",
    "reason": "why the agent wants to do it",
    "requester": "required: the agent's identity",
    "on_behalf_of": "Slack user id of the human the agent acts for (who may not approve it)",
    "run_id": "required unless --idempotency-key: the key is requester:run-id:step",
    "step": "required unless --idempotency-key",
    "idempotency_key": "the idempotency key, instead of requester:run-id:step",
    "confidence": "a number from 0 to 1, for confidence-gated policies",
}
FAILED = 1
"""The exit status of a failure at run time, which the same command may not meet again: a database,
Redis or Slack that does not answer or fails, a database not migrated, a local stack that cannot
start, a request intake refused (dead-lettered); also a check whose answer is no (`policy check`, an
invalid file; `policy replay`; `audit verify`) and a reader of stdout gone (`| head`)."""
BAD_INPUT = 2
"""The exit status of bad input, as argparse exits on a bad flag: an argument, flag, setting, request,
policy or file that is missing or malformed, a request the policy or its idempotency key refuses, an
id that names nothing. The same command fails again until the input changes."""
WAIT_TIMED_OUT = 3
"""The exit status of `wait` and `request --wait` on a timeout (the request stays pending)."""
_EXIT_STATUS: tuple[tuple[tuple[type[Exception], ...], int], ...] = (
    ((UsageError, ConfigError, PolicyError, InvalidRequest, IdempotencyConflict, LookupError), BAD_INPUT),
    ((ServiceUnavailable, SchemaOutOfDate, StackError, RequestDeadLettered), FAILED),
    ((WaitTimeout,), WAIT_TIMED_OUT),
)
REQUEST_SETTINGS = """\
Required, as flags or as fields of --file: --action, --payload, --summary, --requester, --run-id and
--step (or --idempotency-key). Where the decision goes: --resume-queue and --resume-func, or
--resume-webhook, or neither (then read it with --wait, `countersign wait ID` or `countersign show ID`).

settings (environment variables):
  REDIS_URL            where the request is enqueued (default redis://localhost:6379/0)
  COUNTERSIGN_CLI_REDIS_TIMEOUT_SECONDS  default 3: a Redis that does not connect or answer within
                       it fails the command (exit 1)
  DATABASE_URL         where it is kept until intake (default sqlite:///countersign.db)
  COUNTERSIGN_POLICY   unset by default; set: an action class it does not name, or a payload that
                       would hide a key field, is refused here, before anything is sent
  COUNTERSIGN_WEBHOOK_ALLOW_HTTP  default false: --resume-webhook is https://, or http:// for
                       localhost, 127.0.0.1 or [::1]; true takes http:// on any host
Each is read from the environment, else from .run/.env in this directory (which `countersign run`
writes), else its default. The Redis and database used are printed on stderr.

exit status: 0 sent (with --wait: decided), 1 a failure at run time (Redis or the database does not
answer, intake refused it), 2 bad input (a flag, setting or request field, or a request the policy or
its idempotency key refuses), 3 --wait gave up with the request undecided
"""
RUN_SETTINGS = """\
settings (environment variables; none is required):
  PORT                  port of web (default 3000)
  REDIS_URL             unset: a private redis-server on a Unix socket in .run/redis/ (its data and
                        log there); set: that Redis, or a private one on its port if none answers
  DATABASE_URL          default sqlite:///countersign.db, migrated at start
  SLACK_BOT_TOKEN       unset: the local Slack sandbox; set: real Slack, which also needs
                        SLACK_SIGNING_SECRET (and SLACK_API_URL only to reach Slack elsewhere)
  COUNTERSIGN_POLICY    default examples/policy.yml
  COUNTERSIGN_SECRET    default: one kept in .run/secret
  COUNTERSIGN_WEBHOOK_SECRET  default: one kept in .run/webhook-secret (signs resume webhooks)
  COUNTERSIGN_LIBRARY_LOG_LEVEL  default WARNING here: no RQ or gunicorn line per job or click
REDIS_URL, DATABASE_URL, the two secrets and COUNTERSIGN_POLICY as chosen are written to .run/.env,
which the commands of a second terminal run in this directory read (the environment wins).
"""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `countersign` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    log_to_stderr()
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        status = args.handler(args) or 0
        sys.stdout.flush()  # here, so a reader gone early is caught below, not at interpreter exit
        return status
    except BrokenPipeError:
        return _reader_gone()
    except CountersignError as exc:
        return _fail(exc, exit_status(exc))
    except SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        return _fail(
            ServiceUnavailable(
                f"DATABASE_URL: database error ({first}); is it reachable and migrated "
                "(`countersign db upgrade`)?"
            ),
            FAILED,
        )
    except RedisError as exc:
        return _fail(ServiceUnavailable(f"REDIS_URL: Redis error ({exc}); is Redis running there?"), FAILED)
    except KeyboardInterrupt:
        return 130


def exit_status(exc: CountersignError) -> int:
    """The exit status of a command that raised `exc` (`BAD_INPUT`, `FAILED` or `WAIT_TIMED_OUT`);
    an error of no listed kind is a failure at run time."""
    return next((status for kinds, status in _EXIT_STATUS if isinstance(exc, kinds)), FAILED)


def _reader_gone() -> int:
    """Exit 1, quietly, when whoever reads stdout closed it early (`countersign audit export | head`):
    stdout is pointed at /dev/null so Python's last flush at exit finds no broken pipe either, as
    https://docs.python.org/3/library/signal.html#note-on-sigpipe says."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def _fail(exc: BaseException, status: int) -> int:
    """Print `countersign: error: <message>` on stderr, one line `untrusted.escaped` (it may quote
    what an agent or a reviewer wrote), and return `status`."""
    message = exc.args[0] if isinstance(exc, LookupError) and exc.args else str(exc)
    print(f"countersign: error: {escaped(str(message))}", file=sys.stderr)
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="countersign", description="Slack approval router for AI agents.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    web = commands.add_parser("web", help="serve Slack's requests and the HTTP API (/v1) over HTTP")
    web.add_argument(
        "--workers", type=cli_args.positive, default=2, help="gunicorn worker processes (default 2)"
    )
    web.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    web.set_defaults(handler=_web)
    commands.add_parser("socket", help="run the Bolt app over Socket Mode").set_defaults(handler=_socket)
    worker = commands.add_parser("worker", help="run the router worker (intake, relay sweep)")
    worker.add_argument("--burst", action="store_true", help="stop when the queue is empty")
    worker.set_defaults(handler=_worker)

    agent = commands.add_parser(
        "agent-worker", help="run an agent's RQ worker on its resume queues (JSON serializer, scheduler)"
    )
    agent.add_argument("queues", nargs="+", metavar="QUEUE", help="the agent's resume queue(s)")
    agent.add_argument("--burst", action="store_true", help="stop when the queues are empty")
    agent.set_defaults(handler=_agent_worker)

    run = commands.add_parser(
        "run",
        help="run everything locally (the Slack sandbox when no token is set)",
        description="Run everything locally: a private redis-server (with REDIS_URL unset always; with it\n"
        "set, when nothing answers there), the Slack sandbox (when SLACK_BOT_TOKEN is unset), web, worker\n"
        "and an agent worker. One a directory (a lock on .run/lock). No flag is required.",
        epilog=RUN_SETTINGS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--agent-queue",
        action="append",
        help="run the agent worker on this resume queue, repeatable (default: refund-agent, the example "
        "agent's)",
    )
    run.set_defaults(handler=_run)

    sandbox = commands.add_parser(
        "sandbox",
        help="serve the local Slack sandbox",
        description="Serve the local Slack sandbox: its Web API under /api/ and the page at /.",
        epilog="settings (environment variables):\n"
        "  SLACK_SIGNING_SECRET  required: the secret the sandbox signs what it sends to\n"
        "                        --interactivity-url with (the bot must have the same one)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sandbox.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sandbox.add_argument("--port", type=int, default=3001, help="port to listen on (default 3001)")
    sandbox.add_argument(
        "--interactivity-url",
        default="http://127.0.0.1:3000/slack/events",
        metavar="URL",
        help="where clicks, modal submits and slash commands are POSTed, signed: the bot's "
        "/slack/events (default http://127.0.0.1:3000/slack/events)",
    )
    sandbox.add_argument("--quiet", action="store_true", help="print no start line")
    sandbox.set_defaults(handler=_sandbox)

    request = commands.add_parser(
        "request",
        help="enqueue an approval request; prints its id",
        description="Enqueue an approval request (schema v1) and print its id on stdout.",
        epilog=REQUEST_SETTINGS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    request.add_argument("--file", type=Path, help="the request as a JSON file (flags override its fields)")
    for name, kind in cli_args.REQUEST_FLAGS.items():
        request.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, help=REQUEST_HELP[name])
    request.add_argument("--payload", help="required: the exact action to run, a JSON object")
    request.add_argument("--context", help="facts for the reviewer, a JSON object")
    request.add_argument("--resume-queue", help="RQ queue of the agent's worker (with --resume-func)")
    request.add_argument("--resume-func", help="import path of the resume function, e.g. pkg.mod.func")
    request.add_argument(
        "--resume-webhook", help="instead of queue and func: the https:// URL the decision is POSTed to"
    )
    request.add_argument(
        "--wait",
        type=cli_args.wait_seconds,
        metavar="S",
        help="then wait up to S seconds and print the decision as JSON instead of the id",
    )
    _with_grant(request)
    request.set_defaults(handler=_request)

    wait = commands.add_parser("wait", help="print the decision as JSON once made (exit 3: not yet)")
    wait.add_argument("request_id")
    wait.add_argument(
        "--timeout",
        type=cli_args.wait_seconds,
        default=300.0,
        metavar="S",
        help="seconds to wait at most, 0 or more (0: look once; default 300)",
    )
    _with_grant(wait)
    wait.set_defaults(handler=_wait)

    show = commands.add_parser("show", help="print a request, its status, decision and audit trail as JSON")
    show.add_argument("request_id")
    _with_grant(show)
    show.set_defaults(handler=_show)

    pending = commands.add_parser("pending", help="print the requests waiting for one approver as JSON")
    pending.add_argument("--approver", required=True, help="the reviewer's Slack user id, e.g. U0123ABC")
    pending.add_argument(
        "--limit", type=int, default=50, help="at most this many, soonest deadline first (default 50)"
    )
    pending.set_defaults(handler=_pending)

    policy = commands.add_parser("policy", help="policy file").add_subparsers(
        required=True, metavar="COMMAND"
    )
    cli_policy.add_parsers(policy)

    cli_tokens.add_parsers(commands)
    cli_demo.add_parser(commands)
    cli_audit.add_parsers(commands)
    cli_stats.add_parser(commands)
    cli_report.add_parser(commands)

    db = commands.add_parser("db", help="database schema").add_subparsers(required=True, metavar="COMMAND")
    db.add_parser("upgrade", help="apply migrations up to the latest").set_defaults(handler=_db_upgrade)
    return parser


def _with_grant(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--with-grant", action="store_true", help="also print the grant's signature (it lets the payload run)"
    )


def _request(args: argparse.Namespace) -> None:
    """Enqueue the request and print its id on stdout, then the Redis and database it went to on
    stderr. A bad setting or request (missing flags are named as flags, in one line), an action
    class `COUNTERSIGN_POLICY` (when set) does not name (`UnknownAction`) or a payload that would
    hide a key field or breaks a field the policy declares editable (`Policy.admit`), as intake
    would refuse them, or a database or Redis that cannot be used,
    raises before anything is sent."""
    settings = load_settings()
    data = cli_args.request_from_args(args)
    if missing := cli_args.missing_flags(data):
        raise InvalidRequest(f"missing {', '.join(missing)}: required, as flags or as fields of --file")
    allow_http = settings.COUNTERSIGN_WEBHOOK_ALLOW_HTTP
    request = parse(ApprovalRequestV1, data, {ALLOW_HTTP: allow_http})
    if settings.COUNTERSIGN_POLICY is not None:
        from .router.policy import load_policy

        load_policy(settings.COUNTERSIGN_POLICY).admit(request.action, request.payload)
    connections = Connections.for_cli(settings)
    connections.check()
    client = ApprovalClient(connections.redis, connections.store, allow_http_webhooks=allow_http)
    request_id = client.request(request)
    print(
        f"countersign request: sent to Redis at {settings.shown('REDIS_URL')}, "
        f"database at {settings.shown('DATABASE_URL')}",
        file=sys.stderr,
    )
    if args.wait is None:
        print(request_id)
    else:
        _print_decision(client.wait(request_id, timeout=args.wait).to_json(), "request", args.with_grant)


def _wait(args: argparse.Namespace) -> None:
    """Print the request's decision as JSON once decided (`ApprovalClient.wait`), within `--timeout`
    seconds, or raise `WaitTimeout` (exit `WAIT_TIMED_OUT`), the request still pending."""
    connections = Connections.for_cli(load_settings())
    connections.check()
    client = ApprovalClient(connections.redis, connections.store)
    _print_decision(client.wait(args.request_id, timeout=args.timeout).to_json(), "wait", args.with_grant)


def _print_decision(decision: dict[str, Any], command: str, with_grant: bool) -> None:
    """Print a decision (`Decision.to_json()`) as JSON (`_print_json`), its grant's signature hidden
    unless `with_grant`."""
    _hide_signature(decision, command, with_grant)
    _print_json(decision)


def _hide_signature(decision: dict[str, Any] | None, command: str, with_grant: bool) -> None:
    """Replace the grant's signature by a note naming `countersign <command> --with-grant`, unless
    `with_grant`: it lets the approved payload run, so it stays out of terminals and pasted logs."""
    grant = (decision or {}).get("grant")
    if grant and not with_grant:
        grant["signature"] = f"hidden (countersign {command} --with-grant prints it)"


def _show(args: argparse.Namespace) -> None:
    """Print the request's state, the grant's signature only with `--with-grant` (`_hide_signature`);
    a pending request without a card yet says when its card is expected."""
    from .router.pace import expected_card

    connections = Connections.for_cli(load_settings())
    connections.check_database(read_only=True)  # an unusable database says so, whatever the id
    state = ApprovalClient(connections.redis, connections.store).get(args.request_id)
    shown = state.as_dict()
    _hide_signature(shown["decision"], "show", args.with_grant)
    row = connections.store.get(state.request_id) if state.status == "pending" and not state.card else None
    if row is not None:
        shown["card"] = expected_card(connections.redis, row)
    _print_json(shown)


def _print_json(data: Any) -> None:
    """Print `data` as indented JSON for a terminal (`untrusted.json_text`): a bidirectional override
    or other control character an agent wrote is escaped as `\\uXXXX`, never raw, so it cannot
    reorder or hide what the operator reads, and the JSON parses back to exactly `data` (a payload
    copied from it still matches its grant)."""
    print(json_text(data))


def _pending(args: argparse.Namespace) -> None:
    """Print `[{request_id, action, summary, channel, card_ts, level, required_approvals,
    created_at, expires_at}]`: the requests the approver may decide now, the very list of App Home
    and `/countersign pending` (`router.review.queue`: not their own request, not one they voted on
    or that timed out), soonest deadline first; times are ISO 8601 UTC (`expires_at` null: no
    deadline). Raises `UsageError` (exit 2) for an `--approver` that is no Slack user id."""
    from .router.review import queue
    from .schema import SLACK_USER_ID, iso
    from .store import Store

    if not SLACK_USER_ID.matches(args.approver):  # as `request --on-behalf-of` is checked
        raise UsageError(f"--approver: should be {SLACK_USER_ID.allowed}")
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    rows = queue(Store.from_url(load_settings().DATABASE_URL), args.approver, args.limit)
    listing = [
        {
            "request_id": row.id,
            "action": row.action,
            "summary": row.summary,
            "channel": row.channel,
            "card_ts": row.card_ts,
            "level": row.level,
            "required_approvals": row.required_approvals,
            "created_at": iso(row.created_at),
            "expires_at": iso(row.expires_at),
        }
        for row in rows
    ]
    _print_json(listing)


def _db_upgrade(_args: argparse.Namespace) -> None:
    migrate(load_settings())
    print("database is at the latest schema")


def _web(args: argparse.Namespace) -> None:
    from .bot.server import serve

    settings = load_settings()
    settings.require(
        "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "COUNTERSIGN_SECRET", needed_by="`countersign web`"
    )
    _policy_at_start(settings)
    Connections.for_cli(settings).check()
    if not port_is_free(args.host, settings.PORT):
        raise ConfigError(f"PORT: {settings.PORT} is already in use on {args.host}")
    serve(settings, workers=args.workers, host=args.host)  # gunicorn's workers inherit the policy loaded


def _socket(_args: argparse.Namespace) -> None:
    from .bot.socket_mode import serve

    settings = load_settings()
    _policy_at_start(settings)
    serve(settings)


def _policy_at_start(settings: Settings) -> None:
    """Load `COUNTERSIGN_POLICY`, when set, before serving (`reload.at_start`): the version this
    process keeps if the file later breaks. Raises `ConfigError` naming it when it is invalid."""
    from .router import reload

    if settings.COUNTERSIGN_POLICY is not None:
        reload.at_start(settings.COUNTERSIGN_POLICY)


def _worker(args: argparse.Namespace) -> None:
    from .router.worker import run_worker

    run_worker(burst=args.burst)


def _agent_worker(args: argparse.Namespace) -> None:
    from .agent.worker import run_agent_worker

    run_agent_worker(load_settings(), args.queues, burst=args.burst)


def _run(args: argparse.Namespace) -> int:
    from .stack import run_stack

    settings = load_settings(_env_file=None)  # the environment alone: `.run/.env` is what it writes
    return run_stack(settings, agent_queues=args.agent_queue or ["refund-agent"])


def _sandbox(args: argparse.Namespace) -> None:
    from .sandbox.server import run

    settings: Settings = load_settings()
    settings.require("SLACK_SIGNING_SECRET", needed_by="`countersign sandbox`")
    assert settings.SLACK_SIGNING_SECRET is not None
    if not port_is_free(args.host, args.port):
        raise UsageError(f"--port: {args.port} is already in use on {args.host}")
    run(args.host, args.port, settings.SLACK_SIGNING_SECRET, args.interactivity_url, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(main())
