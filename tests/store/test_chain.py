"""The audit chain finds each kind of tampering (an edited field or link, a deleted event, with or
without its seal, a deleted seal, an inserted event, swapped events or links, a cut tail) and names
the first event touched, and stays valid while several writers decide at once on PostgreSQL as the
sealer runs."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
from sqlalchemy import func, insert, select, text, update

from countersign.store import AuditEvent, Store
from countersign.store.chain import AuditChain
from tests.helpers import anyone
from tests.helpers.builders import new_request, resume

LEE = {"slack_user_id": "U0LEAD", "name": "lee"}


def _history(store: Store, requests: int = 4) -> AuditChain:
    """`requests` decided requests (four audit events each), all sealed."""
    for n in range(requests):
        row = new_request(store)
        outcome = "approved" if n % 2 else "rejected"
        store.decide(row.id, outcome, [LEE], via="slack", resume=resume, refuse=anyone, reason=f"n{n}")
    chain = AuditChain(store.engine)
    chain.seal()
    return chain


def _sql(store: Store, *statements: str) -> None:
    with store.engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))


def test_an_untouched_chain_holds_and_new_events_wait_for_the_next_seal(store: Store) -> None:
    chain = _history(store)
    assert chain.verify() == chain.verify().__class__(sealed=12, unsealed=0)
    new_request(store)
    assert (chain.verify().sealed, chain.verify().unsealed, chain.verify().problem) == (12, 1, None)
    assert chain.seal() == 1 and chain.verify().unsealed == 0
    head = chain.head()
    assert head is not None and head.seq == 13 and head.event_id == 13


def test_an_edited_field_is_named(store: Store) -> None:
    chain = _history(store)
    with store.engine.begin() as connection:
        connection.execute(update(AuditEvent).where(AuditEvent.id == 6).values(actor="U0SOMEONE"))
    verdict = chain.verify()
    assert verdict.problem == "edited: event id 6 (seq 6) differs from what was sealed"
    assert (verdict.event_id, verdict.sealed) == (6, 5)


def test_a_deleted_event_is_named(store: Store) -> None:
    chain = _history(store)
    _sql(store, "DELETE FROM audit_events WHERE id = 7")
    assert chain.verify().problem == "deleted: event id 7 (seq 7) is missing"


def test_an_event_deleted_with_its_seal_is_named_a_deletion(store: Store) -> None:
    chain = _history(store)
    _sql(store, "DELETE FROM audit_events WHERE id = 8", "DELETE FROM audit_seals WHERE seq = 8")
    verdict = chain.verify()
    missing = "deleted: the event sealed at seq 8 is missing with its seal (between event ids 7 and 9)"
    assert (verdict.problem, verdict.event_id, verdict.sealed) == (missing, 9, 7)
    _sql(store, "DELETE FROM audit_events WHERE id IN (3, 4)", "DELETE FROM audit_seals WHERE seq IN (3, 4)")
    missing = (
        "deleted: the events sealed at seq 3 to 4 are missing with their seals (between event ids 2 and 5)"
    )
    assert chain.verify().problem == missing


def test_a_deleted_seal_whose_event_is_still_there_is_named(store: Store) -> None:
    chain = _history(store)
    _sql(store, "DELETE FROM audit_seals WHERE seq = 6")
    assert chain.verify().problem == "deleted: the seal at seq 6 is missing; event id 6 still there"


def test_two_swapped_links_are_named_reordered(store: Store) -> None:
    chain = _history(store)
    _sql(
        store,
        "UPDATE audit_seals SET seq = -1 WHERE seq = 4",
        "UPDATE audit_seals SET seq = 4 WHERE seq = 5",
        "UPDATE audit_seals SET seq = 5 WHERE seq = -1",
    )
    assert chain.verify().problem == "reordered: the link of event id 5 does not follow seq 3"


def test_an_event_inserted_between_sealed_ones_is_named(store: Store) -> None:
    chain = _history(store)
    _sql(
        store,
        "UPDATE audit_events SET id = id + 100000 WHERE id >= 5",
        "UPDATE audit_events SET id = id - 99999 WHERE id >= 100000",
        "INSERT INTO audit_events (id, request_id, event, actor, detail, at) "
        "SELECT 5, request_id, 'approved', 'U0MALLORY', detail, at FROM audit_events WHERE id = 6",
    )
    verdict = chain.verify()
    assert verdict.problem == "inserted: event id 5 was put before the event sealed with that id"
    assert verdict.event_id == 5


def test_two_swapped_events_are_named(store: Store) -> None:
    chain = _history(store)
    _sql(
        store,
        "UPDATE audit_events SET id = -1 WHERE id = 9",
        "UPDATE audit_events SET id = 9 WHERE id = 10",
        "UPDATE audit_events SET id = 10 WHERE id = -1",
    )
    assert chain.verify().problem == "reordered: event id 9 holds the event sealed as id 10"


def test_a_cut_tail_is_found_from_the_events_or_against_an_anchored_head(store: Store) -> None:
    chain = _history(store)
    head = chain.head()
    assert head is not None
    _sql(store, "DELETE FROM audit_events WHERE id > 10")
    assert chain.verify().problem == "deleted: event id 11 (seq 11) is missing"
    _sql(store, "DELETE FROM audit_seals WHERE seq > 10")
    assert chain.verify().problem is None  # cut cleanly: only a head kept elsewhere tells
    verdict = chain.verify(head)
    assert (
        verdict.problem
        == "truncated: the anchored head (seq 12, event id 12) is gone; the chain ends at seq 10"
    )


def test_a_rewritten_link_is_found(store: Store) -> None:
    chain = _history(store)
    _sql(store, f"UPDATE audit_seals SET hash = '{'ab' * 32}' WHERE seq = 3")
    assert chain.verify().problem == "edited: the link of event id 3 (seq 3) was changed"


def test_concurrent_writers_keep_a_valid_chain_on_postgresql(postgres_url: str, database_url: str) -> None:
    if database_url != postgres_url:
        pytest.skip("concurrent writers: PostgreSQL")
    store = Store.from_url(postgres_url)
    chain = AuditChain(store.engine)
    rows = [new_request(store) for _ in range(48)]
    done = threading.Event()

    def decide(mine: list) -> None:
        for row in mine:
            store.decide(row.id, "approved", [LEE], via="slack", resume=resume, refuse=anyone)
            store.record(row.id, "note", "agent", n=1)

    def seal() -> None:
        while not done.is_set():
            chain.seal(limit=7)

    writers = [threading.Thread(target=decide, args=(rows[n::6],)) for n in range(6)]
    sealer = threading.Thread(target=seal)
    sealer.start()
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    done.set()
    sealer.join(timeout=60)
    while chain.seal():
        pass
    with store.engine.connect() as connection:
        total = connection.scalar(select(func.count()).select_from(AuditEvent))
    verdict = chain.verify()
    assert (verdict.problem, verdict.sealed, verdict.unsealed) == (None, total, 0)
    assert total == 48 * 4
    store.engine.dispose()


def _decide_all(url: str, request_ids: list[str]) -> None:
    """A writer process: decide each request and add an audit note (another transaction)."""
    store = Store.from_url(url)
    for request_id in request_ids:
        store.decide(request_id, "approved", [LEE], via="slack", resume=resume, refuse=anyone)
        store.record(request_id, "note", "agent", n=2)
    store.engine.dispose()


def test_concurrent_writer_processes_keep_a_valid_chain_on_postgresql(
    postgres_url: str, database_url: str
) -> None:
    if database_url != postgres_url:
        pytest.skip("concurrent writers: PostgreSQL")
    store = Store.from_url(postgres_url)
    chain = AuditChain(store.engine)
    ids = [new_request(store).id for _ in range(60)]
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_decide_all, args=(postgres_url, ids[n::3])) for n in range(3)]
    for writer in writers:
        writer.start()
    sealed_meanwhile = 0
    while any(writer.is_alive() for writer in writers):  # the sealer runs while they write
        sealed_meanwhile += chain.seal(limit=5)
    assert sealed_meanwhile > 0
    for writer in writers:
        writer.join(timeout=60)
        assert writer.exitcode == 0
    while chain.seal():
        pass
    verdict = chain.verify()
    assert (verdict.problem, verdict.sealed, verdict.unsealed) == (None, 60 * 4, 0)
    store.engine.dispose()


def test_an_event_committed_after_a_higher_id_is_waited_for_and_sealed_in_order(
    postgres_url: str, database_url: str
) -> None:
    """A transaction holding a lower audit id commits after one with a higher id: the sealer waits
    for it before reading its high-water mark, so neither is skipped nor found 'inserted', and it
    leaves no lock behind."""
    if database_url != postgres_url:
        pytest.skip("writers committing out of id order: PostgreSQL")
    store = Store.from_url(postgres_url)
    chain = AuditChain(store.engine)
    first, second = new_request(store), new_request(store)
    chain.seal()
    with store.engine.connect() as slow:
        slow.execute(
            insert(AuditEvent).values(request_id=first.id, event="note", actor="agent", detail={})
        )  # a lower id, not committed yet
        store.record(second.id, "note", "agent", n=2)  # a higher id, committed first
        sealed: list[int] = []
        sealer = threading.Thread(target=lambda: sealed.append(chain.seal()))
        sealer.start()
        sealer.join(timeout=0.5)
        assert sealer.is_alive() and sealed == []  # the sealer waits for the open transaction
        slow.commit()
    sealer.join(timeout=10)
    assert sealed == [2]
    verdict = chain.verify()
    assert (verdict.problem, verdict.unsealed) == (None, 0)
    store.record(first.id, "note", "agent", n=3)  # no lock left behind
    assert chain.seal() == 1
    store.engine.dispose()
