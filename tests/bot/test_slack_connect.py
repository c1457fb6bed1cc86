"""Slack Connect: an approver from a partner workspace decides in a channel shared with ours.

Slack names two workspaces in such a reviewer's payloads: their click carries our workspace as
`team.id` and theirs as `user.team_id`; their modal submit carries theirs as `team.id` and ours as
`view.app_installed_team_id` (the sandbox sends both shapes: `Sandbox.user_teams`). Both are for our
installation and decide; a payload for another app or another installation is still refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.cards import APPROVE_ACTION, REASON_BLOCK, REJECT_ACTION
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, drain, wait_for
from tests.helpers.builders import edited_card, events, post_card, status
from tests.helpers.modals import open_view

PARTNER = "U0PAT"
PARTNER_TEAM = "T0PARTNER"
POLICY = """\
version: 3
defaults:
  channel: C0APPROVALS
  approvers: {users: [U0LEAD]}
actions:
  issue_refund:
    channel: C0FINANCE
    approvers: {users: [U0LEAD, U0PAT]}
    reject_reason: required
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    """The tests' policy with the partner workspace's `U0PAT` among the refund approvers."""
    path = tmp_path / "policy.yml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def partner(sandbox: tuple[Sandbox, str]) -> str:
    """`U0PAT` ("pat"), a member of the partner workspace `T0PARTNER`, in the shared channel."""
    sb, _ = sandbox
    sb.users[PARTNER] = "pat"
    sb.user_teams[PARTNER] = PARTNER_TEAM
    return PARTNER


def test_a_partner_workspace_approver_approves_one_request_and_rejects_another(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str, partner: str
) -> None:
    sb, _ = sandbox
    approved_id, approved_card = post_card(client, redis, sb, run_id="r1")
    redis.delete("countersign:pace:C0FINANCE")  # the second card need not wait its turn in the channel
    rejected_id, rejected_card = post_card(client, redis, sb, run_id="r2")

    assert sb.click("C0FINANCE", approved_card["ts"], APPROVE_ACTION, partner)[0] == 200
    view = open_view(sb, rejected_card, REJECT_ACTION, partner, REASON_BLOCK)
    assert sb.submit_view(view["id"], partner, {REASON_BLOCK: "not our customer"})[0] == 200
    assert sb.views(partner) == []  # the modal closed

    wait_for(lambda: status(store, approved_id) == "approved", what="the partner's approval")
    wait_for(lambda: status(store, rejected_id) == "rejected", what="the partner's rejection")
    for request_id, card in ((approved_id, approved_card), (rejected_id, rejected_card)):
        row = store.get(request_id)
        assert row is not None and row.decided_by == [{"slack_user_id": PARTNER, "name": "pat"}]
        wait_for(lambda r=request_id: redis.exists(f"rq:job:resume-{r}"), what="the resume job")
        rewritten = wait_for(lambda ts=card["ts"]: edited_card(sb, ts), what="the rewritten card")
        assert f"<@{PARTNER}>" in json.dumps(rewritten["blocks"])
    assert "Reviewer's reason: not our customer" in json.dumps(edited_card(sb, rejected_card["ts"]))

    drain(redis, agent.QUEUE)
    decisions = {d["request_id"]: d for d in agent.resumed(redis)}
    assert decisions[approved_id]["outcome"] == "approved"
    assert (decisions[rejected_id]["outcome"], decisions[rejected_id]["reason"]) == (
        "rejected",
        "not our customer",
    )


def test_payloads_for_another_app_or_installation_are_still_refused(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str, partner: str
) -> None:
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, partner)
    view = open_view(sb, card, REJECT_ACTION, partner, REASON_BLOCK)
    submit = sb.submit_payload(view["id"], partner, {REASON_BLOCK: "not our customer"})

    assert sb.send_signed({**click, "api_app_id": "A0OTHER"})[0] == 403
    assert sb.send_signed({**submit, "api_app_id": "A0OTHER"})[0] == 403
    # the same modal, had the partner workspace's own installation of an app opened it
    theirs = {**submit, "view": {**submit["view"], "app_installed_team_id": PARTNER_TEAM}}
    assert sb.send_signed(theirs)[0] == 403
    # a click whose installing workspace is the partner's
    assert sb.send_signed({**click, "team": {"id": PARTNER_TEAM, "domain": "t0partner"}})[0] == 403

    assert status(store, request_id) == "pending"
    assert not {"approved", "rejected"} & set(events(store, request_id))
