"""Crash points between two steps, replayed on real Redis and databases: whatever step a process
died after, the sweeps finish the work once."""

from __future__ import annotations

import re

import pytest
from redis import Redis

from countersign import ExecutionRefused, execute_approved
from countersign.agent import ApprovalClient
from countersign.bell import BELL_TTL_SECONDS, bell_key, listen
from countersign.router import relay
from countersign.router.jobs import enqueue_resume, json_queue, resume_job_id, resumed_key
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import agent, drain
from tests.helpers.builders import age, decided_card, edited_card, events, new_request, refund
from tests.helpers.redis_server import RedisServer


def decided_without_publishing(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, run_id: str = "r1"
) -> str:
    """A request approved in the database whose web process died before publishing the resume."""
    request_id = client.request(
        refund(run_id=run_id, resume={"queue": agent.QUEUE, "func": agent.EXECUTE_FUNC})
    )
    drain(redis)
    store.vote(request_id, {"slack_user_id": "U0LEAD", "name": "lee"}, "approved", runtime.resume_event)
    return request_id


def test_decision_committed_but_not_published_is_published_by_the_sweep(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = decided_without_publishing(client, redis, store, runtime)
    assert json_queue(agent.QUEUE, redis).count == 0 and [e.request_id for e in store.unpublished()] == [
        request_id
    ]
    assert not redis.exists(bell_key(request_id))
    assert relay.sweep(store, redis) == 1
    assert listen(redis, request_id, 0.01) is True  # the sweep rang the bell a waiting agent blocks on
    assert relay.sweep(store, redis) == 0
    drain(redis, agent.QUEUE)
    assert agent.executed(redis) == [{"amount": "120.00", "currency": "USD"}]


def test_publishing_at_once_rings_the_bell_of_job_and_webhook_resumes_alike(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = decided_without_publishing(client, redis, store, runtime)
    [event] = store.unpublished()
    assert relay.try_publish(redis, event) is True
    assert listen(redis, request_id, 0.01) is True and json_queue(agent.QUEUE, redis).count == 1
    event.webhook, event.request_id = "https://agent.example/resume", "01WEBHOOKRESUME"
    assert relay.try_publish(redis, event) is True
    assert listen(redis, "01WEBHOOKRESUME", 0.01) is True and json_queue(agent.QUEUE, redis).count == 1


def test_a_publish_redis_did_not_answer_is_left_to_the_sweep_and_one_after_a_restart_enqueues_once(
    client: ApprovalClient,
    redis: Redis,
    redis_server: RedisServer,
    store: Store,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
) -> None:
    """The click publishes its resume job and rings its bell in one pipeline (`enqueue_resume`): with
    Redis down it reports the event not published; on the restarted server, which knows no script,
    RQ's call loads the unique-enqueue script, and the sweep finds the job and adds none."""
    request_id = decided_without_publishing(client, redis, store, runtime)
    [event] = store.unpublished()
    redis_server.stop()
    try:
        assert relay.try_publish(redis, event) is False
    finally:
        redis_server.start()
    assert relay.try_publish(redis, event) is True  # NOSCRIPT in the pipeline, then RQ's call
    assert relay.sweep(store, redis) == 1 and store.unpublished() == []
    assert json_queue(agent.QUEUE, redis).job_ids == [resume_job_id(request_id)]
    assert listen(redis, request_id, 0.01) is True
    drain(redis, agent.QUEUE)
    assert len(agent.executed(redis)) == 1


def test_relay_died_after_enqueue_before_marking_enqueues_nothing_twice(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = decided_without_publishing(client, redis, store, runtime)
    [event] = store.unpublished()
    json_queue(event.queue, redis).enqueue(event.func, event.body, job_id=event.job_id)  # then the relay died
    assert relay.sweep(store, redis) == 1  # marks it published; the unique job id refuses a second job
    assert json_queue(agent.QUEUE, redis).job_ids == [resume_job_id(request_id)]
    drain(redis, agent.QUEUE)
    drain(redis, agent.QUEUE)
    assert len(agent.executed(redis)) == 1


def test_the_sweep_enqueues_a_batch_in_one_go_but_no_job_that_is_queued_or_has_run(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """Issue 14: the sweep enqueues a batch's resume jobs in one Redis transaction (`enqueue_resumes`),
    not RQ's unique enqueue a job; it still adds none for a job already queued (the decision path
    enqueued it) nor for one that ran (its marker), and each waiting job is on the queue once."""
    queued, ran, lost = (
        decided_without_publishing(client, redis, store, runtime, run_id=run) for run in ("q", "r", "l")
    )
    events = {event.request_id: event for event in store.unpublished()}
    enqueue_resume(redis, events[queued])  # the decision path published it, then died before marking
    redis.set(resumed_key(ran), 1)  # the agent ran it and RQ deleted the job
    assert relay.sweep(store, redis) == 2  # two are waiting: the one queued before and the lost one
    assert sorted(json_queue(agent.QUEUE, redis).job_ids) == sorted(map(resume_job_id, (queued, lost)))
    assert store.unpublished() == [] and relay.sweep(store, redis) == 0
    drain(redis, agent.QUEUE)
    assert len(agent.executed(redis)) == 2


def test_agent_running_the_same_decision_twice_acts_once(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = decided_without_publishing(client, redis, store, runtime)
    relay.sweep(store, redis)
    drain(redis, agent.QUEUE)
    event = store.outbox_event(request_id)
    assert event is not None
    redis.delete(f"rq:job:{resume_job_id(request_id)}")  # the job's record is gone
    enqueue_resume(redis, event)  # and it is delivered a second time all the same
    drain(redis, agent.QUEUE)  # the second delivery is refused by the grant's single use
    assert len(agent.executed(redis)) == 1
    assert [e.detail.get("why") for e in store.audit_trail(request_id) if e.event == "execution_refused"] == [
        "already_executed"
    ]


def test_a_request_whose_intake_job_redis_lost_is_taken_in_once(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str]
) -> None:
    """The agent got an id and exited; Redis restarted empty before the router took the intake job:
    the database still knows the request, and the relay enqueues its intake again, once."""
    sb, _ = sandbox
    request_id = client.request(refund())
    redis.flushall()  # Redis restarted without persistence
    assert client.get(request_id).status == "queued"
    assert relay.requeue_intake(store, redis, grace_seconds=0) == 1
    assert relay.requeue_intake(store, redis, grace_seconds=0) == 0  # its job exists again
    drain(redis)
    assert client.get(request_id).status == "pending"
    assert [m["metadata"]["event_payload"]["request_id"] for m in sb.messages("C0FINANCE")] == [request_id]
    assert "intake_requeued" in events(store, request_id)
    assert store.intake_waiting(0) == [] and store.intake_message(request_id) is None
    assert relay.requeue_intake(store, redis, grace_seconds=0) == 0  # taken in: nothing left to requeue


def test_a_request_sent_again_after_intake_took_it_leaves_nothing_to_requeue(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str]
) -> None:
    """An agent sends the same request again (same key and payload) after the router stored it: the
    same id, and the repeated message is taken in too, so the relay never reports it lost."""
    first = client.request(refund())
    drain(redis)
    again = client.request(refund())
    drain(redis)
    assert again == first and store.intake_waiting(0) == [] and store.intake_message(first) is None
    assert relay.requeue_intake(store, redis, grace_seconds=0) == 0
    assert "intake_requeued" not in events(store, first) and len(sandbox[0].messages("C0FINANCE")) == 1


def test_an_accepted_request_waits_in_the_database_only_until_intake_takes_it(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str]
) -> None:
    first = client.request(refund())
    again = client.request(refund())  # the same key and payload: the same id, one message
    assert first == again and [m.id for m in store.intake_waiting(0)] == [first]
    assert relay.requeue_intake(store, redis, grace_seconds=0) == 0  # its job is still in Redis
    drain(redis)
    assert store.intake_waiting(0) == [] and client.get(first).status == "pending"


def test_heal_never_enqueues_again_a_resume_that_ran(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = decided_without_publishing(client, redis, store, runtime)
    relay.sweep(store, redis)
    drain(redis, agent.QUEUE)
    redis.delete(f"rq:job:{resume_job_id(request_id)}")  # the job's record is gone after it ran
    assert relay.heal(store, redis) == 0  # the store knows it ran: nothing is enqueued again
    assert json_queue(agent.QUEUE, redis).count == 0
    assert "execution_refused" not in events(store, request_id)


def test_a_resume_job_no_worker_takes_is_on_the_card_and_in_show_until_a_worker_runs_it(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb)
    assert relay.note_untaken(store, redis, waited_seconds=0) == 0  # enqueued, but not published yet
    relay.sweep(store, redis)
    assert relay.note_untaken(store, redis, waited_seconds=3600) == 0  # it has not waited that long
    assert relay.note_untaken(store, redis, waited_seconds=0) == 1  # no agent worker on test-agent
    assert relay.note_untaken(store, redis, waited_seconds=0) == 0  # said once
    drain(redis)  # the router worker rewrites the card
    blocks = str(edited_card(sb, card["ts"])["blocks"])  # type: ignore[index]
    assert "Approved by <@U0LEAD>" in blocks
    assert (
        "⚠ The agent has not run it: no worker has taken its resume job from queue `test-agent` since"
        in blocks
    )
    shown = client.get(request_id).as_dict()
    assert shown["resume"]["problem"] == {
        "event": "resume_not_taken",
        "queue": agent.QUEUE,
        "waited_seconds": 0,
    }
    assert shown["audit"][-1]["event"] == "resume_not_taken" and shown["audit"][-1]["actor"] == "relay"

    drain(redis, agent.QUEUE)  # an agent worker starts, at last
    drain(redis)
    blocks = str(edited_card(sb, card["ts"])["blocks"])  # type: ignore[index]
    assert "Executed ✓" in blocks and "⚠" not in blocks
    assert client.get(request_id).resume["problem"] is None  # type: ignore[index]
    assert events(store, request_id)[-3:] == ["resume_not_taken", "execution_started", "executed"]


def test_an_untaken_rejection_is_cleared_once_a_worker_has_run_its_job(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    sb, _ = sandbox
    request_id, card = decided_card(client, redis, runtime, sb, func=agent.FUNC, vote="rejected")
    relay.sweep(store, redis)
    assert relay.note_untaken(store, redis, waited_seconds=0) == 1
    drain(redis)
    blocks = str(edited_card(sb, card["ts"])["blocks"])  # type: ignore[index]
    assert "⚠ The agent has not processed it: no worker has taken its resume job" in blocks
    assert relay.clear_taken(store, redis) == 0  # still waiting
    drain(redis, agent.QUEUE)
    assert [d["outcome"] for d in agent.resumed(redis)] == ["rejected"]
    assert relay.clear_taken(store, redis) == 1 and relay.clear_taken(store, redis) == 0
    drain(redis)
    blocks = str(edited_card(sb, card["ts"])["blocks"])  # type: ignore[index]
    assert "Rejected by <@U0LEAD>" in blocks and "⚠" not in blocks
    assert events(store, request_id)[-2:] == ["resume_not_taken", "resume_taken"]


def test_a_resume_that_failed_for_good_does_not_keep_later_ones_from_being_cleared(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    stuck = new_request(store)
    store.decide(stuck.id, "rejected", [], via="policy", resume=runtime.resume_event)
    store.resume_failed(stuck.id, "ValueError: Invalid attribute name: f", 0, "agent")  # RQ gave up on it
    request_id, _ = decided_card(client, redis, runtime, sandbox[0], func=agent.FUNC, vote="rejected")
    relay.sweep(store, redis)
    store.resume_failed(request_id, "RuntimeError: the agent's database was down", 1, "agent")
    drain(redis, agent.QUEUE)  # then its job ran to the end
    assert relay.clear_taken(store, redis, page=1) == 1  # found on the second page
    assert [e.request_id for e in store.resume_problems()] == [stuck.id]


def test_heal_never_enqueues_again_a_resume_whose_grant_was_refused_as_expired(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """The agent's worker was down until the grant expired: the delivery was refused, and every later
    one would be. Redis restarting empty (a `make run` restart, before its Redis kept its data) does
    not deliver it again, nor audit the refusal again."""
    request_id = decided_without_publishing(client, redis, store, runtime)
    age(store, request_id, grant_expires_at=-1)
    relay.sweep(store, redis)
    drain(redis, agent.QUEUE)  # refused: grant_expired
    redis.flushall()  # Redis restarted without persistence
    assert relay.heal(store, redis) == 0
    assert json_queue(agent.QUEUE, redis).count == 0 and agent.executed(redis) == []
    trail = events(store, request_id)
    assert trail.count("execution_refused") == 1 and "resume_republished" not in trail


def test_heal_still_enqueues_a_lost_resume_after_a_forged_decision_was_refused(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    request_id = decided_without_publishing(client, redis, store, runtime)
    relay.sweep(store, redis)
    event = store.outbox_event(request_id)
    assert event is not None
    forged = {**event.body, "payload": {"amount": "9999.00", "currency": "USD"}}
    with pytest.raises(ExecutionRefused, match="payload_mismatch"):
        execute_approved(forged, lambda payload: pytest.fail(f"a forged decision ran: {payload}"), runtime)
    redis.flushall()  # the genuine resume job is lost before it ran
    assert relay.heal(store, redis) == 1
    drain(redis, agent.QUEUE)
    assert agent.executed(redis) == [{"amount": "120.00", "currency": "USD"}]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # Redis behaviour, not SQL
def test_a_completed_approval_leaves_under_1_kb_in_redis_and_no_key_without_a_ttl(
    client: ApprovalClient, redis: Redis, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """Issue 14: a finished resume job was kept 7 days with the whole decision (26 KB a completed
    approval with RQ's bookkeeping); RQ now deletes the intake and resume jobs when they have run, and
    the resume job leaves a marker that `heal` reads. The decision's bell (`countersign.bell`) is not
    kept: it expires within the hour."""
    request_id, _ = decided_card(client, redis, runtime, sandbox[0])
    relay.sweep(runtime.store, redis)
    drain(redis, agent.QUEUE)
    drain(redis)  # the card refreshes the agent asked for
    assert runtime.store.get(request_id).execution == "executed"  # type: ignore[union-attr]
    keys = {key.decode(): redis.ttl(key) for key in redis.scan_iter()}
    # only RQ's list of queue names, and the test agent's own record of what it ran, are kept for good
    assert {key for key, ttl in keys.items() if ttl == -1} == {"rq:queues", agent.EXECUTED_KEY}
    # every key left, by shape: no job, result, execution record, registry or lane of the approval
    shapes = {
        re.sub(request_id, "<id>", re.sub(r"(?<=^rq:worker:)\w+$|[0-9a-f]{64}", "*", key)) for key in keys
    }
    # the channel's next free posting time lives 1.1 s after the card (`pace.PACE_MILLISECONDS`), the
    # card's posting time 2.2 s (`pace.LAPSED_MILLISECONDS`): still there or not, depending on how
    # fast the test got here
    assert shapes - {"countersign:pace:C0FINANCE", "countersign:pace:C0FINANCE:<id>:0"} == {
        "countersign:decided:<id>",  # the decision's bell, an hour
        "countersign:home:due",  # shared: the approvers whose Home tab is due, an hour
        "countersign:idempotency:*",  # the client's key (SHA-256 of its requester and key), 7 days
        "countersign:rate:issue_refund:refund-agent",  # per action class and requester, 60 s
        "countersign:resumed:<id>",  # 2 days, read by heal; also says the outcome's thread reply is posted
        "rq:clean_groups",  # RQ's, 10 minutes
        "rq:queues",
        "rq:worker:*",  # the test's burst workers, gone within a minute
        agent.EXECUTED_KEY,
    }
    # kept: what outlives the hour after which the request's decision bell and the shared keys (the
    # Home tab's due set, Slack pacing) have expired
    kept = [key for key, ttl in keys.items() if key.startswith("countersign:") and ttl > BELL_TTL_SECONDS]
    assert resumed_key(request_id) in kept and redis.ttl(bell_key(request_id)) <= BELL_TTL_SECONDS
    assert sum(redis.memory_usage(key) or 0 for key in kept) <= 1024
    assert redis.ttl(resumed_key(request_id)) > relay.HEAL_WINDOW_SECONDS  # longer than heal looks back


def test_heal_never_enqueues_again_a_rejection_whose_job_ran_and_was_deleted(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """The store cannot know that the agent's worker ran a rejection; the job's marker says so."""
    request_id, _ = decided_card(client, redis, runtime, sandbox[0], func=agent.FUNC, vote="rejected")
    relay.sweep(store, redis)
    drain(redis, agent.QUEUE)
    assert json_queue(agent.QUEUE, redis).fetch_job(resume_job_id(request_id)) is None  # deleted by RQ
    assert relay.heal(store, redis) == 0 and json_queue(agent.QUEUE, redis).count == 0
    assert [d["outcome"] for d in agent.resumed(redis)] == ["rejected"]


def test_the_sweep_enqueues_nothing_again_for_a_resume_that_ran_before_it(
    client: ApprovalClient, redis: Redis, store: Store, runtime: Runtime, sandbox: tuple[Sandbox, str]
) -> None:
    """The decision path enqueues the resume job; the agent runs it, and RQ deletes it, before the
    sweep marks the event published: the sweep marks it, and finds the job's marker, not a lost job."""
    request_id, _ = decided_card(client, redis, runtime, sandbox[0], func=agent.EXECUTE_FUNC)
    event = store.outbox_event(request_id)
    assert event is not None and relay.try_publish(redis, event)  # as review.py does
    drain(redis, agent.QUEUE)
    assert [event.request_id for event in store.unpublished()] == [request_id]  # the sweep has not run
    assert relay.sweep(store, redis) == 0
    assert store.unpublished() == [] and json_queue(agent.QUEUE, redis).count == 0
    drain(redis, agent.QUEUE)
    assert agent.executed(redis) == [{"amount": "120.00", "currency": "USD"}]
    assert "execution_refused" not in [event["event"] for event in client.get(request_id).audit]
