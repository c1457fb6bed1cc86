"""`countersign demo-history`: a realistic, clearly marked demo history of approval requests.

Every request is routed and gated by a policy file (`DEMO_POLICY`, which describes the demo's
channels, reviewers and rules, so replaying it over the demo history changes nothing), goes through
the store's own transitions (`Store.create`, `decide`, `vote`, `escalate`, `expire`), as the router
makes them, and is then moved into the past (`store.history.backdate`). Demo data is marked three
ways: its requester and idempotency keys start with `demo-`, its context says `{"demo": true}`, and
each request has a `demo_data` audit event.
No audit event is sealed into the audit chain while it runs (`AuditChain.paused`, PostgreSQL; on
SQLite stop the router worker first), since each request's events are moved in time once written.
The command refuses a database that holds any other request unless `--force`, so demo decisions
never mix silently with real ones.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ulid import ULID

from . import cli_args
from .config import load_settings
from .decision import decision_of
from .exceptions import UnknownAction, UsageError
from .router.gate import Gate
from .router.jobs import resume_job_id
from .router.policy import Policy, load_policy
from .schema import payload_sha256
from .store import (
    Decider,
    Outcome,
    Request,
    ResumeEvent,
    Store,
    TimeoutResult,
    Via,
    check_schema,
)
from .store.chain import AuditChain
from .store.history import DEMO_PREFIX, backdate, has_real_requests, make_due

REQUESTER = DEMO_PREFIX + "agent"
ACTOR = "countersign demo-history"
REVIEWERS: list[Decider] = [
    {"slack_user_id": "U0DEMOLEE", "name": "demo-lee"},
    {"slack_user_id": "U0DEMOALICE", "name": "demo-alice"},
    {"slack_user_id": "U0DEMOSAM", "name": "demo-sam"},
]
DEMO_POLICY = "examples/demo-policy.yml"
"""The policy the demo history is routed and gated by (its channels, reviewers, auto-approve rule,
escalation), relative to the working directory: a clone's root."""
NEXT = (
    "{cs} audit seal && {cs} audit verify",
    "{cs} stats --since 60d",
    f"{{cs}} policy suggest --policy {DEMO_POLICY} --since 60d",
    f"{{cs}} policy replay {DEMO_POLICY} --since 60d",
    f"{{cs}} report --html demo-report.html --policy {DEMO_POLICY} --since 60d",
)
"""The commands `demo-history` suggests trying next, `{cs}` the command as it was run (`_invoked`)."""
CLASSES = {"issue_refund": 0.6, "send_email": 0.3, "delete_customer": 0.1}
"""The demo's action classes and their share of requests."""


@dataclass
class Made:
    """What `generate` made: how many requests, by how they ended."""

    requests: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.requests += 1
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


def add_parser(commands: Any) -> None:
    """Add `demo-history` to the subcommands `commands`."""
    demo = commands.add_parser(
        "demo-history",
        help="write a demo history of requests (requester demo-agent, audited demo_data)",
        description="Write DAYS days of demo approval requests through the store's transitions, "
        "marked as demo data. Refuses a database holding other requests unless --force.",
    )
    demo.add_argument("--days", type=cli_args.positive, default=60, help="days of history (default 60)")
    demo.add_argument("--per-day", type=cli_args.positive, default=20, help="requests a day (default 20)")
    demo.add_argument("--seed", type=int, default=18, help="random seed: the same seed, the same history")
    demo.add_argument("--force", action="store_true", help="also into a database with real requests")
    demo.add_argument(
        "--policy", default=DEMO_POLICY, help=f"the policy the demo is decided under (default {DEMO_POLICY})"
    )
    demo.set_defaults(handler=_demo_history)


