"""Configuration from the environment (the contract in DESIGN.md, "Configuration").

Every process reads the same variables; each command names the ones it cannot run without
(`Settings.require`). A missing or malformed value raises `ConfigError`, whose message is one line
naming the variable, and the CLI prints that line and exits 2.

A variable not set in the environment is read from `.run/.env` in the working directory when that
file exists: `countersign run` writes there the Redis, database and grant secret it chose, so that the
commands of a second terminal reach the same local stack. The environment always wins.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, HttpUrl, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from .exceptions import ConfigError
from .validation import error_text

SLACK_API_URL = "https://slack.com/api/"
ENV_FILE = Path(".run/.env")
# Never echoed in errors or logs: tokens, secrets, and URLs that may carry a password.
_SECRET_NAMES = {
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "COUNTERSIGN_SECRET",
    "COUNTERSIGN_WEBHOOK_SECRET",
    "DATABASE_URL",
    "REDIS_URL",
}


class Settings(BaseSettings):
    """The environment variables of DESIGN.md, validated.

    Secrets and tokens default to `None` so that each command can demand only what it uses
    (`countersign request` needs Redis, not a Slack token).
    """

    model_config = SettingsConfigDict(
        extra="ignore", case_sensitive=True, env_file=ENV_FILE, env_file_encoding="utf-8"
    )

    SLACK_BOT_TOKEN: str | None = None
    SLACK_SIGNING_SECRET: str | None = None
    SLACK_APP_TOKEN: str | None = None
    SLACK_API_URL: HttpUrl = HttpUrl(SLACK_API_URL)
    REDIS_URL: str = "redis://localhost:6379/0"
    DATABASE_URL: str = "sqlite:///countersign.db"
    COUNTERSIGN_POLICY: Path | None = None
    COUNTERSIGN_SECRET: str | None = None
    COUNTERSIGN_RESUME_WAIT_SECONDS: Annotated[int, Field(ge=1)] = 300
    """How long a published resume job may wait on its queue before the card says no worker took it."""
    COUNTERSIGN_WEBHOOK_SECRET: str | None = None
    """The Standard Webhooks signing secret of resume webhooks: `whsec_` and the base64 of 24 to 64
    random bytes (the spec's symmetric scheme). Receivers verify with the same value."""
    COUNTERSIGN_WEBHOOK_TIMEOUT_SECONDS: Annotated[int, Field(ge=1, le=60)] = 5
    """How long one webhook POST may take to connect, send and answer (each), seconds."""
    COUNTERSIGN_WEBHOOK_GIVE_UP_SECONDS: Annotated[int, Field(ge=1)] = 3 * 24 * 3600
    """How long after the decision a webhook that fails is still tried (then dead-lettered)."""
    COUNTERSIGN_WEBHOOK_ALLOW_HTTP: bool = False
    """Let a request's webhook use `http://` on any host (default: https://, or http:// on loopback)."""
    PORT: Annotated[int, Field(ge=1, le=65535)] = 3000
    COUNTERSIGN_CLI_REDIS_TIMEOUT_SECONDS: Annotated[float, Field(gt=0, le=60)] = 3.0
    """How long a `countersign` command gives Redis to connect, and then to answer each command,
    seconds: one that does not (down, or hung) fails the command within it, naming `REDIS_URL`."""
    COUNTERSIGN_LIBRARY_LOG_LEVEL: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """The level of RQ's, gunicorn's and httpx's own log lines (countersign's are INFO whatever it is). At
    WARNING and above, gunicorn writes no access log: `countersign run` sets WARNING for its
    commands, so that its terminal shows countersign's lines and warnings, not a line per job or
    click."""

    @field_validator("REDIS_URL")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        try:
            urlsplit(value).port  # noqa: B018 - parsing the port is the check
        except ValueError:
            raise ValueError("has a port that is not a number") from None
        return value

    @field_validator("DATABASE_URL")
    @classmethod
    def _database_url(cls, value: str) -> str:
        try:
            url = make_url(value)
        except ArgumentError as exc:
            raise ValueError("is not a SQLAlchemy database URL") from exc
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise ValueError("must be a sqlite:// or postgresql:// URL")
        return value

    @field_validator("SLACK_BOT_TOKEN")
    @classmethod
    def _bot_token(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("xoxb-"):
            raise ValueError("must be a bot token starting with xoxb-")
        return value

    @field_validator("COUNTERSIGN_WEBHOOK_SECRET")
    @classmethod
    def _webhook_secret(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            key = base64.b64decode(value.removeprefix("whsec_"), validate=True)
        except ValueError:
            key = b""
        if not value.startswith("whsec_") or not 24 <= len(key) <= 64:
            raise ValueError("must be whsec_ and the base64 of 24 to 64 random bytes (Standard Webhooks)")
        return value

    @field_validator("COUNTERSIGN_POLICY")
    @classmethod
    def _policy_path(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value

    @property
    def slack_api_url(self) -> str:
        """`SLACK_API_URL` with the trailing slash slack_sdk's `WebClient(base_url=...)` expects."""
        url = str(self.SLACK_API_URL)
        return url if url.endswith("/") else url + "/"

    def source(self, name: str) -> Literal["from the environment", "from .run/.env", "default"]:
        """Where the value of setting `name` came from (a value given to `load_settings` as an
        override counts as `.run/.env`: outside tests, that file is the one other source)."""
        if name in os.environ:
            return "from the environment"
        return "from .run/.env" if name in self.model_fields_set else "default"

    def shown(self, name: str) -> str:
        """The URL setting `name` (`REDIS_URL`, `DATABASE_URL`) as it may be printed: its password
        replaced by `***`, and where it came from, e.g. ``redis://localhost:6379/0 (from .run/.env)``."""
        return f"{_without_password(str(getattr(self, name)))} ({self.source(name)})"

    def require(self, *names: str, needed_by: str) -> None:
        """Raise `ConfigError` naming the first of `names` that is unset or empty, and what needs it."""
        for name in names:
            if not getattr(self, name):
                raise ConfigError(f"{name} is not set; {needed_by} needs it")


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def load_settings(**overrides: object) -> Settings:
    """Read `Settings` from the environment, then `.run/.env` (plus `overrides`, used by tests and
    `countersign run`, which passes `_env_file=None` to read the environment alone).

    Raises `ConfigError` with one line, e.g. ``PORT: should be a whole number (got 'abc')``.
    """
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        error = exc.errors()[0]
        name = ".".join(str(part) for part in error["loc"]) or "settings"
        shown = "" if name in _SECRET_NAMES else f" (got {error.get('input')!r})"
        raise ConfigError(f"{name}: {error_text(error)}{shown}") from None
