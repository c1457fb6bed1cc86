"""Faults the tests put real components into: a database refusing a table (`table_gone`), the
Slack sandbox unreachable (`ServedSandbox.down`; Redis: `RedisServer.down`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text

from countersign.sandbox import Sandbox, SandboxServer, serve
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


class ServedSandbox:
    """The Slack sandbox `sb` served over HTTP at `url` (the tests' `sandbox_server` fixture), which a
    test can take off the network for a while (`down`)."""

    def __init__(self, sb: Sandbox) -> None:
        self.sb = sb
        self.server: SandboxServer = serve(sb)
        self.url = self.server.url

    def stop(self) -> None:
        """Stop serving (the fixture's teardown)."""
        self.server.shutdown()

    @contextmanager
    def down(self) -> Iterator[None]:
        """Slack unreachable for the block: the server shut, its connections closed (every Web API
        call meets a refused connection, an `OSError`), then served again on the same port."""
        self.server.shutdown()
        try:
            yield
        finally:
            self.server = serve(self.sb, port=int(self.url.rsplit(":", 1)[1]))
