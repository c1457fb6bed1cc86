"""The sandbox page in a real browser (headless Chromium driven by Selenium), as a reviewer uses it:
approve a card, edit with an invalid then a valid amount, reject with a reason and read it in the
decided card's Details, approve from the App Home tab, and run `/countersign pending`; each step
asserts on what the page shows, and leaves a screenshot in `test-artifacts/browser/` (git ignores it).

Needs Debian's `chromium` and `chromium-driver` (`make install` installs them when missing) and the
`selenium` package (the `dev` extra); without them the test is skipped, saying which is missing.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.router import timeouts
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from tests.helpers import REPO
from tests.helpers.builders import age, escalating_policy, post_card, status

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

ARTIFACTS = REPO / "test-artifacts" / "browser"
WAIT_SECONDS = 15  # the page polls every second; a decision is recorded after the ack


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (make install installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield browser
    browser.quit()


def _shows(browser: WebDriver, text: str, where: str = "body") -> None:
    """Wait until the element `where` (CSS) shows `text`."""
    WebDriverWait(browser, WAIT_SECONDS).until(
        lambda b: text in b.find_element(By.CSS_SELECTOR, where).text, f"the page to show {text!r} in {where}"
    )


def _press(browser: WebDriver, label: str, request_id: str, within: str = "channels") -> None:
    """Press the `label` button of request `request_id` (its buttons carry the id as their value)."""
    xpath = f"//main[@id='{within}']//button[contains(@title, '{request_id}') and text()='{label}']"
    WebDriverWait(browser, WAIT_SECONDS).until(
        lambda b: b.find_elements(By.XPATH, xpath), f"{label} on {request_id}"
    )
    browser.find_element(By.XPATH, xpath).click()


def _fill_modal(browser: WebDriver, value: str) -> None:
    """Type `value` into the open modal's one input and press its submit button."""
    field = WebDriverWait(browser, WAIT_SECONDS).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "#modal [data-block-id]"), "the modal's input"
    )
    field.clear()
    field.send_keys(value)
    browser.find_element(By.CSS_SELECTOR, "#modal .foot button.primary").click()


def _card(client: ApprovalClient, redis: Redis, sb: Sandbox, **overrides: Any) -> str:
    redis.delete("countersign:pace:C0FINANCE")  # each card at once, not paced behind the last
    return post_card(client, redis, sb, **overrides)[0]


