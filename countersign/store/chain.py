"""The tamper-evident audit chain: committed audit events sealed after the fact, in one total order.

What it proves. Every sealed event is a link: `hash = SHA-256(prev_hash + C(event))`, where `C` is
the RFC 8785 canonical JSON (https://www.rfc-editor.org/rfc/rfc8785) of the event's id, request,
event name, actor, detail and time. `AuditChain.verify` recomputes every link, so an edited field,
a deleted event, an event inserted between sealed ones, two events swapped, or the tail cut off
(against a head anchored elsewhere: `head`, signed with `COUNTERSIGN_SECRET`) is found, and the
first one named. A deleted event is named a deletion also when its seal was deleted with it (a gap
in the links' seq), and a deleted seal whose event is still there is named as such. What it does
not prove: events not sealed yet (the router's sweep seals every second) can be changed unseen;
and whoever can write the database can recompute the whole chain, which only a head kept outside
the database (`countersign audit head`, printed for anchoring: a ticket, a log, another system)
reveals. An event inserted after the last seal with a new id is
sealed like any other: the chain proves order and integrity, not who wrote a row.

Order. Audit rows are inserted by the decision path unchanged; ids come from a sequence, and under
concurrent writers on PostgreSQL a row with a lower id can commit after one with a higher id. The
sealer therefore first reads a high-water mark in a transaction of its own that takes `LOCK TABLE
audit_events IN SHARE ROW EXCLUSIVE MODE` and commits at once: the lock is granted only once every
transaction that has inserted audit rows has ended, and an INSERT takes its ROW EXCLUSIVE lock on the
table before it draws its id from the sequence, so every id up to the mark is committed or gone, and
every later insert draws a higher id (https://www.postgresql.org/docs/current/explicit-locking.html,
"Table-Level Locks"). Inserts wait only while the lock is granted and the mark read, not while the
chain is computed. Sealing in id order up to the mark is then exact: no event is skipped, and one
found later below the last sealed id was inserted after the fact. A transaction-level advisory lock
keeps two sealers from sealing at once. SQLite's `BEGIN IMMEDIATE` already serialises writers, so
its mark is the highest id.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import rfc8785
from sqlalchemy import Engine, func, insert, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from .engine import WRITE
from .models import AuditEvent, AuditSeal

GENESIS = "0" * 64
"""The `prev_hash` of the first link."""
SEAL_BATCH = 1_000
"""At most this many events sealed per transaction."""
CHAIN_LOCK = 0x636F756E7465  # PostgreSQL advisory lock key of the sealer
LOCK_TIMEOUT = "2s"
"""How long the sealer waits for writers to finish before it skips a turn (PostgreSQL)."""


class Event(Protocol):
    """An audit event's fields as the chain reads them: an `AuditEvent`, or a row of its columns."""

    id: int
    request_id: str
    event: str
    actor: str | None
    detail: dict[str, Any]
    at: datetime


EVENT_COLUMNS = (
    AuditEvent.id,
    AuditEvent.request_id,
    AuditEvent.event,
    AuditEvent.actor,
    AuditEvent.detail,
    AuditEvent.at,
)


def event_json(event: Event, with_id: bool = True) -> bytes:
    """RFC 8785 canonical JSON of `event`: `{id, request_id, event, actor, detail, at}` (`at` ISO
    8601 UTC with microseconds); without `id` when not `with_id`."""
    shown: dict[str, Any] = {
        "request_id": event.request_id,
        "event": event.event,
        "actor": event.actor,
        "detail": event.detail,
        "at": event.at.astimezone(UTC).isoformat(timespec="microseconds"),
    }
    if with_id:
        shown["id"] = event.id
    return rfc8785.dumps(shown)


def content_sha256(event: Event) -> str:
    """SHA-256 (hex) of the event's canonical JSON without its id: what the event says."""
    return hashlib.sha256(event_json(event, with_id=False)).hexdigest()


def link(prev_hash: str, event: Event) -> str:
    """The chain hash of `event` after the link `prev_hash`: SHA-256 (hex) of `prev_hash` (hex
    text) followed by the event's canonical JSON with its id."""
    return hashlib.sha256(prev_hash.encode() + event_json(event)).hexdigest()


@dataclass(frozen=True)
class Head:
    """The chain's last link: `seq` events sealed, the last one `event_id`, its `hash`."""

    seq: int
    event_id: int
    hash: str

    def signature(self, secret: str) -> str:
        """HMAC-SHA256 (hex) of `countersign-audit-head:{seq}:{hash}` with `secret`."""
        message = f"countersign-audit-head:{self.seq}:{self.hash}".encode()
        return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Verdict:
    """What `AuditChain.verify` found: `sealed` links checked, `unsealed` events after the last seal,
    and the first `problem` (None: the chain holds) with the `event_id` it names."""

    sealed: int
    unsealed: int
    problem: str | None = None
    event_id: int | None = None


