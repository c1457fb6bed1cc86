"""Faults the tests put a real database into."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text

from countersign.store import Store


@contextmanager
def table_gone(store: Store, table: str) -> Iterator[None]:
    """The database refuses every statement on `table` (it is renamed away) until the block ends."""
    with store.engine.begin() as connection:
        connection.execute(text(f"ALTER TABLE {table} RENAME TO {table}_away"))
    try:
        yield
    finally:
        with store.engine.begin() as connection:
            connection.execute(text(f"ALTER TABLE {table}_away RENAME TO {table}"))