def _demo_history(args: argparse.Namespace) -> None:
    settings = load_settings()
    store = Store.from_url(settings.DATABASE_URL)  # the database only: demo data needs no Redis
    check_schema(store.engine)
    if not args.force and has_real_requests(store.engine):
        raise UsageError(
            "the database holds requests that are not demo data; demo-history adds to it only with --force"
        )
    policy = _demo_policy(args.policy)
    rng, secret = random.Random(args.seed), settings.COUNTERSIGN_SECRET or ""
    with AuditChain(store.engine).paused():  # each request moves into the past before it is sealed
        made = generate(store, policy, args.days, args.per_day, rng, secret)
    shown = ", ".join(f"{n} {outcome}" for outcome, n in sorted(made.outcomes.items()))
    print(f"countersign demo-history: {made.requests} demo requests over {args.days} days ({shown})")
    print(f"decided under {args.policy} (policy version {policy.version}); try next:")
    print("\n".join(f"  {command.format(cs=_invoked())}" for command in NEXT))
    if args.force:
        print("countersign demo-history: demo data is marked requester demo-agent", file=sys.stderr)


def _invoked() -> str:
    """The `countersign` command as the user ran it (`.venv/bin/countersign`, as the README does,
    or `countersign` on the PATH); `countersign` when run otherwise (`python -m countersign.cli`)."""
    return sys.argv[0] if Path(sys.argv[0]).name == "countersign" else "countersign"


def _demo_policy(path: str) -> Policy:
    """The policy file at `path`, which must route every demo action class to named users (the demo
    resolves no user groups). Raises `PolicyError` for a file that does not load, `UsageError`
    for one that does not fit the demo."""
    policy = load_policy(path)
    for action in CLASSES:
        try:
            levels = policy.route(action).rules.levels
        except UnknownAction as exc:
            raise UsageError(f"{path} cannot route the demo's action classes: {exc}") from None
        if any(level.usergroups or not level.users for level in levels):
            raise UsageError(f"{path}: the demo needs users (not user groups) at every level of {action}")
    return policy


def generate(store: Store, policy: Policy, days: int, per_day: int, rng: random.Random, secret: str) -> Made:
    """Write `per_day` demo requests for each of the last `days` days (UTC), drawn from `rng`,
    routed and gated by `policy`; the grants of their decisions are signed with `secret`. Returns
    what was made."""
    made = Made()
    now = datetime.now(UTC)
    for day in range(days, 0, -1):
        for _ in range(per_day):
            created = now - timedelta(days=day) + timedelta(seconds=rng.uniform(0, 86_400 - 3_600))
            action = rng.choices(list(CLASSES), weights=list(CLASSES.values()))[0]
            made.count(_one(store, policy, rng, action, created, secret))
    return made


def _one(
    store: Store, policy: Policy, rng: random.Random, action: str, created: datetime, secret: str
) -> str:
    """Make, decide and backdate one demo request of `action`; returns how it ended."""
    amount = round(min(5_000.0, rng.lognormvariate(4.6, 1.0)), 2)
    row, gate = _create(store, policy, action, amount)
    decided = created + timedelta(seconds=_decision_seconds(rng, action))

    def resume(request: Request) -> ResumeEvent:
        return ResumeEvent(resume_job_id(request.id), decision_of(request, secret).to_json())

    reviewer = _reviewer(rng.choice(row.approvers))
    roll = rng.random()
    if not gate.review:
        store.decide(row.id, Outcome.APPROVED, [], via=Via.POLICY, resume=resume, reason=gate.reason)
        outcome, decided = "auto_approved", created
    elif roll < _rejection_odds(action, amount):
        why = {"issue_refund": "amount above the customer's charge", "send_email": "wrong recipient"}
        reason = why.get(action, "customer has open invoices")
        store.vote(row.id, reviewer, Outcome.REJECTED, resume, reason=reason, refuse=lambda _: None)
        outcome = "rejected"
    elif roll > 0.97 and row.rules.level(0).on_timeout == "deny":
        make_due(store.engine, row.id)
        stored = store.get(row.id)
        assert stored is not None
        store.expire([(stored, TimeoutResult.DENY)], resume)
        outcome = "expired"
    else:
        outcome = _approve(store, row, reviewer, resume, amount, roll)
    backdate(store.engine, row.id, created, decided)
    return outcome


