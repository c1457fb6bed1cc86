"""The value types of the `countersign` command's flags (argparse `type=`): each returns the value or
raises `argparse.ArgumentTypeError`, which argparse prints as one line, exit 2; and the time range
of `--since` and `--until` (`window`); and the approval request `countersign request` is given by its
flags and `--file` (`request_from_args`, `missing_flags`)."""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from .exceptions import UsageError
from .schema import loads


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    value = _finite(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def wait_seconds(text: str) -> float:
    """An argparse type: how long to wait, a number of seconds of 0 or more (0: look once), as
    `ApprovalClient.wait` takes."""
    value = _finite(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return value


def _finite(text: str) -> float:
    """`text` as a finite float, else NaN (which no bound admits)."""
    try:
        value = float(text)
    except ValueError:
        return float("nan")
    return value if abs(value) < float("inf") else float("nan")


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


def add_window(parser: argparse.ArgumentParser, what: str, days: int | None, until: bool = False) -> None:
    """Add `--since` (and `--until` when `until`) to `parser`, each parsed by `moment`, with one help
    text for every command: `what` names what the range selects, `days` is `--since`'s default in days
    ago (`None`: required)."""
    default = "required" if days is None else f"default {days}d"
    parser.add_argument(
        "--since",
        type=moment,
        required=days is None,
        help=f"{what} from: {default}; a time ago written 30d, 12h or 90m, or an ISO 8601 date or time (UTC)",
    )
    if until:
        parser.add_argument(
            "--until",
            type=moment,
            help=f"{what} before: now (default), a time ago written 2d, 12h or 90m, or ISO 8601 (UTC)",
        )


def since(args: argparse.Namespace, days: int) -> datetime:
    """The start of the range `add_window` read into `args` (`window` with no `--until`)."""
    return window(args.since, None, days)[0]


REQUEST_FLAGS = {
    "action": str,
    "summary": str,
    "reason": str,
    "requester": str,
    "on_behalf_of": str,
    "run_id": str,
    "step": str,
    "idempotency_key": str,
    "confidence": float,
}

REQUIRED_FLAGS = {
    "action": "--action",
    "payload": "--payload",
    "summary": "--summary",
    "requester": "--requester",
}
RESUME_FLAGS = {"queue": "--resume-queue", "func": "--resume-func"}


def json_arg(flag: str, value: str) -> Any:
    """`value` of `flag` as JSON (`schema.loads`: no key twice); raises `UsageError` naming the flag."""
    try:
        return loads(value)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not valid JSON ({exc.msg} at character {exc.pos})") from None
    except ValueError as exc:  # a key twice, an integer too long, nesting too deep
        raise UsageError(f"{flag}: {exc}") from None


def request_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The approval request dict given by `--file` and the flags (flags win)."""
    data: dict[str, Any] = {}
    if args.file is not None:
        try:
            data = json_arg("--file", args.file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"--file: cannot read {args.file} ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise UsageError(f"--file: {args.file} is not UTF-8 text") from None
        if not isinstance(data, dict):
            raise UsageError("--file must hold a JSON object")
    data.update({name: getattr(args, name) for name in REQUEST_FLAGS if getattr(args, name) is not None})
    for name in ("payload", "context"):
        if getattr(args, name) is not None:
            data[name] = json_arg("--" + name, getattr(args, name))
    given = (("queue", args.resume_queue), ("func", args.resume_func), ("webhook", args.resume_webhook))
    flags = {k: v for k, v in given if v}
    if flags:
        resume = data.get("resume")
        data["resume"] = {**resume, **flags} if isinstance(resume, dict) else flags
    return data


def missing_flags(data: dict[str, Any]) -> list[str]:
    """The required flags of `countersign request` that neither the flags nor `--file` gave in
    `data` (`request_from_args`), e.g. `["--resume-func", "--run-id and --step (or
    --idempotency-key)"]`: a resume target is optional, but half of one (a queue without its
    function) is not; a field given but malformed is left to the schema to name."""
    missing = [flag for field, flag in REQUIRED_FLAGS.items() if field not in data]
    resume = data.get("resume")
    if isinstance(resume, dict) and "webhook" not in resume:
        absent = [flag for field, flag in RESUME_FLAGS.items() if field not in resume]
        missing += absent if len(absent) == 1 else []
    if "idempotency_key" not in data:
        key = [flag for field, flag in (("run_id", "--run-id"), ("step", "--step")) if field not in data]
        if key:
            missing.append(f"{' and '.join(key)} (or --idempotency-key)")
    return missing
