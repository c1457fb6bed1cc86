"""The value types of the `countersign` command's flags (argparse `type=`): each returns the value or
raises `argparse.ArgumentTypeError`, which argparse prints as one line, exit 2; and the time range
of `--since` and `--until` (`window`)."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

from .exceptions import UsageError


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def moment(text: str) -> datetime:
    """An argparse type: a UTC time, given as `now`, as `30d`, `12h` or `90m` ago, or as an ISO 8601
    date or time (UTC unless it names an offset). The one parser of every `--since` and `--until`."""
    if text.strip() == "now":
        return datetime.now(UTC)
    if (found := re.fullmatch(r"(\d+)([dhm])", text.strip())) is not None:
        unit = {"d": "days", "h": "hours", "m": "minutes"}[found[2]]
        return datetime.now(UTC) - timedelta(**{unit: int(found[1])})
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither now, a time ago (30d, 12h, 90m) nor an ISO 8601 date or time"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def window(since: datetime | None, until: datetime | None, days: int) -> tuple[datetime, datetime]:
    """`(since, until)` of the `--since` and `--until` given (`moment`), `since` defaulting to `days`
    days ago and `until` to now. Raises `UsageError` (exit 2) when `since` is not before `until`: that
    range holds nothing."""
    now = datetime.now(UTC)
    start, end = since or now - timedelta(days=days), until or now
    if start >= end:
        raise UsageError(
            f"--since {start.isoformat(timespec='seconds')} is not before --until "
            f"{end.isoformat(timespec='seconds')}: the range is empty (did you swap them?)"
        )
    return start, end