def _approve(store: Store, row: Request, reviewer: Decider, resume: Any, amount: float, roll: float) -> str:
    """A reviewer's approval: some refunds above 500 lowered in the Edit modal, some deletions
    escalated first."""
    escalate = row.rules.level(0).on_timeout == "escalate" and roll > 0.85
    if escalate:
        make_due(store.engine, row.id)
        stored = store.get(row.id)
        assert stored is not None
        leads = row.rules.level(1).users
        store.escalate(stored, row.rules.level(1).channel, leads)
        reviewer = _reviewer(leads[0])
    if row.action == "issue_refund" and amount > 500 and roll > 0.9:
        lowered = f"{amount * 0.8:.2f}"
        edits = [{"field": "amount", "from": f"{amount:.2f}", "to": lowered}]
        store.decide(
            row.id,
            Outcome.APPROVED,
            [reviewer],
            via=Via.SLACK,
            resume=resume,
            approved_payload={**row.payload, "amount": lowered},
            edits=edits,  # type: ignore[arg-type]
            refuse=lambda _: None,
        )
        return "edited"
    store.vote(row.id, reviewer, Outcome.APPROVED, resume, refuse=lambda _: None)
    return "escalated" if escalate else "approved"


def _reviewer(user_id: str) -> Decider:
    """The demo reviewer `user_id`, by name when it is one of `REVIEWERS`."""
    named: Decider = {"slack_user_id": user_id, "name": user_id}
    return next((r for r in REVIEWERS if r["slack_user_id"] == user_id), named)


def _rejection_odds(action: str, amount: float) -> float:
    """How likely a human rejects: refunds up to 500 never, above 500 often; emails rarely."""
    if action == "issue_refund":
        return 0.0 if amount <= 500 else 0.25
    return 0.05 if action == "send_email" else 0.2


def _decision_seconds(rng: random.Random, action: str) -> float:
    """How long a reviewer takes: emails are often approved in seconds, deletions take minutes."""
    scale = {"send_email": 2.5, "issue_refund": 5.0}.get(action, 6.0)
    return min(3_000.0, rng.lognormvariate(scale, 1.0))


def _create(store: Store, policy: Policy, action: str, amount: float) -> tuple[Request, Gate]:
    """Store one demo request of `action` as intake would under `policy`, without Slack: its route,
    rules and quorum, and the gate's answer (returned, with the request)."""
    request_id = str(ULID())
    payload: dict[str, Any] = {"amount": f"{amount:.2f}", "currency": "USD", "customer": "demo-customer"}
    if action == "send_email":
        payload = {"to": "customer@example.com", "subject": "Your refund"}
    elif action == "delete_customer":
        payload = {"customer": "demo-customer"}
    route = policy.route(action)
    gate = policy.gate(
        action, {"payload": payload, "confidence": None, "requester": REQUESTER, "action": action}
    )
    row, _ = store.create(
        {
            "id": request_id,
            "idempotency_key": f"{DEMO_PREFIX}{request_id}",
            "action": action,
            "payload": payload,
            "payload_sha256": payload_sha256(payload),
            "summary": f"demo {action.replace('_', ' ')}",
            "reason": "demo data",
            "context": {"demo": True},
            "requester": REQUESTER,
            "on_behalf_of": None,
            "run_id": "demo",
            "step": request_id,
            "confidence": None,
            "resume_queue": None,
            "resume_func": None,
            "channel": route.channel,
            "approvers": route.rules.level(0).users,
            "rules": route.rules.model_copy(update={"review_rule": gate.reason}),
            "required_approvals": gate.approvals,
            "review_reason": gate.says,
            "policy_version": policy.version,
            "policy_sha256": policy.sha256,
        }
    )
    store.record(
        row.id, "demo_data", ACTOR, note="generated by countersign demo-history; not a real decision"
    )
    return row, gate
