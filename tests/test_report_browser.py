"""The report pages in a real browser: Debian's headless chromium driven by Selenium through the
system chromedriver (nothing is downloaded). The page loads without console errors, the tile
map draws one element per tile of a 1,472-tile chip, sorting by cycles orders the operation
table, clicking an operation highlights its steps on the liveness chart, every view's
screenshot shows a picture, hovering a tile shows its bytes, the compare page shows both
reports and their differences, and pages made from a hostile profile (script in every name)
open no dialog and log no error.

.ci/run installs chromium and chromedriver, so under CI this test fails rather than skips when
they are missing; elsewhere it skips and says what to install.
"""

from __future__ import annotations

import io
import itertools
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph.ipu import ProfileReport

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from models import build_mlp  # noqa: E402

VIEWS = ("view-tiles", "view-categories", "view-liveness", "view-operations", "view-time")
COMPARE_VIEWS = ("view-diff-summary", "view-side-by-side", "view-diff-categories",
                 "view-diff-operations")


def _missing(what: str) -> None:
    message = (f"the browser test needs {what} (apt-get install -y chromium chromium-driver; "
               f"pip install 'xlgraph[test,report]')")
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium")
    try:
        import PIL  # noqa: F401
        import plotly  # noqa: F401
    except ImportError:
        _missing("plotly and Pillow")
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        _missing("chromium and chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,1400", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    yield chrome
    chrome.quit()


def _trained_report(batch: int, model: popxl.IPUModel | None = None) -> ProfileReport:
    mlp = build_mlp(batch)
    session = popxl.Session(mlp.ir, "ipu_model", ipu_model=model)
    with session:  # runs, so the time split has its measured host side
        for _ in range(2):
            session.run({mlp.images: np.zeros((batch, 28, 28), np.float32),
                         mlp.labels: np.zeros(batch, np.int32)})
    return session.report()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    from xlgraph.ipu.page.cli import main

    where = tmp_path_factory.mktemp("pages")
    chip = _trained_report(8, popxl.IPUModel.full())
    chip.save(where / "chip.json")
    assert main([str(where / "chip.json"), "-o", str(where / "report.html")]) == 0
    # the compare page on PopXL's 4-tile default: two 1,472-square maps only cost load time
    _trained_report(8).save(where / "narrow.json")
    _trained_report(32).save(where / "wide.json")
    assert main([str(where / "narrow.json"), str(where / "wide.json"),
                 "-o", str(where / "diff.html")]) == 0
    return where, chip


def _open(browser, path: Path) -> None:
    browser.get(path.as_uri())
    browser.execute_script("return document.readyState")  # the inline scripts have run
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def _not_blank(browser, view: str) -> None:
    from PIL import Image
    from selenium.webdriver.common.by import By

    element = browser.find_element(By.ID, view)
    browser.execute_script("arguments[0].scrollIntoView()", element)
    image = Image.open(io.BytesIO(element.screenshot_as_png)).convert("RGB")
    pixels = np.asarray(image).reshape(-1, 3)
    colours = len(np.unique(pixels, axis=0))
    background = (pixels == pixels[0]).all(axis=1).mean()
    assert image.width > 200 and image.height > 100, (view, image.size)
    assert colours > 20 and background < 0.97, (view, colours, background)


def _cycles(browser) -> list[float]:
    return browser.execute_script(
        "var i = document.querySelector('#ops-table th[data-key=cycles]').cellIndex;"
        "return Array.from(document.querySelectorAll('#ops-table tbody tr'))"
        ".map(r => parseFloat(r.cells[i].getAttribute('data-value')));")


def test_the_report_page_in_a_browser(browser, pages):
    from selenium.webdriver.common.by import By

    where, report = pages
    _open(browser, where / "report.html")
    points = browser.execute_script(
        "return document.querySelectorAll('#tile-map .scatterlayer .point').length")
    assert points == report.model.tiles == 1472
    for view in VIEWS:
        _not_blank(browser, view)

    from selenium.webdriver import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    tile = browser.find_element(By.CSS_SELECTOR, "#tile-map .scatterlayer .point")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", tile)
    ActionChains(browser).move_to_element(tile).perform()
    hover = WebDriverWait(browser, 60).until(lambda b: b.execute_script(
        "return document.querySelector('#tile-map .hoverlayer').textContent"))
    assert f"tile 0: {int(report.peak[0]):,} B at peak" in hover, hover

    rows = len(report.cycles.rows)
    before = _cycles(browser)  # program order: not sorted by cycles
    assert len(before) == rows and before != sorted(before, reverse=True)
    header = browser.find_element(By.CSS_SELECTOR, "#ops-table th[data-key=cycles]")
    header.click()
    assert _cycles(browser) == sorted(before, reverse=True)
    header.click()
    assert _cycles(browser) == sorted(before)

    browser.find_element(By.CSS_SELECTOR, "input.filter[data-table=ops-table]").send_keys("matmul")
    shown = browser.find_elements(By.CSS_SELECTOR, "#ops-table tbody tr.op-row")
    visible = [r for r in shown if r.is_displayed()]
    assert len(visible) == sum(r.op == "matmul" for r in report.cycles.rows) > 0
    row = visible[0]
    positions = [int(p) for p in row.get_attribute("data-positions").split(",")]
    row.click()
    assert "selected" in row.get_attribute("class")
    shapes = browser.execute_script(
        "return (document.getElementById('liveness').layout.shapes || [])"
        ".map(s => [s.x0, s.x1]);")
    assert shapes == [[p - 0.5, p + 0.5] for p in positions]
    drawn = WebDriverWait(browser, 60).until(  # on the chart, not only in its layout
        lambda b: len(b.find_elements(By.CSS_SELECTOR, "#liveness .shapelayer path"))
        >= len(positions))
    assert drawn
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_the_compare_page_in_a_browser(browser, pages):
    from selenium.webdriver.common.by import By

    where, report = pages
    _open(browser, where / "diff.html")
    for side in ("before", "after"):
        points = browser.execute_script(
            f"return document.querySelectorAll('#{side}-tile-map .scatterlayer .point').length")
        assert points == 4
    rows = browser.find_elements(By.CSS_SELECTOR, "#diff-ops-table tbody tr")
    assert len(rows) == len(report.cycles.rows)  # the same program at two batch sizes
    for view in COMPARE_VIEWS:
        _not_blank(browser, view)


PAYLOADS = ("<img src=x onerror=alert(1)>", "</script><script>alert(2)</script>",
            "\"'><svg onload=alert(3)>", "<a href=\"javascript:alert(4)\">link</a>",
            "<b onmouseover=alert(5)>hover</b>\u2028", "<iframe src=javascript:alert(6)>")


def _hostile(data, count=None):
    """``data`` with every user string (and category name) replaced by a payload."""
    count = itertools.count() if count is None else count
    if isinstance(data, dict):
        return {(PAYLOADS[next(count) % len(PAYLOADS)] if key in ("code", "variables") else key):
                value if key in ("schema", "model", "note") else _hostile(value, count)
                for key, value in data.items()}
    if isinstance(data, list):
        return [_hostile(v, count) for v in data]
    return PAYLOADS[next(count) % len(PAYLOADS)] + str(data) if isinstance(data, str) else data


def test_a_hostile_profile_runs_nothing_in_the_browser(browser, tmp_path):
    import json

    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    from xlgraph.ipu.page import write_compare, write_report

    data = _hostile(_trained_report(4).to_dict())
    (tmp_path / "evil.json").write_text(json.dumps(data))
    report = ProfileReport.load(tmp_path / "evil.json")
    assert report.cycles.rows[0].name.startswith(PAYLOADS)
    report.steps_per_run = PAYLOADS[0]  # a report made in code is escaped all the same
    write_report(report, tmp_path / "evil.html")
    report.steps_per_run = 1
    write_compare(report, report, tmp_path / "diff.html", PAYLOADS[:2])
    for page, chart in (("evil.html", "#liveness"), ("diff.html", "#before-liveness")):
        _open(browser, tmp_path / page)
        points = browser.find_elements(By.CSS_SELECTOR, f"{chart} .scatterlayer .point")
        for target in points[:3] + browser.find_elements(By.CSS_SELECTOR, "tbody tr")[:3]:
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", target)
            ActionChains(browser).move_to_element(target).click().perform()
        with pytest.raises(TimeoutException):  # no alert, confirm or prompt opened
            WebDriverWait(browser, 1).until(expected_conditions.alert_is_present())
        assert browser.execute_script(  # none of the payloads' elements or handlers
            "return Array.from(document.querySelectorAll('img, iframe, a[href^=javascript], "
            "[onerror], [onload], [onmouseover]')).map(e => e.outerHTML)") == []
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
