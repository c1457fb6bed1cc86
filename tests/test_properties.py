"""Property-based tests (hypothesis): whatever an agent or the network sends, the answer is a
valid request or one clear refusal, never a crash or a 500."""

from __future__ import annotations

import json
import time
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from countersign.sandbox import Sandbox
from countersign.schema import ApprovalRequestV1, InvalidRequest, parse

from .test_flow import refund

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payload=st.dictionaries(
        st.sampled_from(["type", "user", "actions", "view", "team", "trigger_id", "container", "channel"]),
        json_values,
        max_size=6,
    )
)
def test_any_signed_interactivity_payload_gets_an_answer_not_a_500(
    sandbox: tuple[Sandbox, str], bot: str, payload: dict[str, Any]
) -> None:
    status, _ = sandbox[0].send_signed(payload)
    assert status < 500, json.dumps(payload)[:500]
    status, _ = sandbox[0].send_signed(payload, timestamp=int(time.time()) - 400)
    assert status == 401
