"""Acked actions survive the web process: a reviewer's action journaled in Redis by a process that
died before it finished is replayed once by the worker's sweep, and not counted twice."""

from __future__ import annotations

import json

from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import journal
from countersign.router.cards import APPROVE_ACTION
from countersign.router.review import Action
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import wait_for
from tests.helpers.builders import events, post_card, status
from tests.helpers.faults import table_gone

LEAD = {"slack_user_id": "U0LEAD", "name": "lee.lead"}


def journaled(redis: Redis) -> int:
    return int(redis.zcard(journal.JOURNAL_KEY))


def test_an_approval_acked_by_a_process_that_died_is_replayed_once(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    journal.record(redis, Action("approve", request_id, LEAD, channel="C0FINANCE"))  # then the process died
    assert journal.replay(runtime, older_than_seconds=3600) == 0  # too recent: its process may be working
    assert status(store, request_id) == "pending"
    assert journal.replay(runtime, older_than_seconds=0) == 1
    assert status(store, request_id) == "approved" and journaled(redis) == 0
    assert "Approved by <@U0LEAD>" in json.dumps(sb.messages("C0FINANCE")[0]["blocks"])
    assert journal.replay(runtime, older_than_seconds=0) == 0


def test_a_replay_of_an_action_already_recorded_changes_nothing(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """The process committed the vote, then died before it could drop the journal entry."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    sb.click("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    wait_for(lambda: status(store, request_id) == "approved" and journaled(redis) == 0, what="the click")
    before = events(store, request_id)
    journal.record(redis, Action("approve", request_id, LEAD, channel="C0FINANCE"))
    assert journal.replay(runtime, older_than_seconds=0) == 1
    assert events(store, request_id) == before and journaled(redis) == 0  # no second vote, no refusal


def test_a_replay_the_database_refuses_is_kept_and_tried_again(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, _ = post_card(client, redis, sb)
    journal.record(redis, Action("reject", request_id, LEAD, reason="duplicate charge"))
    with table_gone(store, "outbox"):  # the decision's write
        assert journal.replay(runtime, older_than_seconds=0) == 0
    assert journaled(redis) == 1 and status(store, request_id) == "pending"
    assert journal.replay(runtime, older_than_seconds=0) == 1
    row = store.get(request_id)
    assert row is not None and (row.status, row.decision_reason) == ("rejected", "duplicate charge")
