"""The PostgreSQL engine's pool outlives the server ending its connections (what a restart does)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import event, text

from countersign.store import Store, create_db_engine
from tests.helpers.builders import new_request


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Store]:
    store = Store.from_url(postgres_url)
    yield store
    store.engine.dispose()


def test_connections_the_server_ended_are_replaced_on_checkout_without_a_ping(
    pg_store: Store, postgres_url: str
) -> None:
    first = new_request(pg_store)
    with pg_store.engine.connect() as connection:  # a second pooled connection, idle from now on
        connection.execute(text("SELECT 1"))
    with pg_store.engine.connect() as one, pg_store.engine.connect() as two:
        pids = {
            one.execute(text("SELECT pg_backend_pid()")).scalar(),
            two.execute(text("SELECT pg_backend_pid()")).scalar(),
        }
    assert pg_store.engine.pool.checkedin() == 2
    admin = create_db_engine(postgres_url)
    with admin.begin() as connection:  # as a restart would: the server ends both pooled sessions
        for pid in pids:
            connection.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
    admin.dispose()
    statements: list[str] = []
    event.listen(pg_store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))

    assert pg_store.get(first.id) is not None  # on a new connection, not a failed one
    assert new_request(pg_store).id != first.id
    assert not [s for s in statements if s.strip().upper() == "SELECT 1"]  # no ping
