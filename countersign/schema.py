"""The approval request, schema version 1 (DESIGN.md, "Approval request"), and its intake message:
what an agent sends, checked the same way by the agent's client and by the router's intake.

Validation is strict: no type coercion (`"0.9"` is not a confidence, `7` is not a summary) and no
unknown fields, so an agent's mistake is an error at `request()` instead of a surprising card. Field
names in `payload` and `context` must be visible and tell apart (`check_keys`), so no card can show a
decoy field named like the one that runs.
"""

from __future__ import annotations

import hashlib
import json
import sys
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

import rfc8785
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .defaults import ROUTER_QUEUES
from .exceptions import InvalidRequest
from .untrusted import escaped
from .validation import Matches, error_text, field_name, not_json

M = TypeVar("M", bound=BaseModel)
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_DEPTH = 32


SLACK_USER_ID = Matches(
    r"^[UW][A-Z0-9]{2,31}$", "a Slack user id: U or W, then 2 to 31 capitals or digits (e.g. U0123ABC)"
)
ACTION_CLASS = Matches(
    r"^[a-z0-9_.-]{1,64}$", "1 to 64 lower-case letters, digits, '_', '.' or '-' (e.g. issue_refund)"
)
"""What an action class may be (`ApprovalRequestV1.action`, the policy's `actions`, a token's action
classes)."""
QUEUE_NAME = Matches(
    r"^[A-Za-z0-9_.:-]{1,128}$", "1 to 128 letters, digits, '_', '.', ':' or '-' (e.g. refund-agent)"
)
ActionClass = Annotated[str, ACTION_CLASS]
SlackUserId = Annotated[str, SLACK_USER_ID]


