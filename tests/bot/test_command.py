"""The `/countersign` command over real HTTP: the sandbox posts Slack's signed form to the bot,
which acks at once and answers through the command's `response_url`."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Outcome
from countersign.store.rules import Level, Rules
from tests.conftest import POLICY
from tests.helpers import wait_for
from tests.helpers.builders import age, new_request, post_card
from tests.helpers.signed import post_signed

LEAD = {"slack_user_id": "U0LEAD", "name": "lee"}


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    """The tests' policy with U0LEAD as its admin."""
    path = tmp_path / "policy.yml"
    path.write_text(POLICY + "admins: {users: [U0LEAD]}\n")
    return path


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
    assert alice["text"].startswith("3 requests waiting for you")
    lead = _answer(sb, "U0LEAD", "pending")
    assert _ids_in(lead, every) == [sooner, later, own]
    assert _ids_in(_answer(sb, "U0BOB", "pending"), every) == [escalated]
    assert "Nothing is waiting for you." in _answer(sb, "U0CAROL", "pending")["text"]


def test_show_gives_status_decision_and_trail_to_an_approver(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    runtime.store.vote(request_id, LEAD, Outcome.REJECTED, runtime.resume_event, reason="wrong customer")

    shown = str(_answer(sb, "U0ALICE", f"show {request_id}")["blocks"])
    assert "Refund ACME" in shown and "Rejected by <@U0LEAD>" in shown
    for event in ("requested", "card_posted", "rejected"):
        assert f"· {event} ·" in shown


def test_show_of_a_decided_request_gives_the_decision_once_and_when_not_a_deadline(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """Trial finding: `show` of an approved request still said "Due <its deadline>"; then it said
    "Approved at <date>" beside the status line's "Approved by @lee at <date>"."""
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb, run_id="due")
    age(runtime.store, request_id, expires_at=3600)  # due in an hour
    assert "Due <!date^" in str(_answer(sb, "U0ALICE", f"show {request_id}")["blocks"])  # pending: due
    runtime.store.vote(request_id, LEAD, Outcome.APPROVED, runtime.resume_event)
    decided = runtime.store.get(request_id)
    assert decided is not None and decided.decided_at is not None
    blocks = _answer(sb, "U0ALICE", f"show {request_id}")["blocks"]
    fields = [f["text"] for b in blocks for f in b.get("fields", [])]
    assert not any(f.startswith("Due ") for f in fields)
    said = str([b for b in blocks if b["block_id"] != "trail"])  # the trail lists events, `approved` too
    at = f"<!date^{int(decided.decided_at.timestamp())}^"
    assert f"*Status:* Approved by <@U0LEAD> at {at}" in said
    assert said.count("Approved") == 1 and said.count(at) == 1


def _refusal(request_id: str) -> str:
    """What `show` answers whoever may not see `request_id`, and an id countersign does not know."""
    return (
        f"No request `{request_id}` that you may see: "
        "`show` answers the request's approvers and the policy's admins."
    )


def test_show_refuses_whoever_may_not_see_the_request_without_saying_whether_it_exists(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(
        client, redis, sb
    )  # its approvers: U0LEAD and U0ALICE (tests/conftest.py POLICY)
    secret = runtime.store.get(request_id)
    assert secret is not None and "U0MALLORY" not in secret.approvers

    mallory = _answer(sb, "U0MALLORY", f"show {request_id}")
    nothing = _answer(sb, "U0MALLORY", "show 01NOTAREQUEST")
    assert mallory["text"] == _refusal(request_id)
    assert nothing["text"] == _refusal("01NOTAREQUEST")  # the same words: existence is not revealed
    assert "Refund ACME" not in str(mallory) and "card_posted" not in str(mallory)
    # An approver is told the same about an id countersign does not know.
    assert _answer(sb, "U0ALICE", "show 01NOTAREQUEST")["text"] == _refusal("01NOTAREQUEST")
    # A backtick would end the code span and let the rest be read as mrkdwn: it is shown as a look-alike.
    spoof = _answer(sb, "U0ALICE", "show x`*Approved*`")
    assert spoof["text"].startswith("No request `x\u02cb*Approved*\u02cb` that you may see")
    missing = _answer(sb, "U0ALICE", "show")["text"]
    assert missing.startswith("`/countersign show` needs a request id: `/countersign show ID`")


def test_show_answers_the_approvers_of_every_level(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """An approver of a level the request has not reached (here a member of the second level's user
    group S0FINANCE, U0ALICE) may read it as its current approver may; a user no level names may not."""
    sb, _ = sandbox
    levels = [
        Level(channel="C0FINANCE", users=["U0BOB"]),
        Level(channel="C0FINANCE", usergroups=["S0FINANCE"]),
    ]
    request_id = new_request(runtime.store, approvers=["U0BOB"], rules=Rules(levels=levels)).id
    for user in ("U0BOB", "U0ALICE"):
        assert "· requested ·" in str(_answer(sb, user, f"show {request_id}")["blocks"])
    assert _answer(sb, "U0MALLORY", f"show {request_id}")["text"] == _refusal(request_id)


def test_stats_counts_by_status_and_outcome_for_an_admin(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    approved = new_request(runtime.store).id
    new_request(runtime.store)
    new_request(runtime.store, action="send_email")
    runtime.store.vote(approved, LEAD, Outcome.APPROVED, runtime.resume_event)

    refunds = _answer(sb, "U0LEAD", "stats issue_refund")["text"]
    assert "pending: 1 · approved: 1 · rejected: 0 · expired: 0" in refunds
    assert "Approved, by run: not run 1" in refunds
    assert "pending: 2 · approved: 1" in _answer(sb, "U0LEAD", "stats")["text"]
    bogus = _answer(sb, "U0LEAD", "stats bogus_action")["text"]
    assert bogus.startswith("`bogus_action` is not an action class")
    assert "pending" not in bogus


def test_stats_of_a_class_only_dead_lettered_requests_named_says_so(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """Trial finding: a misspelled class whose one request was dead-lettered was "not an action class
    … no request has it" for `/countersign stats`, while `countersign stats` and the Home tab's
    Gates listed it with 1 dead-lettered request. Both count it now."""
    sb, _ = sandbox
    new_request(runtime.store)
    misspelled = {"request": {"action": "issue_refnd", "payload": {"amount": "5.00"}}}
    runtime.store.dead_letter("job-refnd", "action class issue_refnd is not in the policy", misspelled)

    answer = _answer(sb, "U0LEAD", "stats issue_refnd")["text"]
    assert answer.startswith(
        "`issue_refnd` is not in the policy; 1 dead-lettered request named it (refused at intake)"
    ), answer
    assert (
        "pending: 1 · approved: 0 · rejected: 0 · expired: 0 · dead-lettered: 1"
        in _answer(sb, "U0LEAD", "stats")["text"]
    )
    assert "dead-lettered: 0" in _answer(sb, "U0LEAD", "stats issue_refund")["text"]
    nothing = _answer(sb, "U0LEAD", "stats nothing_at_all")["text"]
    assert nothing.startswith(
        "`nothing_at_all` is not an action class: the policy does not name it and no request used it."
    ), nothing


def test_stats_and_show_refuse_who_is_not_an_admin(
    runtime: Runtime, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    sb, _ = sandbox
    request_id = new_request(runtime.store, approvers=["U0LEAD"]).id
    for text in ("stats", "stats issue_refund"):
        refused = _answer(sb, "U0ALICE", text)["text"]  # an approver elsewhere, not an admin
        assert refused.startswith("`/countersign stats` answers the policy's admins only")
        assert "pending" not in refused
    assert _answer(sb, "U0ALICE", f"show {request_id}")["text"] == _refusal(request_id)
    # The admin (tests/conftest.py POLICY's admins: U0LEAD) reads both.
    assert "· requested ·" in str(_answer(sb, "U0LEAD", f"show {request_id}")["blocks"])


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
