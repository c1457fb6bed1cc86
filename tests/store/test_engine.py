"""The PostgreSQL engine's pool outlives the server ending its connections (what a restart does);
the schema check names what a database lacks and the command that fixes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event, text

from countersign.exceptions import SchemaOutOfDate
from countersign.store import Store, check_schema, create_db_engine
from countersign.store.engine import upgrade
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
    pids = set()
    for engine in pg_store.engines:  # the transactions' and the single statements' (autocommit)
        with engine.connect() as connection:  # a second pooled connection, idle from now on
            connection.execute(text("SELECT 1"))
        with engine.connect() as one, engine.connect() as two:
            pids |= {
                one.execute(text("SELECT pg_backend_pid()")).scalar(),
                two.execute(text("SELECT pg_backend_pid()")).scalar(),
            }
        assert engine.pool.checkedin() == 2
    assert len(pg_store.engines) == 2 and len(pids) == 4
    admin = create_db_engine(postgres_url)
    with admin.begin() as connection:  # as a restart would: the server ends every pooled session
        for pid in pids:
            connection.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
    admin.dispose()
    statements: list[str] = []
    for engine in pg_store.engines:
        event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))

    assert pg_store.get(first.id) is not None  # on a new connection, not a failed one
    assert new_request(pg_store).id != first.id
    assert not [s for s in statements if s.strip().upper() == "SELECT 1"]  # no ping


def test_the_schema_check_says_what_the_database_lacks_and_the_command(tmp_path: Path) -> None:
    """An empty database: it has no schema yet, and `db upgrade` creates it (not "at nothing"); a
    database at an older migration: which one, which this version needs, the same command."""
    engine = create_db_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    with pytest.raises(SchemaOutOfDate) as fresh:
        check_schema(engine)
    assert str(fresh.value) == (
        "DATABASE_URL: the database has no countersign schema yet; create it with `countersign db upgrade`"
    )
    upgrade(engine, "0001")
    with pytest.raises(SchemaOutOfDate) as old:
        check_schema(engine)
    assert str(old.value).startswith("DATABASE_URL: the database schema is at 0001, this version needs ")
    assert str(old.value).endswith("; run `countersign db upgrade`")
    upgrade(engine)
    check_schema(engine)
    engine.dispose()
