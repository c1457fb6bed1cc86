"""An idempotency key is its requester's in the database (migration 0016), on real SQLite and
PostgreSQL: rows stored under the old constraint (a key unique alone) stay valid through the
migration, and after it two requesters may store the same key. (One requester's repeat finding its
own row: tests/api/test_requesters.py, through intake.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, MetaData, Table, inspect, text
from sqlalchemy.engine import make_url
from ulid import ULID

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


def _stored_before(engine: Engine, key: str, requester: str) -> str:
    """The id of a pending request stored in the table as the revision before 0016 has it (reflected:
    the model's later columns are not there yet), its required columns only."""
    table = Table("approval_requests", MetaData(), autoload_with=engine)
    request_id = str(ULID())
    row = {"id": request_id, "idempotency_key": key, "action": "issue_refund", "payload": {"amount": "5.00"}}
    row |= {"payload_sha256": "a" * 64, "summary": "s", "requester": requester, "status": "pending"}
    row |= {"channel": "C0X", "approvers": ["U0LEAD"], "policy_version": 1, "policy_sha256": "b" * 64}
    with engine.begin() as connection:
        connection.execute(table.insert().values(row))
    return request_id


def test_rows_stored_before_stay_and_keys_become_each_requesters(before: str) -> None:
    store = Store.from_url(before)
    mine = _stored_before(store.engine, "nightly:refund", "refund-agent")
    theirs = _stored_before(store.engine, "nightly:payout", "billing-agent")
    assert _keys(store.engine) == [["idempotency_key"]]
    upgrade(store.engine)
    assert _keys(store.engine) == [["requester", "idempotency_key"]]
    assert inspect(store.engine).get_unique_constraints("approval_requests")[0]["name"] == REQUESTERS_KEY
    assert (store.get(mine).idempotency_key, store.get(theirs).idempotency_key) == (
        "nightly:refund",
        "nightly:payout",
    )
    assert store.get(mine).earlier_approvers == []  # migration 0017's default
    same_key = new_request(store, key="nightly:refund", requester="billing-agent")  # its own request
    assert same_key.id != mine and store.get(mine).requester == "refund-agent"
    store.engine.dispose()
