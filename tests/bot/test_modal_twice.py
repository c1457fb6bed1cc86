"""A reviewer who presses a modal button twice before the first modal shows (a double click on Edit,
or Edit then Reject): Slack's second `views.open` replaces the first modal, and the first one's
`views.update` is answered `not_found` (views.update: "not_found" for a view that no longer exists,
/work/shared/reference/slack.md A3). That modal was superseded, nothing was recorded: the reviewer sees
one filled modal and no error message, and the log says so in one line, without a traceback."""

from __future__ import annotations

import json
import logging

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router.cards import EDIT_ACTION, EDIT_CALLBACK, REJECT_ACTION, REJECT_CALLBACK
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import wait_for
from tests.helpers.builders import post_card, status


def _shown(sb: Sandbox, user: str) -> list[str]:
    return [json.dumps(v["view"]["blocks"], ensure_ascii=False) for v in sb.views(user)]


@pytest.mark.parametrize(("second", "form"), [(EDIT_ACTION, EDIT_CALLBACK), (REJECT_ACTION, REJECT_CALLBACK)])
def test_a_modal_replaced_by_a_second_click_is_no_error_to_tell(
    second: str,
    form: str,
    client: ApprovalClient,
    redis: Redis,
    store: Store,
    sandbox: tuple[Sandbox, str],
    bot: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first click's form is held in `views.update` (a sandbox delay) while the second click's
    `views.open` replaces its modal: one modal ends filled, nobody is told of a failure."""
    sb, _ = sandbox
    request_id, card = post_card(client, redis, sb)
    sb.inject("views.update", delay_seconds=2.0)
    caplog.set_level(logging.INFO, logger="countersign")
    assert sb.click(card["channel"], card["ts"], EDIT_ACTION, "U0LEAD")[0] == 200
    wait_for(lambda: any("Loading" in s for s in _shown(sb, "U0LEAD")), what="the first loading modal")
    assert sb.click(card["channel"], card["ts"], second, "U0LEAD")[0] == 200
    superseded = wait_for(
        lambda: [r for r in caplog.records if "superseded" in r.getMessage()],
        what="the superseded modal's line",
    )
    wait_for(
        lambda: [s for s in _shown(sb, "U0LEAD") if "Loading" not in s] or None,
        what="the second modal filled",
    )
    [view] = sb.views("U0LEAD")
    assert view["view"]["callback_id"] == form  # the second click's form
    assert (
        sb.ephemerals("U0LEAD") == [] and [m for m in sb.messages() if "could not record" in m["text"]] == []
    )
    assert len(superseded) == 1 and superseded[0].exc_info is None
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
    assert status(store, request_id) == "pending"
