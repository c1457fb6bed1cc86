"""Issue 12, finding 3: a policy file rewritten in place is never taken half written. A new version
is taken once it has settled, only if it keeps every action class of the one in force (or lists the
ones it drops under `removed_actions`), and a version that weakens a class is logged with how."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.policy import load_policy
from countersign.router.policydiff import weakenings
from countersign.router.reload import PolicyHolder
from countersign.router.runtime import Runtime
from countersign.store import Store
from tests.helpers import drain, settled
from tests.helpers.builders import refund

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "examples" / "policy.yml").read_text()
BIG_REFUND = {"amount": "20000.00", "currency": "USD", "customer": "cus_ACME"}


def cut_before(text: str, line: str) -> str:
    """`text` up to (not including) its first line starting with `line`: a file cut short there."""
    return text[: text.index("\n" + line) + 1]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # policy behaviour, not SQL
def test_a_half_written_policy_is_not_taken_and_requests_keep_the_old_rules(
    policy_file: Path,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy_file.write_text(EXAMPLE)
    first = client.request(refund(payload=BIG_REFUND, run_id="1"))
    drain(redis)
    prefix = cut_before(EXAMPLE, "    require:")  # valid YAML, and a valid policy on its own
    policy_file.write_text(prefix)
    settled(policy_file)
    with caplog.at_level(logging.INFO, logger="countersign.router.reload"):
        later = [client.request(refund(payload=BIG_REFUND, run_id=run)) for run in ("2", "3")]
        drain(redis)
    rows = [store.get(request_id) for request_id in (first, *later)]
    assert [(r.required_approvals, len(r.rules.levels), r.policy_sha256) for r in rows if r] == [
        (2, 2, runtime.policy.sha256)
    ] * 3
    assert runtime.policy.file.actions.keys() == {"issue_refund", "delete_customer"}
    refused = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in refused] == [  # one line, once
        f"POLICY NOT RELOADED, version 1 stays in force: {policy_file.resolve()}: version 1 does not name "
        "the action classes delete_customer of version 1 (a file cut short?); list them under "
        "removed_actions to remove them"
    ]


def test_a_file_still_changing_is_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(EXAMPLE)
    holder = PolicyHolder(path)
    path.write_text(EXAMPLE.replace("timeout: 4h", "timeout: 2h"))
    assert holder.current().setting("issue_refund", "timeout") == "4h"  # changed under a second ago
    settled(path)
    assert holder.current().setting("issue_refund", "timeout") == "2h"


# The example policy, weakened: a third approver, no quorum rule, a timeout that allows instead of
# escalating, no escalation level, a wider auto-approval, no reason required to reject, and
# `delete_customer` no longer always reviewed.
WEAKER = """\
version: 2
defaults:
  channel: C0APPROVALS
  approvers: {users: [U0LEAD]}
  key_fields: [customer]
  timeout: 24h
  on_timeout: deny
actions:
  issue_refund:
    channel: C0FINANCE
    approvers: {users: [U0LEAD, U0ALICE, U0BOB]}
    key_fields: [amount, currency, customer]
    auto_approve: {rule: "double(payload.amount) > 0.0 && double(payload.amount) < 500.0", label: small}
    timeout: 4h
    on_timeout: allow
  delete_customer:
    always_review: false
"""


def test_a_weakening_is_taken_and_logged_with_its_diff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(EXAMPLE)
    holder = PolicyHolder(path)
    path.write_text(WEAKER)
    settled(path)
    with caplog.at_level(logging.WARNING, logger="countersign.router.reload"):
        assert holder.current().version == 2
    [warning] = [r.getMessage() for r in caplog.records if "POLICY WEAKENED" in r.getMessage()]
    assert warning.startswith("POLICY WEAKENED: version 2 (sha256 ")
    assert warning.endswith(
        "reviews less than version 1: delete_customer: always_review true → false; "
        "issue_refund: auto_approve 'double(payload.amount) > 0.0 && double(payload.amount) < 50.0' → "
        "'double(payload.amount) > 0.0 && double(payload.amount) < 500.0'; "
        "issue_refund: quorum 2 → 1; issue_refund: approvers added: U0BOB; "
        "issue_refund: on_timeout escalate → allow; "
        "issue_refund: escalation levels 2 → 1 (no longer: C0FINLEADS); "
        "issue_refund: reject_reason required → optional"
    )


def test_a_changed_file_under_the_same_version_is_taken_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Trial finding: two different files recorded under one `version:` without a word. Both are
    told apart by the SHA-256 each request and decision records, so the reload says so."""
    path = tmp_path / "policy.yml"
    path.write_text(EXAMPLE)
    holder = PolicyHolder(path)
    before = holder.current().sha256
    path.write_text(EXAMPLE)  # rewritten, same bytes: the same version, nothing to say
    settled(path)
    with caplog.at_level(logging.WARNING, logger="countersign.router.reload"):
        assert holder.current().sha256 == before
    assert not [r for r in caplog.records if "NOT BUMPED" in r.getMessage()]
    path.write_text(EXAMPLE.replace("timeout: 4h", "timeout: 2h"))  # still "version: 1"
    settled(path)
    with caplog.at_level(logging.WARNING, logger="countersign.router.reload"):
        taken = holder.current()
    assert (taken.version, taken.setting("issue_refund", "timeout")) == (1, "2h")
    assert [r.getMessage() for r in caplog.records if "NOT BUMPED" in r.getMessage()] == [
        f"POLICY VERSION NOT BUMPED: {path} changed (sha256 {before[:12]} → {taken.sha256[:12]}) but "
        "still says version 1; requests and decisions record both files as version 1, told apart only "
        "by their policy_sha256: give each change its own version"
    ]


