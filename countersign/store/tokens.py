"""Per-agent API tokens of the HTTP API: create (the secret is returned once), find by secret, list,
revoke.

A token is `cst_` and 32 random bytes (`secrets.token_urlsafe`, 256 bits). Only its SHA-256 is kept.
A slow password hash (bcrypt, scrypt) guards secrets people choose, whose few bits a stolen table
would let an attacker guess; a random 256-bit secret cannot be guessed from its hash, so one
SHA-256 suffices, and it lets the secret be found by an indexed equality on every API call
(the reasoning of GitHub's and Stripe's token schemes; OWASP Password Storage Cheat Sheet, which
scopes slow hashes to passwords).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select, update
from ulid import ULID

from .models import ApiToken, utcnow
from .queries import Queries

PREFIX = "cst_"


class NewToken(NamedTuple):
    """A token just created: its `id` (what `token list` and `token revoke` name) and its `secret`
    (what the agent sends as `Authorization: Bearer …`; shown once, never kept)."""

    id: str
    secret: str


def secret_sha256(secret: str) -> str:
    """The hex SHA-256 a token's secret is kept as."""
    return hashlib.sha256(secret.encode()).hexdigest()


class Tokens(Queries):
    """The `api_tokens` table. Safe to share between threads."""

    def create_token(
        self, requester: str, actions: Sequence[str], resume_queues: Sequence[str] = ()
    ) -> NewToken:
        """A new token acting as `requester` for the action classes `actions`, whose requests may
        name only `resume_queues` as their RQ resume queue (none: it may resume by webhook, or not
        at all; `api.auth.may_create`)."""
        token = NewToken(str(ULID()), PREFIX + secrets.token_urlsafe(32))
        with self._write() as session:
            session.add(
                ApiToken(
                    id=token.id,
                    secret_sha256=secret_sha256(token.secret),
                    requester=requester,
                    actions=sorted(set(actions)),
                    resume_queues=sorted(set(resume_queues)),
                )
            )
        return token

    def token_for(self, secret: str) -> ApiToken | None:
        """The unrevoked token whose secret is `secret`, else None."""
        with self._read() as session:
            found = select(ApiToken).where(
                ApiToken.secret_sha256 == secret_sha256(secret), ApiToken.revoked_at.is_(None)
            )
            return session.scalars(found).first()

    def tokens(self) -> list[ApiToken]:
        """Every token, revoked ones too, oldest first."""
        with self._read() as session:
            return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))

    def revoke_token(self, token_id: str) -> bool:
        """Revoke token `token_id`; True if it was live until now."""
        with self._write() as session:
            revoked = session.execute(
                update(ApiToken)
                .where(ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return bool(revoked.rowcount)  # type: ignore[attr-defined]

    def clock(self) -> datetime:
        """Now, by the database clock (UTC), which grants' expiry is measured by."""
        with self._read() as session:
            return session.execute(select(utcnow())).scalar_one()
