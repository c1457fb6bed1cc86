"""An idempotency key is its requester's in the database (migration 0016), on real SQLite and
PostgreSQL: rows stored under the old constraint (a key unique alone) stay valid through the
migration, and after it two requesters may store the same key. (One requester's repeat finding its
own row: tests/api/test_requesters.py, through intake.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import make_url

from countersign.store import Store, create_db_engine, upgrade
from countersign.store.models import REQUESTERS_KEY
from tests.helpers.builders import new_request

BEFORE = "0015_token_resume_queues"


def _keys(engine: Engine) -> list[list[str | None]]:
    """The column lists of `approval_requests`' unique constraints."""
    return sorted(c["column_names"] for c in inspect(engine).get_unique_constraints("approval_requests"))


@pytest.fixture(params=["sqlite", "postgresql"])
def before(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a new database migrated up to the revision before 0016."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'before.db'}"
    else:
        base = os.environ.get("COUNTERSIGN_TEST_POSTGRES_URL") or pytest.skip("no PostgreSQL")
        name = f"countersign_keys_{os.getpid()}"
        admin = create_db_engine(base).execution_options(isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(base).set(database=name).render_as_string(hide_password=False)
    engine = create_db_engine(url)
    upgrade(engine, BEFORE)
    engine.dispose()
    yield url
    if request.param == "postgresql":
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_rows_stored_before_stay_and_keys_become_each_requesters(before: str) -> None:
    store = Store.from_url(before)
    mine = new_request(store, key="nightly:refund", requester="refund-agent")
    theirs = new_request(store, key="nightly:payout", requester="billing-agent")
    assert _keys(store.engine) == [["idempotency_key"]]
    upgrade(store.engine)
    assert _keys(store.engine) == [["requester", "idempotency_key"]]
    assert inspect(store.engine).get_unique_constraints("approval_requests")[0]["name"] == REQUESTERS_KEY
    assert (store.get(mine.id).idempotency_key, store.get(theirs.id).idempotency_key) == (
        "nightly:refund",
        "nightly:payout",
    )
    same_key = new_request(store, key="nightly:refund", requester="billing-agent")  # its own request
    assert same_key.id != mine.id and store.get(mine.id).requester == "refund-agent"
    store.engine.dispose()
