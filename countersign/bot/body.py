"""A Slack request body, parsed once and strictly: the one object every check in front of Bolt and
Bolt itself read (`bot.web`).

Slack posts an interaction (a button click, a modal submit or close) as a form body,
`Content-Type: application/x-www-form-urlencoded`, with one field, `payload`, that holds the JSON
(https://docs.slack.dev/interactivity/handling-user-interaction, "payloads"). A slash command comes
as a form too, its fields (`command`, `text`, `user_id`, `response_url`, ...) at the top level and no
`payload` (https://docs.slack.dev/interactivity/implementing-slash-commands). An Events API event
(`app_home_opened`) is a JSON body, `Content-Type: application/json`, holding one object
(https://docs.slack.dev/apis/events-api/). countersign asks Slack
for nothing else (manifest.yml), so any other body is refused rather than guessed at. Guessing is
what let two readers disagree: a parser that takes the first of two `payload` fields and one that
takes the last, or one that reads a raw JSON body that the other skips, each check one payload and
act on another.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from ..exceptions import BadSlackBody

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
EVENT_TYPES = ("event_callback", "url_verification")
"""The Events API bodies countersign takes (https://docs.slack.dev/apis/events-api/): an event, and
the challenge Slack sends when the Request URL is set, which Bolt answers. Only they come as JSON,
and they never come as a form."""


def parse(raw: bytes, content_type: str) -> dict[str, Any]:
    """The JSON object in the one `payload` field of a form body `raw` (as received, UTF-8), or for
    a slash command (a form with a `command` field) its fields as `{name: text}`.

    Raises `BadSlackBody`, whose message says what is wrong, for: another content type (or a
    charset other than UTF-8), bytes that are not UTF-8 (also percent-encoded), a field that is not
    `name=value`, any field but `payload` or that field twice, a slash command with a field twice,
    and a payload that is not one JSON object (empty, nested too deep for the parser, `NaN`, or an
    object with a key twice). A JSON body must be one such object, in UTF-8, whose `type` is one of
    `EVENT_TYPES`; a form's payload must not be.
    """
    if _media(content_type) == JSON:
        return _event(raw, content_type)
    _check_content_type(content_type, FORM)
    try:
        text = raw.decode("utf-8")
        fields = urllib.parse.parse_qsl(text, keep_blank_values=True, strict_parsing=True, errors="strict")
    except ValueError as exc:  # UnicodeDecodeError is one
        raise BadSlackBody(f"the body is not a UTF-8 form ({exc})") from None
    names = [name for name, _ in fields]
    if "command" in names and "payload" not in names:
        if len(set(names)) != len(names):
            raise BadSlackBody("a slash command's form has a field twice")
        return dict(fields)
    if names != ["payload"]:
        shown = [name[:40] for name in names[:5]]
        raise BadSlackBody(f"the form must have one field, payload; it has {len(names)}: {shown}")
    payload = _json_object(fields[0][1])
    if payload.get("type") in EVENT_TYPES:
        raise BadSlackBody("an event comes as a JSON body, not a form")
    return payload


def _event(raw: bytes, content_type: str) -> dict[str, Any]:
    _check_content_type(content_type, JSON)
    try:
        body = _json_object(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadSlackBody(f"the body is not UTF-8 JSON ({exc})") from None
    if body.get("type") not in EVENT_TYPES:
        raise BadSlackBody(f"a JSON body must be an event ({', '.join(EVENT_TYPES)})")
    return body


def _media(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def _check_content_type(content_type: str, expected: str) -> None:
    media, *parameters = (part.strip().lower() for part in content_type.split(";"))
    charsets = [p.partition("=")[2].strip('"') for p in parameters if p.startswith("charset=")]
    if media != expected or any(charset != "utf-8" for charset in charsets):
        raise BadSlackBody(f"Content-Type must be {FORM} or {JSON} (UTF-8), not {content_type[:100]!r}")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:
        raise BadSlackBody(f"the payload is not JSON ({type(exc).__name__}: {str(exc)[:100]})") from None
    if not isinstance(value, dict):
        raise BadSlackBody(f"the payload must be a JSON object, not {type(value).__name__}")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("an object has a key twice")
    return value


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")
