"""A hostile Slack body over real HTTP, with a valid Slack signature: whatever its form, the checks in
front of Bolt and Bolt read one and the same payload (`bot.body`, `bot.guard`, `bot.web`), so a body
built to pass the checks as one payload and reach Bolt as another is refused; a malformed one gets a
400 and changes nothing; and no body, however made, gets a 500."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis
from sqlalchemy import func, select

from countersign.agent import ApprovalClient
from countersign.router.cards import APPROVE_ACTION, EDIT_CALLBACK
from countersign.sandbox import Sandbox
from countersign.sandbox.identity import API_APP_ID
from countersign.store import Store
from countersign.store.models import Base
from tests.helpers import wait_for
from tests.helpers.builders import events, post_card, status
from tests.helpers.signed import FORM, form, post_signed
from tests.helpers.strategies import json_values

RIVAL = {"id": "T0RIVAL", "domain": "rival"}  # another workspace the app is installed in


def _rival(click: dict[str, Any]) -> dict[str, Any]:
    """`click` as a user of the rival workspace would send it there: Slack signs it with the same
    app's signing secret."""
    return {**click, "team": RIVAL, "user": {**click["user"], "team_id": RIVAL["id"]}}


def _without_team(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in payload.items() if key != "team"}


def _team_twice(payload: dict[str, Any]) -> bytes:
    """`payload` as JSON whose `team` key comes twice: first the rival's, then ours."""
    text = json.dumps(payload)[:-1] + ', "team": {"id": "T0SANDBOX"}}'
    return urllib.parse.urlencode({"payload": text}).encode()


