"""The policy versions the router took (`policy_versions`, migration 0018), and the highest one a
request recorded: what a router starting on a policy file compares it with
(`router/reload.against_history`). A live reload compares a new file with the version in force in
its own memory; a process that starts has none, so the database keeps the last one for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from .models import ApprovalRequest, PolicyVersion


@dataclass(frozen=True)
class Taken:
    """A policy version the router took: its `version:`, SHA-256 (hex), action classes (sorted) and
    when it was recorded (UTC, the database clock)."""

    version: int
    sha256: str
    actions: list[str]
    taken_at: datetime


def last_taken(engine: Engine) -> Taken | None:
    """The policy version the router took last, or None (a new database)."""
    with Session(engine) as session, session.begin():
        row = session.scalars(select(PolicyVersion).order_by(PolicyVersion.id.desc()).limit(1)).first()
        if row is None:
            return None
        return Taken(row.version, row.sha256, list(row.actions), row.taken_at)


def record_taken(engine: Engine, version: int, sha256: str, actions: Iterable[str]) -> bool:
    """Record that the router took policy `version` (SHA-256 `sha256`, action classes `actions`),
    unless it is the last one recorded already. True when recorded."""
    with Session(engine) as session, session.begin():
        last = session.scalar(select(PolicyVersion.sha256).order_by(PolicyVersion.id.desc()).limit(1))
        if last == sha256:
            return False
        session.execute(insert(PolicyVersion).values(version=version, sha256=sha256, actions=sorted(actions)))
        return True


def highest_version_used(engine: Engine) -> int | None:
    """The highest `policy_version` any approval request recorded, or None when there is none."""
    with Session(engine) as session, session.begin():
        return session.scalar(select(func.max(ApprovalRequest.policy_version)))