class AuditChain:
    """Seals, checks and reports the head of the audit chain on `engine`. Safe to share between threads."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = engine.execution_options(**WRITE)

    def seal(self, limit: int = SEAL_BATCH) -> int:
        """Seal up to `limit` committed audit events after the last sealed one, in id order, up to the
        high-water mark (`_high_water`); returns how many. 0 also when another sealer holds the chain
        or writers held the table past `LOCK_TIMEOUT` (the next call catches up). When a read finds
        nothing new it takes no lock."""
        if not self._anything_new() or (mark := self._high_water()) is None:
            return 0
        with Session(self._writer) as session, session.begin():
            if not self._hold_chain(session):
                return 0
            last = session.scalars(select(AuditSeal).order_by(AuditSeal.seq.desc()).limit(1)).first()
            seq, prev, after = (last.seq, last.hash, last.event_id) if last else (0, GENESIS, 0)
            newer = (AuditEvent.id > after) & (AuditEvent.id <= mark)
            stmt = select(*EVENT_COLUMNS).where(newer).order_by(AuditEvent.id).limit(limit)
            links = []
            for event in session.execute(stmt):
                seq, hashed = seq + 1, link(prev, event)
                row = {"seq": seq, "event_id": event.id, "event_sha256": content_sha256(event)}
                links.append({**row, "prev_hash": prev, "hash": hashed})
                prev = hashed
            if links:
                session.execute(insert(AuditSeal), links)
            return len(links)

    def _anything_new(self) -> bool:
        """True when an audit event has a higher id than the last sealed one (a read, no lock)."""
        with Session(self.engine) as session:
            newest = session.scalar(select(func.max(AuditEvent.id)))
            sealed = session.scalar(select(func.max(AuditSeal.event_id)))
        return newest is not None and (sealed is None or newest > sealed)

    def _high_water(self) -> int | None:
        """The highest audit event id below which every id is committed or gone (see the module
        docstring), read under a table lock held only for that read (PostgreSQL); None when writers
        held the table past `LOCK_TIMEOUT`."""
        with Session(self._writer) as session:
            try:
                if session.get_bind().dialect.name == "postgresql":
                    session.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                    session.execute(text("LOCK TABLE audit_events IN SHARE ROW EXCLUSIVE MODE"))
                mark = session.scalar(select(func.max(AuditEvent.id)))
            except OperationalError:
                session.rollback()
                return None
            session.commit()  # releases the lock: inserts go on while the chain is computed
            return mark

    @staticmethod
    def _hold_chain(session: Session) -> bool:
        """Hold the chain for this transaction (PostgreSQL: an advisory lock); False when another
        sealer has it."""
        if session.get_bind().dialect.name != "postgresql":
            return True
        return bool(session.scalar(select(func.pg_try_advisory_xact_lock(CHAIN_LOCK))))

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No sealing while the block runs (PostgreSQL: the sealer's advisory lock held on a
        connection of its own), for writing demo data that is moved in time before it is sealed."""
        if self.engine.dialect.name != "postgresql":
            yield
            return
        with self.engine.connect() as connection:
            connection.execute(select(func.pg_advisory_lock(CHAIN_LOCK)))
            try:
                yield
            finally:
                connection.execute(select(func.pg_advisory_unlock(CHAIN_LOCK)))
                connection.commit()

    def head(self) -> Head | None:
        """The last link, or None before anything is sealed."""
        with Session(self.engine) as session:
            last = session.scalars(select(AuditSeal).order_by(AuditSeal.seq.desc()).limit(1)).first()
        return Head(last.seq, last.event_id, last.hash) if last else None

    def verify(self, anchor: Head | None = None) -> Verdict:
        """Walk the chain in order, recomputing every link; the first problem found (see the module
        docstring) in `Verdict.problem`. With `anchor` (a head printed earlier), the chain must
        still hold that link, so a cut tail is found even with its seals removed."""
        with Session(self.engine) as session, session.begin():
            seals = session.scalars(
                select(AuditSeal).order_by(AuditSeal.seq).execution_options(yield_per=2000)
            )
            events = _peekable(
                session.execute(
                    select(*EVENT_COLUMNS).order_by(AuditEvent.id).execution_options(yield_per=2000)
                )
            )
            prev, count, last = GENESIS, 0, None
            for seal in seals:
                problem = _check(session, seal, (count + 1, last.event_id if last else 0, prev), events)
                if problem is not None:
                    return Verdict(count, 0, *problem)
                prev, count, last = seal.hash, count + 1, seal
            if anchor is not None and (cut := _anchored(anchor, last, session)) is not None:
                return Verdict(count, 0, cut, anchor.event_id)
            return Verdict(count, sum(1 for _ in events))