Attack = Callable[[dict[str, Any], dict[str, Any]], tuple[bytes, str, int]]
ATTACKS: dict[str, Attack] = {
    "two_payload_fields_ours_first": lambda ours, rival: (form(ours, rival), FORM, 400),
    "two_payload_fields_rival_first": lambda ours, rival: (form(rival, ours), FORM, 400),
    "a_raw_json_body": lambda ours, rival: (json.dumps(rival).encode(), "application/json", 400),
    "a_raw_json_body_labelled_a_form": lambda ours, rival: (json.dumps(rival).encode(), FORM, 400),
    "a_second_form_field": lambda ours, rival: (form(ours) + b"&team_id=T0RIVAL", FORM, 400),
    "a_json_key_twice": lambda ours, rival: (_team_twice(rival), FORM, 400),
    "no_team_key": lambda ours, rival: (form(_without_team(rival)), FORM, 403),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_click_for_another_workspace_is_refused_whatever_form_its_body_takes(
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
    attack: str,
) -> None:
    """An approver's click on our card, wrapped so that one reader could see our workspace and
    another the rival's. Refused before Bolt, so nothing is started that could decide it later: no
    vote, no audit event, no Slack call."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    ours = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    body, content_type, expected = ATTACKS[attack](ours, _rival(ours))
    calls = len(sb.calls())

    code, answer = post_signed(bot + "/slack/events", body, sb.signing_secret, content_type)

    assert (code, list(json.loads(answer))) == (expected, ["error"]), answer
    assert status(store, request_id) == "pending" and store.votes(request_id) == []
    assert events(store, request_id) == ["requested", "card_posted"]
    assert len(sb.calls()) == calls


OUR_TEAM = {"id": "T0SANDBOX"}
CLICK = {
    "type": "block_actions",
    "api_app_id": API_APP_ID,
    "team": OUR_TEAM,
    "user": {"id": "U0LEAD", "team_id": "T0SANDBOX"},
    "actions": [{"action_id": APPROVE_ACTION, "value": "01J0NOSUCHREQUEST0000000000"}],
}  # a well-formed click, for a request no one made
VIEW_WITHOUT_TYPE = {
    "type": "view_submission",
    "api_app_id": API_APP_ID,
    "team": OUR_TEAM,
    "user": {"id": "U0LEAD", "team_id": "T0SANDBOX"},
    "view": {"id": "V0FORM", "callback_id": EDIT_CALLBACK, "private_metadata": "", "state": {"values": {}}},
}
MALFORMED: dict[str, tuple[bytes, str | None]] = {
    "bytes_that_are_not_utf8": (b"payload=%7B%22type%22%3A%22block_actions\xe9%22%7D", FORM),
    "percent_encoded_bytes_that_are_not_utf8": (b"payload=%7B%22type%22%3A%22%E9%22%7D", FORM),
    "a_form_sent_as_json": (form(CLICK), "application/json"),
    "a_form_without_content_type": (form(CLICK), None),
    "an_empty_payload": (b"payload=", FORM),
    "an_empty_body": (b"", FORM),
    "a_hundred_thousand_brackets": (b"payload=" + b"[" * 100_000, FORM),
    "a_hundred_thousand_brackets_as_json": (b"[" * 100_000, "application/json"),
    "nan_in_the_payload": (b"payload=%7B%22type%22%3ANaN%7D", FORM),
    "a_view_without_type": (form(VIEW_WITHOUT_TYPE), FORM),
    "a_view_without_type_as_json": (json.dumps(VIEW_WITHOUT_TYPE).encode(), "application/json"),
}


def _rows(store: Store) -> dict[str, int]:
    """How many rows each of countersign's tables holds."""
    with store.engine.connect() as connection:
        return {
            table.name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in Base.metadata.sorted_tables
        }


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_signed_body_gets_400_and_changes_nothing(
    store: Store, sandbox: tuple[Sandbox, str], bot: str, case: str
) -> None:
    sb, _ = sandbox
    body, content_type = MALFORMED[case]
    calls = len(sb.calls())

    code, answer = post_signed(bot + "/slack/events", body, sb.signing_secret, content_type)

    assert code == 400, answer
    assert json.loads(answer)["error"]  # one line saying what is wrong
    assert set(_rows(store).values()) == {0}
    assert len(sb.calls()) == calls


def test_bolts_own_headers_from_a_client_do_not_steer_bolt(
    client: ApprovalClient, redis: Redis, store: Store, sandbox: tuple[Sandbox, str], bot: str
) -> None:
    """`X-Slack-Bolt-Lazy-Only` is Bolt's internal header for running lazy listeners only; from a
    client it would make Bolt skip the Approve listener. The adapter drops it: the click counts."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    click = sb.click_payload("C0FINANCE", card["ts"], APPROVE_ACTION, "U0LEAD")
    lazy = {"X-Slack-Bolt-Lazy-Only": "1", "X-Slack-Bolt-Lazy-Function-Name": "nothing"}
    assert post_signed(bot + "/slack/events", form(click), sb.signing_secret, headers=lazy)[0] == 200
    wait_for(lambda: status(store, request_id) == "approved", what="the click's approval")


# What the fuzz sends: bodies near Slack's form and far from it. Payloads that reach Bolt name only
# actions and views countersign does not have, so Bolt answers them itself (404) and no decision
# work outlives an example.
_texts = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
_content_types = st.none() | _texts | st.sampled_from(
    [FORM, f"{FORM}; charset=utf-8", f"{FORM}; charset=ISO-8859-1", FORM.upper(), "application/json",
     "text/plain", "multipart/form-data; boundary=x", ""]
)  # fmt: skip


@st.composite
def _interactions(draw: st.DrawFn) -> dict[str, Any]:
    """An interaction of a kind Slack sends, for buttons and views countersign does not have, with at
    most two of its fields (or of other fields Slack may send) replaced by any JSON value."""
    payload: dict[str, Any] = {
        "type": draw(st.sampled_from(["block_actions", "view_submission", "view_closed", "shortcut"])),
        "api_app_id": API_APP_ID,
        "user": {"id": "U0FUZZ", "team_id": "T0SANDBOX"},
        "team": draw(st.sampled_from([{"id": "T0SANDBOX"}, RIVAL, None])),
        "actions": [{"action_id": "fuzz", "value": "01J0"}],
        "view": {"type": "modal", "callback_id": "fuzz", "state": {"values": {}}},
    }
    others = [
        "is_enterprise_install", "enterprise", "container", "channel", "trigger_id", "message", "event",
        "is_ext_shared_channel", "authorizations", "response_urls", "response_url", "enterprise_id",
    ]  # fmt: skip
    for key in draw(st.lists(st.sampled_from([*payload, *others]), max_size=2, unique=True)):
        payload[key] = draw(json_values)
    return payload


_payload_texts = st.one_of(
    _interactions().map(json.dumps),
    json_values.map(json.dumps),
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.integers(1, 200_000).map(lambda n: "[" * n),
    st.text(max_size=60),
)
_field_names = st.sampled_from(["payload", "payload", "token", "", "Payload", "payload[]"]) | st.text(
    max_size=8
)


@st.composite
def _requests(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """A body and its Content-Type: half in Slack's form (one quoted `payload` field, UTF-8, declared
    a form) with an interaction close to Slack's; otherwise a form with any fields (quoted or not, in
    some encoding), a bare JSON text, or any bytes, declared as anything."""
    shape = draw(st.sampled_from(["slack", "slack", "slack", "form", "json", "bytes"]))
    if shape == "slack":
        return form(draw(_interactions())), FORM
    content_type = draw(_content_types)
    if shape == "bytes":
        return draw(st.binary(max_size=300)), content_type
    if shape == "json":
        return draw(_payload_texts).encode(), content_type
    fields = draw(st.lists(st.tuples(_field_names, _payload_texts), max_size=3))
    quote = urllib.parse.quote if draw(st.booleans()) else str
    text = "&".join(f"{name}={quote(value)}" for name, value in fields)
    return text.encode(draw(st.sampled_from(["utf-8", "utf-16", "latin-1"])), "replace"), content_type


def _one_payload_field(body: bytes, content_type: str | None) -> bool:
    """Whether `body` is a UTF-8 form with exactly one field, `payload`, declared as a form."""
    if (content_type or "").split(";")[0].strip().lower() != FORM:
        return False
    try:
        fields = urllib.parse.parse_qsl(
            body.decode(), keep_blank_values=True, strict_parsing=True, errors="strict"
        )
    except ValueError:
        return False
    return [name for name, _ in fields] == ["payload"]


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(request=_requests())
def test_any_signed_body_gets_an_answer_never_a_500(
    store: Store, sandbox: tuple[Sandbox, str], bot: str, request: tuple[bytes, str | None]
) -> None:
    """Every answer is a 4xx or Bolt's; only a body in Slack's one form (one `payload` field) gets past
    the 400 (or the 413 of a body over 1 MiB); and nothing is ever written."""
    body, content_type = request
    code, answer = post_signed(bot + "/slack/events", body, sandbox[0].signing_secret, content_type)
    assert code in (200, 400, 403, 404, 413), (code, answer, body[:300], content_type)
    if code not in (400, 413):  # past the parse: the checks and Bolt read its one payload field
        assert _one_payload_field(body, content_type), (code, body[:300], content_type)
    assert set(_rows(store).values()) == {0}


@pytest.mark.parametrize(("declared", "expected"), [("-1", 400), ("12abc", 400), (str(2 * 1024 * 1024), 413)])
def test_a_body_length_that_is_not_a_small_number_is_refused_before_the_body_is_read(
    bot: str, declared: str, expected: int
) -> None:
    """A negative `Content-Length` would have the body read to its end, whatever its size."""
    host, port = bot.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("POST", "/slack/events")
        connection.putheader("Content-Length", declared)
        connection.putheader("Content-Type", FORM)
        connection.endheaders(b"payload=%7B%7D")
        assert connection.getresponse().status == expected
    finally:
        connection.close()
