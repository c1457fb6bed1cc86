"""`countersign report --html`: one self-contained page (no script or style from elsewhere) that
headless Chromium draws offline: four charts and the policy suggestions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from countersign.cli import main
from tests.test_browser import ARTIFACTS, WAIT_SECONDS, browser  # noqa: F401  (the browser fixture)

pytest.importorskip("plotly", reason="plotly is not installed (the report extra)")
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait


@pytest.fixture
def report(env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["demo-history", "--days", "3", "--per-day", "10"]) == 0
    path = tmp_path / "report.html"
    assert main(["report", "--html", str(path), "--min-decisions", "5"]) == 0
    assert "wrote" in capsys.readouterr().out
    return path


def test_the_report_is_one_file_with_nothing_from_elsewhere(report: Path) -> None:
    page = report.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing fetched: works offline
    assert page.count('class="chart"') == 4 and "Policy suggestions" in page
    assert "Decisions per day by outcome" in page and "Rubber-stamp share per reviewer" in page


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_headless_chromium_draws_the_charts_offline(report: Path, browser: WebDriver) -> None:  # noqa: F811
    browser.get(report.as_uri())
    WebDriverWait(browser, WAIT_SECONDS).until(
        lambda b: len(b.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")) >= 4, "four charts"
    )
    assert browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot g.trace.bars .point path")  # bars drawn
    assert browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .boxlayer .trace")  # boxes drawn
    assert "send_email" in browser.find_element(By.ID, "suggestions").text
    browser.save_screenshot(str(ARTIFACTS / "report.png"))