def test_a_misspelt_cel_function_is_not_taken(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """New-user trial, finding 3: a reload refuses `doubel(` as `policy check` does, naming the field."""
    path = tmp_path / "policy.yml"
    path.write_text(EXAMPLE)
    holder = PolicyHolder(path)
    path.write_text(EXAMPLE.replace("version: 1", "version: 2").replace("double(", "doubel(", 1))
    settled(path)
    with caplog.at_level(logging.INFO, logger="countersign.router.reload"):
        assert holder.current().version == 1
        assert holder.current().version == 1
    [refused] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert refused == (
        f"POLICY NOT RELOADED, version 1 stays in force: {path}: actions.issue_refund.auto_approve.rule: "
        "CEL has no function doubel (a typo?)"
    )


def test_an_admin_added_is_a_weakening_and_one_removed_is_not(tmp_path: Path) -> None:
    """Admins see every reviewer's numbers (the Home tab's "Gates"): adding one widens who sees them."""
    old = tmp_path / "old.yml"
    assert "admins: {users: [U0LEAD]}" in EXAMPLE
    old.write_text(EXAMPLE)
    added = EXAMPLE.replace("version: 1\n", "version: 2\n").replace(
        "admins: {users: [U0LEAD]}", "admins: {users: [U0LEAD, U0BOB], usergroups: [S0X]}"
    )
    new = tmp_path / "new.yml"
    new.write_text(added)
    assert weakenings(load_policy(old), load_policy(new)) == ["admins added: S0X, U0BOB"]
    assert weakenings(load_policy(new), load_policy(old)) == []  # fewer admins: nobody sees more
    new.write_text(EXAMPLE.replace("version: 1", "version: 2").replace("admins: {users: [U0LEAD]}", ""))
    assert weakenings(load_policy(new), load_policy(old)) == ["admins added: U0LEAD"]  # none before


def test_a_class_is_dropped_only_when_removed_actions_lists_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(EXAMPLE)
    holder = PolicyHolder(path)
    without = cut_before(EXAMPLE, "  delete_customer:").replace("version: 1", "version: 2")
    path.write_text(without)
    settled(path)
    with caplog.at_level(logging.ERROR, logger="countersign.router.reload"):
        assert holder.current().version == 1
    assert "does not name the action classes delete_customer" in caplog.text
    path.write_text(without.replace("version: 2\n", "version: 2\nremoved_actions: [delete_customer]\n"))
    settled(path)
    assert holder.current().version == 2 and set(holder.current().file.actions) == {"issue_refund"}


def policy_check(new_path: Path, new: str) -> subprocess.CompletedProcess[str]:
    """`countersign policy check examples/policy.yml NEW`, NEW being `new` written to `new_path`."""
    new_path.write_text(new)
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", "policy", "check", "examples/policy.yml", str(new_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_policy_check_old_new_says_whether_new_may_replace_old(tmp_path: Path) -> None:
    def check(new: str) -> subprocess.CompletedProcess[str]:
        return policy_check(tmp_path / "new.yml", new)

    weaker = check(WEAKER)
    assert weaker.returncode == 0, weaker.stderr
    first = weaker.stdout.splitlines()[0]
    assert first.startswith(
        f"{tmp_path / 'new.yml'} (version 2) may replace examples/policy.yml (version 1); it weakens it: "
        "delete_customer: always_review true → false; issue_refund: auto_approve"
    )
    assert "  issue_refund: C0FINANCE (U0LEAD, U0ALICE, U0BOB; after 14400 s: allow)" in weaker.stdout
    same = check(EXAMPLE.replace("version: 1", "version: 2"))
    assert same.stdout.splitlines()[0].endswith("(version 1); it weakens nothing")
    admin = check(EXAMPLE.replace("version: 1\n", "version: 2\n").replace("[U0LEAD]}", "[U0LEAD, U0BOB]}", 1))
    assert admin.stdout.splitlines()[0].endswith("(version 1); it weakens it: admins added: U0BOB")
    cut = check(cut_before(EXAMPLE, "    require:"))
    assert cut.returncode == 1 and cut.stdout == ""
    assert cut.stderr == (
        f"countersign: policy error: {tmp_path / 'new.yml'}: version 1 does not name the action classes "
        "delete_customer of version 1 (a file cut short?); list them under removed_actions to remove them\n"
    )


def test_policy_check_warns_as_the_reload_does_when_new_changes_rules_under_the_same_version(
    tmp_path: Path,
) -> None:
    """Trial finding: `policy check OLD NEW` said nothing of a NEW that changes a rule but keeps
    `version: 1`, which a reload warns about. Same words, from the same comparison."""
    new = tmp_path / "stricter.yml"
    unbumped = policy_check(new, EXAMPLE.replace("timeout: 4h", "timeout: 3h"))  # still version 1
    old_sha, new_sha = load_policy(ROOT / "examples" / "policy.yml").sha256, load_policy(new).sha256
    assert unbumped.returncode == 0 and unbumped.stdout.splitlines()[0].endswith("it weakens nothing")
    assert unbumped.stderr == (
        f"countersign: warning: POLICY VERSION NOT BUMPED: {new} changed (sha256 {old_sha[:12]} → "
        f"{new_sha[:12]}) but still says version 1; requests and decisions record both files as "
        "version 1, told apart only by their policy_sha256: give each change its own version\n"
    )
    stricter = EXAMPLE.replace("timeout: 4h", "timeout: 3h")
    bumped = policy_check(new, stricter.replace("version: 1", "version: 2"))
    identical = policy_check(new, EXAMPLE)
    assert (bumped.returncode, bumped.stderr, identical.returncode, identical.stderr) == (0, "", 0, "")
