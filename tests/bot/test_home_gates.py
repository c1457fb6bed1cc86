"""The admins' "Gates" section on the App Home tab over real HTTP: the policy's `admins` (here a
user group, resolved through the sandbox's usergroups.users.list) see per action class the numbers of
`countersign stats` for the last 30 days; anyone else does not; the numbers are computed at most
once a minute (kept in Redis) however many Home tabs are published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from countersign.router import home, inbox
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Outcome, Via
from tests.conftest import POLICY
from tests.helpers import anyone
from tests.helpers.builders import new_request, resume
from tests.helpers.modals import opened_home

LEAD = {"slack_user_id": "U0LEAD", "name": "lee"}
REFUNDS = (
    "*issue_refund*: 4 requests · 1 auto-approved · 1 approved · 0 edited · 1 rejected · 0 expired · "
    "1 pending · 0 dead-lettered · 0 escalated · median "
)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(POLICY + "admins: {usergroups: [S0FINLEADS]}\n")  # S0FINLEADS: U0LEAD
    return path


def _history(runtime: Runtime) -> None:
    """Refunds: one approved and one rejected by U0LEAD, one approved by a rule, one pending; an email."""
    store = runtime.store
    approved, rejected, auto = (new_request(store).id for _ in range(3))
    new_request(store)
    new_request(store, action="send_email")
    store.vote(approved, LEAD, Outcome.APPROVED, resume, refuse=anyone)  # type: ignore[arg-type]
    store.vote(rejected, LEAD, Outcome.REJECTED, resume, reason="too much", refuse=anyone)  # type: ignore[arg-type]
    store.decide(auto, Outcome.APPROVED, [], via=Via.POLICY, resume=resume, reason="auto_approve: rule")


def _home(sb: Sandbox, user: str) -> str:
    """Open `user`'s Home tab and wait for the published view, as JSON text."""
    return json.dumps(opened_home(sb, user), ensure_ascii=False)


def _gates(view: dict[str, Any]) -> str:
    return str(next(b for b in view["blocks"] if b["block_id"] == "gates-lines")["text"]["text"])


def test_an_admin_sees_the_gates_and_a_reviewer_who_is_not_one_does_not(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    _history(runtime)
    shown = _home(sb, "U0LEAD")
    assert "Gates (last 30 days)" in shown and REFUNDS in shown
    assert "rubber stamps 100%" in shown  # the approval was quick, no Details opened, no edit
    assert "*send_email*: 1 request · 0 auto-approved · 0 approved" in shown
    assert "median n/a, p95 n/a to decide · rubber stamps n/a" in shown  # the email: no human decision yet
    lead = "<@U0LEAD>: 2 decisions · 1 approval · 1 rejection · rubber stamps 100%"
    assert "Reviewers (last 30 days)" in shown and lead in shown
    alice = _home(sb, "U0ALICE")
    assert "Waiting for you" in alice and "Gates" not in alice and "issue_refund*" not in alice


def test_the_gates_are_computed_at_most_once_a_minute(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    _history(runtime)
    assert REFUNDS in _home(sb, "U0LEAD")
    assert 0 < runtime.redis.ttl(home.GATES_KEY) <= home.GATES_TTL_SECONDS
    new_request(runtime.store)
    assert _gates(home.view(runtime, "U0LEAD")).startswith(REFUNDS)  # kept: still 4 refunds
    runtime.redis.delete(home.GATES_KEY)  # as when the minute is over
    assert _gates(home.view(runtime, "U0LEAD")).startswith(
        REFUNDS.replace("4 requests", "5 requests").replace("1 pending", "2 pending")
    )


def test_a_full_home_with_many_reviewers_stays_within_slacks_100_blocks(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """A full queue (`HOME_LISTED` and more) and more reviewers than listed: the view still passes
    the sandbox's views.publish (at most 100 blocks a Home view,
    https://docs.slack.dev/reference/block-kit/blocks), the busiest reviewers first, the rest
    counted; an escalated request and the p95 show in the class's line."""
    sb, _ = sandbox
    store = runtime.store
    for _ in range(inbox.HOME_LISTED + 1):
        new_request(store, approvers=["U0LEAD"])
    reviewers = [f"U0R{n:02d}" for n in range(inbox.GATES_REVIEWERS + 3)]
    for n, user in enumerate(reviewers):
        for _ in range(1 + (n == 5)):  # U0R05 decided twice: listed first
            decided = new_request(store, approvers=[user], action="send_email").id
            store.vote(
                decided, {"slack_user_id": user, "name": user}, Outcome.APPROVED, resume, refuse=anyone
            )  # type: ignore[arg-type]
    escalated = new_request(store, action="send_email", level=1)
    store.decide(escalated.id, Outcome.APPROVED, [], via=Via.POLICY, resume=resume)

    view = json.loads(_home(sb, "U0LEAD"))
    assert len(view["blocks"]) <= 100
    people = next(b for b in view["blocks"] if b["block_id"] == "gates-reviewer-lines")["text"]["text"]
    lines = people.split("\n")
    assert (
        lines[0].startswith("<@U0R05>: 2 decisions · 2 approvals") and len(lines) == inbox.GATES_REVIEWERS + 1
    )
    assert lines[-1] == "… 3 more reviewers (`countersign stats`)"
    assert "· 1 escalated · median " in _gates(view) and ", p95 " in _gates(view)
