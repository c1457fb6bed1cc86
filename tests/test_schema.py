"""The request schema, property-based (hypothesis): whatever an agent sends, `parse` gives a valid
request or one clear refusal, never a crash."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from countersign.schema import ApprovalRequestV1, InvalidRequest, parse
from tests.helpers.builders import refund
from tests.helpers.strategies import json_values

FIELDS = list(refund())


@settings(max_examples=300, deadline=None)
@given(
    changes=st.dictionaries(st.sampled_from([*FIELDS, "extra"]), json_values, max_size=4),
    dropped=st.sets(st.sampled_from(FIELDS), max_size=2),
)
@example(changes={"resume": {"\n": None}}, dropped=set())  # an agent's field name with a line break
def test_any_request_is_valid_or_one_clear_refusal(changes: dict[str, Any], dropped: set[str]) -> None:
    request = {k: v for k, v in {**refund(), **changes}.items() if k not in dropped}
    try:
        parsed = parse(ApprovalRequestV1, request)
    except InvalidRequest as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert isinstance(parsed.payload, dict) and len(parsed.payload_sha256) == 64
    assert parsed.key  # an idempotency key can always be formed from a valid request