def _shot(browser: WebDriver, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    browser.save_screenshot(str(path))
    return path


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the page, not SQL
def test_a_reviewer_clears_their_queue_in_the_browser(
    browser: WebDriver,
    client: ApprovalClient,
    redis: Redis,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    sb, url = sandbox
    approved = _card(client, redis, sb, run_id="approve", summary="Refund ACME")
    edited = _card(client, redis, sb, run_id="edit", summary="Refund BETA")
    rejected = _card(client, redis, sb, run_id="reject", summary="Refund GAMMA")
    from_home = _card(client, redis, sb, run_id="home", summary="Refund DELTA")
    browser.get(url + "/")
    Select(browser.find_element(By.ID, "act-as")).select_by_value("U0LEAD")
    _shows(browser, "Refund DELTA")
    _shot(browser, "1-four-cards")

    _press(browser, "Approve", approved)
    _shows(browser, "Approved by @lee.lead")
    assert status(runtime.store, approved) == "approved"
    _shot(browser, "2-approved")

    _press(browser, "Edit", edited)
    _fill_modal(browser, "500.00")  # more than the 120.00 asked: the policy's edit rule refuses it
    _shows(browser, "The policy's edit rule does not allow this edit.", "#modal .field .error")
    _shot(browser, "3-edit-refused")
    _fill_modal(browser, "100.00")
    _shows(browser, "amount 120.00 → 100.00")
    assert runtime.store.get(edited).approved_payload["amount"] == "100.00"  # type: ignore[union-attr,index]
    _shot(browser, "4-edited")

    _press(browser, "Reject", rejected)
    _fill_modal(browser, "wrong customer")
    _shows(browser, "Rejected by @lee.lead")
    assert runtime.store.get(rejected).decision_reason == "wrong customer"  # type: ignore[union-attr]
    _shot(browser, "5-rejected")
    _press(browser, "Details", rejected)  # the decided card's one button: the record stays viewable
    _shows(browser, "Reviewer's reason: wrong customer", "#modal")
    _shows(browser, "Rejected by @lee.lead at ", "#modal")
    _shot(browser, "5b-rejected-details")
    browser.find_element(By.CSS_SELECTOR, "#modal .foot button").click()  # Close
    WebDriverWait(browser, WAIT_SECONDS).until(lambda b: not b.find_element(By.ID, "modal").is_displayed())

    browser.find_element(By.ID, "tab-home").click()
    _shows(browser, "Waiting for you (1)", "#home")
    _shows(browser, "Refund DELTA", "#home")
    _shot(browser, "6-home")
    _press(browser, "Approve", from_home, within="home")
    WebDriverWait(browser, WAIT_SECONDS).until(lambda b: status(runtime.store, from_home) == "approved")
    browser.find_element(By.ID, "tab-home").click()  # opened again: published anew
    _shows(browser, "Waiting for you (0)", "#home")
    _shows(browser, "Approved by @lee.lead", "#home")  # a line of "Decided by you recently"
    _shot(browser, "7-home-cleared")

    pending = _card(client, redis, sb, run_id="pending", summary="Refund EPSILON")
    browser.find_element(By.ID, "tab-channels").click()
    command = browser.find_element(By.ID, "command")
    command.clear()
    command.send_keys("/countersign pending")
    browser.find_element(By.CSS_SELECTOR, "#command-form button").click()
    _shows(browser, "1 request waiting for you")
    _shows(browser, pending)
    answer = browser.find_elements(By.CSS_SELECTOR, ".msg.ephemeral")[-1]
    assert "Only visible to you" in answer.text and "Refund EPSILON" in answer.text
    browser.execute_script("arguments[0].scrollIntoView()", answer)
    _shot(browser, "8-countersign-pending")


def test_replies_nest_under_their_card_and_mrkdwn_is_styled(
    browser: WebDriver, sandbox: tuple[Sandbox, str]
) -> None:
    """A thread reply is shown inside its parent's thread, not as a message of its own in the channel,
    and mrkdwn's code, bold and strike marks are styles, not characters (as Slack shows them)."""
    from slack_sdk import WebClient

    url = sandbox[1]
    slack = WebClient(token="xoxb-test", base_url=url + "/api/")
    parent = slack.chat_postMessage(channel="C0FINANCE", text="Refund `ord_42` is *waiting*; 2*3*4 stays")
    slack.chat_postMessage(channel="C0FINANCE", text="~Pending~ Executed ✓", thread_ts=parent["ts"])
    slack.chat_postMessage(channel="C0FINANCE", text="Another card")
    browser.get(url + "/")
    _shows(browser, "Another card")

    messages = browser.find_elements(By.CSS_SELECTOR, "#channels section.channel > .msg")
    assert [m.find_element(By.CSS_SELECTOR, ".text").text for m in messages] == [
        "Refund ord_42 is waiting; 2*3*4 stays",
        "Another card",
    ]
    reply = messages[0].find_element(By.CSS_SELECTOR, ".thread > .msg")
    assert reply.find_element(By.CSS_SELECTOR, ".text").text == "Pending Executed ✓"
    assert reply.find_element(By.CSS_SELECTOR, "s").text == "Pending"
    assert messages[0].find_element(By.CSS_SELECTOR, ".text > code").text == "ord_42"
    assert messages[0].find_element(By.CSS_SELECTOR, ".text > b").text == "waiting"
    assert messages[1].find_elements(By.CSS_SELECTOR, ".thread > .msg") == []
    _shot(browser, "9-thread-and-styles")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the page, not SQL
def test_line_breaks_in_a_value_cannot_fake_a_field_on_the_page(
    browser: WebDriver,
    client: ApprovalClient,
    redis: Redis,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """The trial user's card: a value padded with line breaks, and one that writes a second, smaller
    amount on a line of its own. The page shows each field on one line, the breaks as ⏎, and the
    whole card (its buttons too) in one screen."""
    sb, url = sandbox
    payload = {
        "amount": "8200.00",
        "currency": "USD" + "\n" * 20 + "\u2028" * 4,
        "customer": "Initech\namount: 82.00",
        "memo": "amount fixed: 82.00 USD",
    }
    summary = "Refund Initech" + "\r\n" * 12 + "amount: 82.00"
    request_id = _card(client, redis, sb, run_id="fake-field", payload=payload, summary=summary)
    browser.get(url + "/")
    Select(browser.find_element(By.ID, "act-as")).select_by_value("U0LEAD")
    _shows(browser, "customer: Initech⏎amount: 82.00")
    card = browser.find_element(
        By.XPATH,
        f"//main[@id='channels']//div[contains(@class, 'msg')][.//button[contains(@title, '{request_id}')]]",
    )
    lines = [line.strip() for line in card.text.splitlines()]
    assert "amount: 8200.00" in lines and "amount: 82.00" not in lines
    assert "currency: USD" + "⏎" * 24 in lines
    assert "Refund Initech" + "⏎" * 12 + "amount: 82.00" in lines
    approve = card.find_element(By.XPATH, ".//button[text()='Approve']")
    assert approve.location["y"] - card.location["y"] < 600  # not pushed down by a tall blank gap
    browser.execute_script("arguments[0].scrollIntoView()", card)
    _shot(browser, "10-line-breaks-in-values")


ESCALATING = escalating_policy(4, "[U0LEAD, U0BOB]")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the page, not SQL
def test_an_escalated_away_card_keeps_details_and_the_open_edit_says_where_it_went(
    browser: WebDriver,
    policy_file: Path,
    client: ApprovalClient,
    redis: Redis,
    runtime: Runtime,
    sandbox: tuple[Sandbox, str],
    bot: str,
) -> None:
    """alice, level 0's approver, has the Edit modal open when the request escalates to #C0FINLEADS:
    her submit is refused inline in words (no raw id: the modal shows no mention); her card, rewritten
    as escalated, still folds the reason ("… 12 more lines: see Details") and offers Details, whose
    modal has the whole reason."""
    policy_file.write_text(ESCALATING)
    sb, url = sandbox
    reason = "\n".join(f"line {n}: the customer was charged twice" for n in range(1, 21))
    request_id = _card(client, redis, sb, run_id="escalate", summary="Refund ZETA", reason=reason)
    browser.get(url + "/")
    Select(browser.find_element(By.ID, "act-as")).select_by_value("U0ALICE")
    _press(browser, "Edit", request_id)
    _shows(browser, "Edit, then approve: Refund ZETA", "#modal")
    age(runtime.store, request_id, expires_at=-1)
    timeouts.sweep(runtime)  # level 1: #C0FINLEADS, decided by U0LEAD or U0BOB
    _fill_modal(browser, "250.00")
    _shows(browser, "This request has moved on to the next level", "#modal .field .error")
    error = browser.find_element(By.CSS_SELECTOR, "#modal .field .error").text
    assert "U0" not in error and "C0FINLEADS" not in error and request_id not in error
    _shot(browser, "11-edit-after-escalation")
    browser.find_element(By.CSS_SELECTOR, "#modal .foot button").click()  # Cancel
    WebDriverWait(browser, WAIT_SECONDS).until(lambda b: not b.find_element(By.ID, "modal").is_displayed())

    old = "//main[@id='channels']//section[h2='#C0FINANCE']"
    _shows(browser, "escalated to #C0FINLEADS")
    card = browser.find_element(By.XPATH, f"{old}//div[contains(@class, 'msg')][contains(., 'Refund ZETA')]")
    assert "… 12 more lines: see Details" in card.text
    assert [b.text for b in card.find_elements(By.TAG_NAME, "button")] == ["Details"]
    browser.execute_script("arguments[0].scrollIntoView()", card)
    _shot(browser, "12-escalated-card-keeps-details")
    card.find_element(By.XPATH, ".//button[text()='Details']").click()
    _shows(browser, "line 20: the customer was charged twice", "#modal")
    _shot(browser, "12b-escalated-card-details")
