"""The request schema, property-based (hypothesis): whatever an agent sends, `parse` gives a valid
request or one clear refusal, never a crash."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from countersign.schema import (
    ALLOW_HTTP,
    ApprovalRequestV1,
    InvalidRequest,
    QueueResume,
    WebhookResume,
    parse,
)
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


# The decoy of issue 12: a key that shows as `amount` first, eight fillers, then the `amount` that runs.
DECOY = {"amount\u200b": "10.00", **{f"note{n}": "x" for n in range(8)}, "amount": "9000.00"}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (DECOY, 'key payload."amount\\u200b" contains U+200B ZERO WIDTH SPACE'),
        ({"amount\u2060": "1"}, 'key payload."amount\\u2060" contains U+2060 WORD JOINER'),
        ({"\ufeffamount": "1"}, 'key payload."\\ufeffamount" contains U+FEFF ZERO WIDTH NO-BREAK SPACE'),
        ({"am\u00adount": "1"}, 'key payload."am\\u00adount" contains U+00AD SOFT HYPHEN'),
        ({"amount\u202e": "1"}, 'key payload."amount\\u202e" contains U+202E RIGHT-TO-LEFT OVERRIDE'),
        ({"amount\u00a0": "1"}, 'key payload."amount\\u00a0" contains U+00A0 NO-BREAK SPACE'),
        ({"amount\u3164": "1"}, 'key payload."amount\\u3164" contains U+3164 HANGUL FILLER'),
        ({"amount\n": "1"}, 'key payload."amount\\n" contains U+000A (category Cc)'),
        ({"Amount": "1", "amount": "2"}, "keys payload.Amount and payload.amount look alike"),
        ({"amount": "1", "\uff41mount": "2"}, 'keys payload.amount and payload."\\uff41mount" look alike'),
        ({"amount": "1", "amount ": "2"}, 'keys payload.amount and payload."amount " look alike'),
        ({"lines": [{"ok": 1}, {"x\u200b": 1}]}, 'key payload.lines[1]."x\\u200b" contains U+200B'),
        ({"refund": {"Amount": 1, "AMOUNT": 2}}, "keys payload.refund.Amount and payload.refund.AMOUNT look"),
    ],
)
def test_field_names_a_reviewer_cannot_tell_apart_are_refused(payload: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(ApprovalRequestV1, refund(payload=payload))
    assert str(refused.value).startswith(f"payload: {message}")
    assert "\n" not in str(refused.value)


def test_a_requester_that_would_show_as_another_is_refused() -> None:
    for hidden in ("refund\u200b-agent", "refund-agent\u202e", "refund\u00a0agent"):
        with pytest.raises(InvalidRequest, match=r"^requester: .* an invisible or look-alike character"):
            parse(ApprovalRequestV1, refund(requester=hidden))
    assert parse(ApprovalRequestV1, refund(requester="refund agent")).requester == "refund agent"


def test_context_keys_are_checked_too_and_plain_names_pass() -> None:
    with pytest.raises(InvalidRequest, match=r'^context: key context\."ticket\\u200b" contains U\+200B'):
        parse(ApprovalRequestV1, refund(context={"ticket\u200b": 1}))
    plain = {"first name": "Ada", "line_items": [{"sku": "a"}], "Straße": 1, "amount": "1"}
    assert parse(ApprovalRequestV1, refund(payload=plain)).payload == plain


@pytest.mark.parametrize(
    ("resume", "message"),
    [
        ({"webhook": "http://agent.example.com/hook"}, "resume.webhook: should use https://"),
        ({"webhook": "ftp://agent.example.com/hook"}, "resume.webhook: should be an absolute https:// URL"),
        ({"webhook": "/decisions"}, "resume.webhook: should be an absolute https:// URL"),
        ({"webhook": "https://user:pw@agent.example.com/"}, "resume.webhook: may not hold a user name"),
        ({"webhook": "https://agent.example.com/#x"}, "resume.webhook: may not hold a user name"),
        ({"webhook": "https://agent.example.com/a b"}, "resume.webhook: should be a URL without spaces"),
        ({"webhook": "https://a.example.com:99999/"}, "resume.webhook: should be an absolute https:// URL"),
        ({"webhook": 7}, "resume.webhook: should be a string"),
        (
            {"webhook": "https://a.example.com/", "queue": "q"},
            "resume: give queue and func, or webhook, not both",
        ),
        ({"queue": "q"}, "resume.func: required"),
        ({}, "resume.queue: required; resume.func: required"),
        ("https://a.example.com/", "resume: should be a JSON object"),
    ],
)
def test_a_resume_is_an_rq_job_or_a_webhook_and_a_bad_one_is_named_in_one_line(
    resume: Any, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(ApprovalRequestV1, refund(resume=resume))
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize(
    "url",
    [
        "https://agent.example.com/decisions",
        "http://localhost:8080/d",
        "http://127.0.0.1/d",
        "http://[::1]:9/d",
    ],
)
def test_a_webhook_is_https_or_plain_http_on_loopback(url: str) -> None:
    resume = parse(ApprovalRequestV1, refund(resume={"webhook": url})).resume
    assert isinstance(resume, WebhookResume) and resume.webhook == url


def test_plain_http_elsewhere_is_taken_only_where_the_setting_allows_it() -> None:
    request = refund(resume={"webhook": "http://agent.internal/decisions"})
    with pytest.raises(InvalidRequest, match="COUNTERSIGN_WEBHOOK_ALLOW_HTTP"):
        parse(ApprovalRequestV1, request)
    resume = parse(ApprovalRequestV1, request, {ALLOW_HTTP: True}).resume
    assert isinstance(resume, WebhookResume)
    assert isinstance(parse(ApprovalRequestV1, refund()).resume, QueueResume)
