"""The `/countersign` command over real HTTP: the sandbox posts Slack's signed form to the bot,
which acks at once and answers through the command's `response_url`."""

from __future__ import annotations

import urllib.parse
from typing import Any

from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Outcome
from tests.helpers import wait_for
from tests.helpers.builders import age, new_request, post_card
from tests.helpers.signed import post_signed

LEAD = {"slack_user_id": "U0LEAD", "name": "lee"}


def _answer(sb: Sandbox, user: str, text: str) -> dict[str, Any]:
    """Type `/countersign text` as `user` in C0GENERAL; the ack is an empty 200, and the answer the
    ephemeral message that comes through the response_url."""
    before = len(sb.ephemerals(user))
    assert sb.run_command(user, "C0GENERAL", text) == (200, "")
    answers = wait_for(lambda: sb.ephemerals(user)[before:], what=f"the answer to {text!r}")
    assert len(answers) == 1 and answers[0]["channel"] == "C0GENERAL"
    return answers[0]


def _ids_in(answer: dict[str, Any], ids: list[str]) -> list[str]:
    """The ids of `ids` the answer lists, in the order it lists them."""
    shown = str(answer["blocks"])
    return sorted((i for i in ids if i in shown), key=shown.index)


def test_pending_lists_what_the_user_may_decide_now_oldest_deadline_first(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    both = ["U0LEAD", "U0ALICE"]
    later, sooner, decided, timed_out = (new_request(runtime.store, approvers=both).id for _ in range(4))
    own = new_request(runtime.store, approvers=both, on_behalf_of="U0ALICE").id  # self-approval: not Alice's
    escalated = new_request(runtime.store, approvers=["U0BOB"]).id  # its current level is Bob's
    runtime.store.vote(decided, LEAD, Outcome.APPROVED, runtime.resume_event)
    quorum = new_request(runtime.store, approvers=both, required_approvals=2).id
    runtime.store.vote(quorum, LEAD, Outcome.APPROVED, runtime.resume_event)  # the lead has given theirs
    age(runtime.store, later, expires_at=7200)
    age(runtime.store, sooner, expires_at=600)
    age(runtime.store, timed_out, expires_at=-1)  # past its deadline, not swept yet
    every = [later, sooner, own, decided, quorum, timed_out, escalated]

    alice = _answer(sb, "U0ALICE", "pending")
    assert _ids_in(alice, every) == [sooner, later, quorum]  # no deadline comes last
    assert alice["text"].startswith("3 request(s) waiting for you")
    lead = _answer(sb, "U0LEAD", "pending")
    assert _ids_in(lead, every) == [sooner, later, own]
    assert _ids_in(_answer(sb, "U0BOB", "pending"), every) == [escalated]
    assert "Nothing is waiting for you." in _answer(sb, "U0CAROL", "pending")["text"]


def test_show_gives_status_decision_and_trail(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    runtime.store.vote(request_id, LEAD, Outcome.REJECTED, runtime.resume_event, reason="wrong customer")

    shown = str(_answer(sb, "U0ALICE", f"show {request_id}")["blocks"])
    assert "Refund ACME" in shown and "Rejected by <@U0LEAD>" in shown
    for event in ("requested", "card_posted", "rejected"):
        assert f"· {event} ·" in shown
    unknown = _answer(sb, "U0ALICE", "show 01NOTAREQUEST")
    assert "does not know a request `01NOTAREQUEST`" in unknown["text"]
    # A backtick would end the code span and let the rest be read as mrkdwn: it is shown as a look-alike.
    spoof = _answer(sb, "U0ALICE", "show x`*Approved*`")
    assert "does not know a request `x\u02cb*Approved*\u02cb`." in spoof["text"]


def test_stats_counts_by_status_and_outcome(runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str) -> None:
    sb, _ = sandbox
    approved = new_request(runtime.store).id
    new_request(runtime.store)
    new_request(runtime.store, action="send_email")
    runtime.store.vote(approved, LEAD, Outcome.APPROVED, runtime.resume_event)

    refunds = _answer(sb, "U0LEAD", "stats issue_refund")["text"]
    assert "pending: 1 · approved: 1 · rejected: 0 · expired: 0" in refunds
    assert "Approved, by run: not run 1" in refunds
    assert "pending: 2 · approved: 1" in _answer(sb, "U0LEAD", "stats")["text"]


def test_help_and_unknown_subcommands_get_the_list(sandbox: tuple[Sandbox, str], bot: str) -> None:
    sb, _ = sandbox
    assert "`/countersign pending`" in _answer(sb, "U0ALICE", "help")["text"]
    assert "`/countersign stats [ACTION]`" in _answer(sb, "U0ALICE", "")["text"]
    unknown = _answer(sb, "U0ALICE", "frobnicate now")["text"]
    assert unknown.startswith("`frobnicate` is not a /countersign subcommand.")
    assert "`/countersign show ID`" in unknown


def test_commands_meant_elsewhere_or_malformed_are_refused(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    fields = sb.command_fields("U0ALICE", "C0GENERAL", "pending")
    url, secret = bot + "/slack/events", sb.signing_secret

    def post(changed: dict[str, str], extra: str = "") -> int:
        return post_signed(url, (urllib.parse.urlencode({**fields, **changed}) + extra).encode(), secret)[0]

    assert post({"api_app_id": "A0OTHER"}) == 403
    assert post({"team_id": "T0OTHER"}) == 403
    assert post({"user_id": ""}) == 400
    assert post({}, "&text=twice") == 400  # a field twice
    assert post({}, "&payload=%7B%7D") == 400  # a command and a payload
    assert sb.ephemerals("U0ALICE") == []