def payload_sha256(payload: dict[str, Any]) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical JSON of `payload` (https://www.rfc-editor.org/rfc/rfc8785).

    Raises `ValueError` for what RFC 8785 cannot represent (NaN, infinities, integers beyond
    ±2**53-1) and for nesting deeper than `MAX_DEPTH`.
    """
    return hashlib.sha256(_canonical(payload)).hexdigest()


def _canonical(payload: dict[str, Any]) -> bytes:
    _check_depth(payload, MAX_DEPTH)
    try:
        return rfc8785.dumps(payload)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise ValueError(not_json(payload) or f"cannot be canonical JSON ({exc})") from None


def _check_depth(value: Any, budget: int) -> None:
    """Refuse nesting deeper than `MAX_DEPTH`, and NUL characters (PostgreSQL cannot store them)."""
    if budget < 0:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("contains a NUL character (U+0000)")
    children = (
        [*value.keys(), *value.values()]
        if isinstance(value, dict)
        else value
        if isinstance(value, list)
        else ()
    )
    for child in children:
        _check_depth(child, budget - 1)


# Characters a reader cannot see in a field name: besides the categories in `_HIDDEN_CATEGORIES`
# (format characters such as U+200B ZERO WIDTH SPACE, controls, separators, private use,
# unassigned), the combining grapheme joiner, the fillers Unicode draws as blank (Hangul, Khmer,
# Braille) and the variation selectors.
_HIDDEN_CATEGORIES = {"Cf", "Cc", "Co", "Cn", "Zl", "Zp"}
_BLANK = {
    *(0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0),
    *range(0xFE00, 0xFE10),
    *range(0xE0100, 0xE01F0),
}


def loads(text: str | bytes) -> Any:
    """JSON `text` as Python, refusing an object that names one key twice: RFC 8259 (section 4)
    says names SHOULD be unique and leaves which one counts to each parser, so two readers of one
    document (the router, a reviewer's tool, an executor in another language) could see different
    values. Raises `json.JSONDecodeError` for text that is not JSON, and `ValueError` with one line
    for a repeated key ("key written twice: amount"), an integer longer than Python reads
    (`sys.get_int_max_str_digits()`, 4300 digits by default: "an integer of 5000 digits at
    payload.n, …") and nesting deeper than Python's parser goes ("nested deeper than 32 levels",
    `MAX_DEPTH`, the most a request may nest anyway)."""
    long: list[int] = []

    def integer(digits: str) -> Any:
        limit = sys.get_int_max_str_digits()
        if limit and len(digits.lstrip("-")) > limit:
            long.append(len(digits.lstrip("-")))
            return _LONG_INTEGER
        return int(digits)

    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_int=integer)
        if long:
            raise ValueError(
                f"an integer of {long[0]} digits at {_path_of(data, _LONG_INTEGER) or 'the top'}, over the "
                f"{sys.get_int_max_str_digits()} digits a JSON integer may have here; send it as a string"
            )
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    return data


_LONG_INTEGER = object()
"""What `loads` reads an integer too long for Python as, until it names where it is."""


def _path_of(value: Any, wanted: object, where: str = "") -> str | None:
    """The path (`payload.items[2].n`) of the first `wanted` within `value`, or None."""
    if value is wanted:
        return where
    pairs = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in pairs:
        step = f"[{key}]" if isinstance(key, int) else f"{'.' if where else ''}{field_name(key)}"
        if (found := _path_of(child, wanted, where + step)) is not None:
            return found
    return None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"key written twice: {', '.join(field_name(key) for key in twice)}")
    return dict(pairs)


def fold(name: str) -> str:
    """`name` as it looks: NFKC-normalised, case-folded, without whitespace. Two field names that
    fold alike (`amount`, `AMOUNT`, fullwidth `amount`, `amount `) are the same name to a reviewer."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return "".join(c for c in folded if not c.isspace())


def check_keys(value: Any, where: str) -> None:
    """Raise `ValueError` for field names a reviewer cannot tell apart, in every object within
    `value` (`where` names it, e.g. `payload`): a name with a character that does not show
    (`_hidden`), or two names of one object that fold alike (`fold`). Names are JSON-escaped in
    the message, so what is hidden shows."""
    if isinstance(value, list):
        for number, item in enumerate(value):
            check_keys(item, f"{where}[{number}]")
    if not isinstance(value, dict):
        return
    seen: dict[str, str] = {}
    for key, child in value.items():
        path = f"{where}.{field_name(key)}"
        hidden = _hidden(key)
        if hidden:
            raise ValueError(f"key {path} contains {hidden}, an invisible or look-alike character; rename it")
        twin = seen.setdefault(fold(key), key)
        if twin != key:
            raise ValueError(
                f"keys {where}.{field_name(twin)} and {path} look alike (the same after NFKC normalisation "
                "and case folding); rename one"
            )
        check_keys(child, path)


def check_requester(name: str) -> str:
    """`name` when a reviewer can read it as the requester it is: raises `ValueError` for one with a
    character that does not show or passes for another (`_hidden`: `refund\u200b-agent` would show on
    the card as `refund-agent`)."""
    hidden = _hidden(name)
    if hidden:
        raise ValueError(f"{field_name(name)} contains {hidden}, an invisible or look-alike character")
    return name


def _hidden(name: str) -> str | None:
    """`U+200B ZERO WIDTH SPACE` for the first character of `name` that does not show or passes
    for another (any space but U+0020), else None."""
    for char in name:
        category = unicodedata.category(char)
        if category in _HIDDEN_CATEGORIES or ord(char) in _BLANK or (category == "Zs" and char != " "):
            return f"U+{ord(char):04X} {unicodedata.name(char, f'(category {category})')}"
    return None


class QueueResume(BaseModel):
    """Resume by RQ: the decision goes to an RQ job `func(decision)` on the queue `queue`.

    `queue` is the agent's own queue, which the agent's own worker (`countersign agent-worker`, with
    the agent's code) takes: never one of countersign's (`defaults.ROUTER_QUEUES`), whose workers
    run only countersign's jobs (DESIGN.md, invariant 11); the API binds it further to the token's
    queues (`api.auth.may_create`). `func` is checked for its form only (a dotted path of Python
    identifiers, module then function): whether it imports is up to the agent's worker, whose code
    the requester may not have. One that does not is said on the card once the worker tries it
    (`agent/callbacks.py`).
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    queue: Annotated[str, QUEUE_NAME]
    func: Annotated[str, Field(max_length=255)]

    @field_validator("queue")
    @classmethod
    def _agents_queue(cls, value: str) -> str:
        if value in ROUTER_QUEUES:
            raise ValueError(
                f"{value!r} is countersign's own queue, whose worker runs only countersign's jobs; "
                "name the queue your agent's worker takes (e.g. refund-agent)"
            )
        return value

    @field_validator("func")
    @classmethod
    def _import_path(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) < 2 or not all(part.isidentifier() for part in parts):
            raise ValueError(
                "should be a dotted import path, module then function "
                "(e.g. examples.refund_agent.resume), which the agent's worker imports"
            )
        return value


ALLOW_HTTP = "allow_http_webhooks"
"""The validation context key (`parse(..., context={ALLOW_HTTP: True})`) that lets a webhook use
`http://` on any host: `COUNTERSIGN_WEBHOOK_ALLOW_HTTP` where the request is checked."""
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
MAX_URL_LENGTH = 2048


class WebhookResume(BaseModel):
    """Resume by webhook: the decision is POSTed to `webhook`, signed per Standard Webhooks
    (`router/webhooks.py`).

    The URL must be absolute `https://`, or `http://` for `localhost`, `127.0.0.1` and `[::1]`
    (or any host where the validation context sets `ALLOW_HTTP`: the decision carries its grant
    and payload, which plain HTTP shows to the network); at most 2048 characters, with a host, and
    without user name, password or fragment (the signature authenticates countersign; the URL is
    kept in the database and shown by `countersign show`).
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    webhook: Annotated[str, Field(min_length=1, max_length=MAX_URL_LENGTH)]

    @field_validator("webhook")
    @classmethod
    def _url(cls, value: str, info: ValidationInfo) -> str:
        if any(char.isspace() or not char.isprintable() for char in value):
            raise ValueError("should be a URL without spaces or control characters")
        try:
            parts = urlsplit(value)
            host = parts.hostname
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError:
            raise ValueError("should be an absolute https:// URL") from None
        if parts.scheme not in ("https", "http") or not host:
            raise ValueError("should be an absolute https:// URL (e.g. https://agent.example.com/decisions)")
        if parts.username is not None or parts.password is not None or parts.fragment:
            raise ValueError(
                "may not hold a user name, password or #fragment (the signature authenticates us)"
            )
        allow_http = bool((info.context or {}).get(ALLOW_HTTP))
        if parts.scheme == "http" and host not in LOOPBACK_HOSTS and not allow_http:
            raise ValueError(
                "should use https:// (http:// only for localhost, 127.0.0.1 or [::1], unless the "
                "router sets COUNTERSIGN_WEBHOOK_ALLOW_HTTP=true)"
            )
        return value


def _resume_kind(value: Any) -> str:
    """The tag of a `resume` value: `webhook` when it names one, else `rq`."""
    if isinstance(value, dict):
        return "webhook" if "webhook" in value else "rq"
    return "webhook" if isinstance(value, WebhookResume) else "rq"


def _one_shape(value: Any) -> Any:
    """`value`, unless it is an object naming both a webhook and a queue or func (`ValueError`)."""
    if isinstance(value, dict) and "webhook" in value and ("queue" in value or "func" in value):
        raise ValueError("give queue and func, or webhook, not both")
    return value


RESUME_TAGS = frozenset({"rq", "webhook"})
Resume = Annotated[
    Annotated[QueueResume, Tag("rq")] | Annotated[WebhookResume, Tag("webhook")],
    Discriminator(_resume_kind),
    BeforeValidator(_one_shape),
]
"""Where the decision goes: `{"queue", "func"}` (an RQ job, `QueueResume`) or `{"webhook"}` (an
HTTP POST, `WebhookResume`), never both (one error says so); an object with `webhook` is read as
the second, any other as the first, so every error names the fields of the shape the agent meant."""


class ApprovalRequestV1(BaseModel):
    """An approval request as an agent sends it.

    The idempotency key is `idempotency_key` when given, else `requester:run_id:step` (both
    `run_id` and `step` are then required). `payload` is at most 64 KiB as canonical JSON.
    `resume` (where the decision goes) may be left out: then nothing is enqueued or POSTed, and the
    agent learns the decision by waiting for it in process (`ApprovalClient.wait`) or reading it
    (`ApprovalClient.get`).
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    action: ActionClass
    payload: dict[str, Any]
    summary: Annotated[str, Field(min_length=1, max_length=3000)]
    reason: Annotated[str, Field(max_length=20_000)] | None = None
    context: dict[str, Any] | None = None
    requester: Annotated[str, Field(min_length=1, max_length=128)]
    on_behalf_of: SlackUserId | None = None
    run_id: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    step: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    resume: Resume | None = None

    @field_validator("summary", "reason", "requester", "run_id", "step", "idempotency_key")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("contains a NUL character (U+0000)")
        return value

    @field_validator("requester")
    @classmethod
    def _visible_requester(cls, value: str) -> str:
        return check_requester(value)

    @field_validator("payload", "context")
    @classmethod
    def _canonical_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(_canonical(value)) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"larger than {MAX_PAYLOAD_BYTES} bytes as canonical JSON")
        return value

    @field_validator("payload", "context")
    @classmethod
    def _visible_keys(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if value is not None:
            check_keys(value, info.field_name or "payload")
        return value

    @model_validator(mode="after")
    def _has_key(self) -> ApprovalRequestV1:
        if self.idempotency_key is None:
            if self.run_id is None or self.step is None:
                raise ValueError("give idempotency_key, or both run_id and step")
            if any(":" in part for part in (self.requester, self.run_id, self.step)):
                raise ValueError(
                    "requester, run_id and step make the key requester:run_id:step, so they may "
                    "not contain ':' (give idempotency_key instead)"
                )
        return self

    @property
    def key(self) -> str:
        """The idempotency key."""
        return self.idempotency_key or f"{self.requester}:{self.run_id}:{self.step}"

    @property
    def payload_sha256(self) -> str:
        """SHA-256 of the payload's canonical JSON."""
        return payload_sha256(self.payload)


class IntakeMessage(BaseModel):
    """What `ApprovalClient.request` puts on the `countersign` queue for the intake job."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    v: int = 1
    request_id: Annotated[str, Matches(r"^[0-9A-HJKMNP-TV-Z]{26}$", "a ULID: 26 capitals and digits")]
    request: ApprovalRequestV1


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 UTC with a `Z` and always six decimals, e.g. `2026-11-29T08:00:00.123456Z` (also
    `…:17.000000Z` for a whole second, so every time has one shape), as times are written in the
    decision and the CLI's JSON; None stays None."""
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z") if moment else None


def parse(model: type[M], data: Any, context: dict[str, Any] | None = None) -> M:
    """Validate `data` as `model` (with the validation `context`, e.g. `{ALLOW_HTTP: True}`),
    raising `InvalidRequest` with every problem on one line."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise InvalidRequest(one_line(exc)) from None
    except RecursionError:
        raise InvalidRequest(f"request: nested deeper than {MAX_DEPTH} levels") from None


def one_line(exc: ValidationError, root: str = "request") -> str:
    """`'payload: should be a JSON object; action: required'` from a ValidationError
    (`errors_line`); `root` names the whole document when the error is about it."""
    return errors_line(exc.errors(), root)


def errors_line(errors: Iterable[Mapping[str, Any]], root: str, outer: Collection[str] = ()) -> str:
    """Pydantic's errors (a ValidationError's `errors()`, or FastAPI's dicts of them) as one line,
    `'<where>: <words>'` joined by `; `: where is the error's location (`field_name`s joined by dots)
    without the parts in `outer` (FastAPI's `body`, `query`…, which name no field) or the tag
    pydantic puts after `resume`, and `root` when nothing is left; the words are `error_text`'s.
    The line is `untrusted.escaped` (controls, bidirectional characters and line breaks as
    `\\uXXXX`), so it stays one line, shown in its stored order."""
    parts = []
    for error in errors:
        loc, words = _without_tags([p for p in error.get("loc", ()) if p not in outer]), error_text(error)
        if len(loc) >= 2 and loc[-1] == "[key]":  # pydantic's place for an object's key: name the key
            # as `not_json` does, by its repr, which pydantic's str of a non-string key (`(1, 2)`) is
            loc, words = loc[:-2], f"the key {loc[-2]} {words}"
        where = ".".join(field_name(p) for p in loc) or root
        parts.append(f"{where}: {words}")
    return escaped("; ".join(parts))


def _without_tags(loc: Sequence[str | int]) -> list[str | int]:
    """An error's location without the tag pydantic puts after `resume` (`resume.webhook.webhook`
    is `resume.webhook`)."""
    return [p for i, p in enumerate(loc) if not (p in RESUME_TAGS and i > 0 and loc[i - 1] == "resume")]
