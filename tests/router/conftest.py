"""Fixtures of the router's tests: the policy that exercises every gate, quorum, timeout and
escalation (`engine_policy`)."""

from __future__ import annotations

from pathlib import Path

import pytest

POLICY = """\
version: 9
defaults:
  channel: C0APPROVALS
  approvers: {users: [U0LEAD]}
actions:
  issue_refund:
    channel: C0FINANCE
    approvers: {users: [U0LEAD, U0ALICE]}
    auto_approve: {rule: "double(payload.amount) < 50.0", label: small refunds are automatic}
    require: [{when: "double(payload.amount) >= 10000.0", approvals: 2}]
    timeout: 4h
    on_timeout: escalate
    escalate:
      - {channel: C0FINLEADS, approvers: {usergroups: [S0FINLEADS]}, timeout: 24h, on_timeout: escalate}
      - {channel: C0CFO, approvers: {users: [U0BOB, U0LEAD]}, timeout: 1h, on_timeout: deny}
    reminders: [1h, 3h]
  send_email:
    review_when: "confidence < 0.9"
    timeout: 1h
    on_timeout: allow
  pay_vendor:
    channel: C0AP
    approvers: {usergroups: [S0FINANCE]}
    timeout: 1h
  wipe_database:
    always_review: true
    auto_approve: "true"
"""


@pytest.fixture
def engine_policy(policy_file: Path) -> Path:
    """The test policy file, rewritten to `POLICY` (version 9)."""
    policy_file.write_text(POLICY)
    return policy_file
