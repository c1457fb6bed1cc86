"""`countersign token create | list | revoke` as a user runs them: the secret printed once and kept
only as its SHA-256, the scope checked, revocation, and one line for each mistake."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import select

from countersign.router.runtime import Runtime
from countersign.store.models import ApiToken
from countersign.store.tokens import Tokens, secret_sha256


def token(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", "token", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], **env},
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the command, not SQL
def test_create_list_revoke(env: dict[str, str], runtime: Runtime) -> None:
    created = token(env, "create", "--requester", "refund-agent", "--actions", "issue_refund,send_email")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("cst_") and len(secret) >= 40
    assert "shown once" in created.stderr and secret not in created.stderr
    tokens = Tokens(runtime.store.engine)
    found = tokens.token_for(secret)
    assert found is not None and found.actions == ["issue_refund", "send_email"]
    with runtime.store.engine.connect() as connection:
        kept = connection.execute(select(ApiToken.secret_sha256)).scalars().all()
    assert kept == [secret_sha256(secret)]

    listed = json.loads(token(env, "list").stdout)
    assert [(t["id"], t["requester"], t["revoked_at"]) for t in listed] == [(found.id, "refund-agent", None)]
    assert secret not in json.dumps(listed)

    assert token(env, "revoke", found.id).returncode == 0
    assert tokens.token_for(secret) is None
    again = token(env, "revoke", found.id)
    assert (again.returncode, again.stderr) == (
        2,
        f"countersign: error: no live token {found.id!r} (`countersign token list` lists them)\n",
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("actions", ["", "Issue Refund", "a,,b!"])
def test_a_bad_scope_is_one_line(env: dict[str, str], actions: str) -> None:
    refused = token(env, "create", "--requester", "refund-agent", "--actions", actions)
    assert refused.returncode == 2
    assert refused.stderr == (
        "countersign: error: --actions: each action class should be 1 to 64 lower-case letters, digits, "
        f"'_', '.' or '-' (e.g. issue_refund); got {actions!r}\n"
    )
    assert refused.stderr.count("\n") == 1


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_requester_that_would_show_as_another_gets_no_token(env: dict[str, str]) -> None:
    refused = token(env, "create", "--requester", "refund\u200b-agent", "--actions", "issue_refund")
    assert refused.returncode == 2
    assert refused.stderr == (
        'countersign: error: --requester "refund\\u200b-agent" contains U+200B ZERO WIDTH SPACE, '
        "an invisible or look-alike character\n"
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_token_keeps_the_resume_queues_it_was_given_and_none_by_default(
    env: dict[str, str], runtime: Runtime
) -> None:
    bound = token(
        env, "create", "--requester", "refund-agent", "--actions", "issue_refund",
        "--resume-queue", "refund-agent", "--resume-queue", "refund-agent-eu",
    )  # fmt: skip
    assert bound.returncode == 0, bound.stderr
    assert "with resume queues refund-agent, refund-agent-eu;" in bound.stderr
    unbound = token(env, "create", "--requester", "mail-agent", "--actions", "send_email")
    assert "with no resume queue (webhook or none);" in unbound.stderr
    tokens = Tokens(runtime.store.engine)
    found = [tokens.token_for(created.stdout.strip()) for created in (bound, unbound)]
    assert [t.resume_queues if t else "missing" for t in found] == [["refund-agent", "refund-agent-eu"], []]
    listed = json.loads(token(env, "list").stdout)
    assert [t["resume_queues"] for t in listed] == [["refund-agent", "refund-agent-eu"], []]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_countersigns_own_queue_is_no_tokens_resume_queue(env: dict[str, str], runtime: Runtime) -> None:
    flags = ["--requester", "refund-agent", "--actions", "issue_refund", "--resume-queue", "countersign"]
    refused = token(env, "create", *flags)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert (
        refused.stderr.startswith(
            "countersign: error: --resume-queue: 'countersign' is countersign's own queue"
        )
        and refused.stderr.count("\n") == 1
    )
    assert Tokens(runtime.store.engine).tokens() == []
