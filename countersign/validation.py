"""How a validation error reads, wherever one reaches a person (`countersign request`, `policy check`,
`token create`, a setting, the HTTP API's 422 answers): `error_text`, the one translation of pydantic's
error types into words, after the field's path; and `Matches`, a pattern field that says in words what
it allows, in its error and in the JSON schema, never with its regex
(https://docs.pydantic.dev/latest/concepts/types/#customizing-validation-with-__get_pydantic_core_schema__,
https://docs.pydantic.dev/latest/errors/validation_errors/ for the types)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema


class Matches:
    """`Annotated[str, Matches(pattern, allowed)]`: a string that `pattern` (a JSON Schema regex,
    anchored with ^ and $) matches whole. The JSON schema keeps the `pattern`, with `allowed` as the
    field's description; a value it does not match is the error `string_pattern_mismatch` reading
    `should be <allowed>` (the words a person reads, never the regex), `allowed` and `pattern` in
    its context."""

    def __init__(self, pattern: str, allowed: str) -> None:
        self.pattern, self.allowed = pattern, allowed
        self._regex = re.compile(pattern)

    def matches(self, value: str) -> bool:
        """Whether `value` is allowed."""
        return self._regex.fullmatch(value) is not None

    def _check(self, value: str) -> str:
        if not self.matches(value):
            context = {"allowed": self.allowed, "pattern": self.pattern}
            raise PydanticCustomError("string_pattern_mismatch", "should be {allowed}", context)
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.update(pattern=self.pattern)
        json_schema.setdefault("description", f"{self.allowed[0].upper()}{self.allowed[1:]}.")
        return json_schema


_MESSAGES = {
    "missing": "required",
    "extra_forbidden": "unknown field",
    "model_type": "should be a JSON object",
    "model_attributes_type": "should be a JSON object",
    "dict_type": "should be a JSON object",
    "list_type": "should be a list",
    "string_type": "should be a string",
    "bool_type": "should be true or false",
    "int_type": "should be a whole number",
    "int_parsing": "should be a whole number",
    "int_from_float": "should be a whole number",
    "float_type": "should be a number",
    "float_parsing": "should be a number",
    "finite_number": "should be a finite number (not NaN or infinity)",
    "string_too_short": "should be at least {min_length} characters",
    "string_too_long": "should be at most {max_length} characters",
    "too_short": "should have at least {min_length} items",
    "too_long": "should have at most {max_length} items",
    "greater_than": "should be more than {gt}",
    "greater_than_equal": "should be {ge} or more",
    "less_than": "should be less than {lt}",
    "less_than_equal": "should be {le} or less",
    "literal_error": "should be {expected}",
    "url_parsing": "should be a URL ({error})",
    "url_type": "should be a URL",
}
"""The one translation of pydantic's error types into what a person reads (`error_text`), after the
field's path: what is allowed, never a regex (`Matches` words its own)."""
_SUBJECT = re.compile(r"^(Value error, |(Input|String|List|Dictionary|Value|Object) (?=should))")


def _number(value: Any) -> Any:
    """`value`, a whole float written as an int (`le=1` on a float field says 1, not 1.0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def error_text(error: Mapping[str, Any]) -> str:
    """What one pydantic error (an `ErrorDetails`, or FastAPI's dict of one) says, as a person reads it
    after the field's path: `should be at most 3000 characters`, `required`, `should be a Slack user
    id: …`. Its `type` is looked up in `_MESSAGES` and filled from its `ctx`; a type not there keeps
    pydantic's words without their subject (`Input should be …` reads `should be …`), as do our
    validators' `ValueError`s."""
    kind, context = error.get("type", ""), {k: _number(v) for k, v in (error.get("ctx") or {}).items()}
    if kind == "string_too_short" and context.get("min_length") == 1:
        return "should not be empty"
    template = _MESSAGES.get(kind)
    if template is not None:
        try:
            return template.format(**context)
        except (KeyError, IndexError):
            pass
    return _SUBJECT.sub("", str(error.get("msg", "is not valid")))


def field_name(part: str | int) -> str:
    """A field name (or list index) as written in an error or a path: plain when it is a plain
    ASCII name, else JSON-quoted with non-ASCII characters escaped (the agent chose it, and it may
    hold dots, spaces, line breaks or characters that look like others)."""
    text = str(part)
    return text if (text.isascii() and text.isidentifier()) or isinstance(part, int) else json.dumps(text)


def not_json(value: Any, where: str = "") -> str | None:
    """Why `value` (an agent's payload or context, as Python) is not JSON, in words, or None: the
    first key that is not a string (`the key 1 of items should be a string`, the key's `repr`), or
    the first value of a type JSON has not, or that canonical JSON cannot hold (NaN, infinities,
    integers beyond ±2**53-1), at its path (`amount is a Decimal, …: send it as a string, e.g.
    "201.00"`, `x is NaN, …`). Canonical JSON's numbers are IEEE 754 doubles (RFC 8785, section 3.2.2.3,
    https://www.rfc-editor.org/rfc/rfc8785), so a `Decimal` could not keep its digits."""
    if isinstance(value, (list, tuple, dict)):
        pairs = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in pairs:
            if isinstance(value, dict) and not isinstance(key, str):
                return f"the key {key!r}{f' of {where}' if where else ''} should be a string"
            step = f"[{key}]" if isinstance(key, int) else f"{'.' if where else ''}{field_name(key)}"
            if (found := not_json(child, where + step)) is not None:
                return found
        return None
    if isinstance(value, Decimal):
        return (
            f"{where} is a Decimal, which canonical JSON (RFC 8785) has no type for: "
            f'send it as a string, e.g. "{value}"'
        )
    if isinstance(value, float) and not math.isfinite(value):
        named = "NaN" if math.isnan(value) else "infinity" if value > 0 else "minus infinity"
        return (
            f"{where} is {named}, which canonical JSON (RFC 8785) has no form for: send a finite number "
            "or a string"
        )
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        return (
            f"{where} is {value}, beyond the integers canonical JSON (RFC 8785, an IEEE 754 double) keeps "
            f'exactly (at most {MAX_SAFE_INTEGER} either side of 0): send it as a string, e.g. "{value}"'
        )
    if value is not None and not isinstance(value, (str, int, float)):
        kind = type(value).__name__
        kind = kind if kind == "bytes" else f"a {kind}"  # "is bytes", "is a set"
        return f"{where} is {kind}, which JSON has no type for: send a string, number, list or object"
    return None


MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer an IEEE 754 double holds exactly, which RFC 8785 (section 3.2.2.3) allows."""
