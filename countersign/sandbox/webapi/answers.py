"""Web API answers: a JSON body with an HTTP status and headers, and the error that carries one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from countersign.sandbox.types import Json


@dataclass(frozen=True)
class ApiResponse:
    """One HTTP answer: JSON ``body``, ``status`` (default 200) and extra ``headers``."""

    body: Json
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


class ApiError(Exception):
    """Raised by a handler to answer ``{"ok": false, "error": error, **extra}`` with status and headers."""

    def __init__(
        self, error: str, status: int = 200, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(error)
        self.response = ApiResponse({"ok": False, "error": error, **extra}, status, headers or {})


def ok(**fields: Any) -> ApiResponse:
    """A successful answer ``{"ok": true, **fields}``."""
    return ApiResponse({"ok": True, **fields})


def ratelimited(retry_after_seconds: int) -> ApiError:
    """Slack's rate-limit answer: HTTP 429, ``Retry-After: <seconds>``, ``{"ok": false, "error":
    "ratelimited"}``. https://docs.slack.dev/apis/web-api/rate-limits"""
    return ApiError("ratelimited", status=429, headers={"Retry-After": str(retry_after_seconds)})