class _peekable:
    """An iterator over audit events with a look at the next one."""

    def __init__(self, it: Any) -> None:
        self._it = iter(it)
        self._next: Event | None = next(self._it, None)

    def peek(self) -> Event | None:
        return self._next

    def __iter__(self) -> _peekable:
        return self

    def __next__(self) -> Event:
        if self._next is None:
            raise StopIteration
        current, self._next = self._next, next(self._it, None)
        return current


def _check(
    session: Session, seal: AuditSeal, expected: tuple[int, int, str], events: _peekable
) -> tuple[str, int] | None:
    """The problem with link `seal`, `expected` as `(seq, after event id, prev hash)`: the `seq`-th
    link, sealing an event with an id above `after`, chained to `prev`; reads the events up to its
    own from `events`. Returns `(problem, event id)`, or None when it holds."""
    seq, after, prev = expected
    if seal.seq > seq:
        return _gap(seal, seq, after, events), seal.event_id
    if seal.seq != seq or seal.prev_hash != prev:
        return f"reordered: the link of event id {seal.event_id} does not follow seq {seq - 1}", seal.event_id
    ahead = events.peek()
    if ahead is not None and ahead.id < seal.event_id:
        return f"inserted: event id {ahead.id} was not there when later events were sealed", ahead.id
    if ahead is None or ahead.id != seal.event_id:
        return f"deleted: event id {seal.event_id} (seq {seal.seq}) is missing", seal.event_id
    event = next(events)
    content = content_sha256(event)
    if content != seal.event_sha256:
        return _changed(session, seal, content, events.peek()), seal.event_id
    if link(prev, event) != seal.hash:
        return f"edited: the link of event id {seal.event_id} (seq {seal.seq}) was changed", seal.event_id
    return None


def _gap(seal: AuditSeal, seq: int, after: int, events: _peekable) -> str:
    """Why links `seq` to `seal.seq - 1` are missing: their events were deleted with them (no event
    left between ids `after` and `seal.event_id`), or only the seals were (the events are there)."""
    one = seal.seq - 1 == seq
    missing = f"seq {seq}" if one else f"seq {seq} to {seal.seq - 1}"
    left = []
    while (ahead := events.peek()) is not None and ahead.id < seal.event_id:
        left.append(next(events).id)
    if left:
        seals = f"the seal at {missing} is" if one else f"the seals at {missing} are"
        ids = f"event id {left[0]}" if len(left) == 1 else f"event ids {_ids(left)}"
        return f"deleted: {seals} missing; {ids} still there"
    between = f"between event ids {after} and {seal.event_id}"
    gone = (
        "the event sealed at {} is missing with its seal"
        if one
        else "the events sealed at {} are missing with their seals"
    )
    return f"deleted: {gone.format(missing)} ({between})"


def _ids(ids: list[int]) -> str:
    """`ids` for a message: all of them up to five, else the first five and how many more."""
    shown = ", ".join(str(one) for one in ids[:5])
    return shown if len(ids) <= 5 else f"{shown} and {len(ids) - 5} more"


def _changed(session: Session, seal: AuditSeal, content: str, following: Event | None) -> str:
    """Why event `seal.event_id` no longer says what was sealed: it holds another sealed event
    (reordered), the sealed one moved up to the next id (inserted), or it was edited."""
    moved = session.scalars(select(AuditSeal).where(AuditSeal.event_sha256 == content).limit(1)).first()
    if moved is not None:
        return f"reordered: event id {seal.event_id} holds the event sealed as id {moved.event_id}"
    if following is not None and content_sha256(following) == seal.event_sha256:
        return f"inserted: event id {seal.event_id} was put before the event sealed with that id"
    return f"edited: event id {seal.event_id} (seq {seal.seq}) differs from what was sealed"


def _anchored(anchor: Head, last: AuditSeal | None, session: Session) -> str | None:
    """Why the chain no longer holds the anchored head's link, or None."""
    held = session.get(AuditSeal, anchor.seq)
    if held is None:
        end = last.seq if last else 0
        gone = f"seq {anchor.seq}, event id {anchor.event_id}"
        return f"truncated: the anchored head ({gone}) is gone; the chain ends at seq {end}"
    if held.hash != anchor.hash:
        return f"edited: the link at the anchored head (seq {anchor.seq}) is not the one anchored"
    return None
