"""The page in a real headless Chromium (Debian's chromium and chromium-driver, through
Selenium): it lists the demo's runs, highlights the state of a live run as it advances,
draws one chart point per turn, and takes the screenshot the manual shows (docs/ui.png, written
there when ``INNERLOOP_SCREENSHOT=1``, as ``make screenshot`` sets it, so that a test run does
not change the repository; elsewhere under the test's temporary folder)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver import Chrome as WebDriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from innerloop.diagrams._model import TIMES
from innerloop.ui import Catalog

from .test_children import HELPER, LEAF, RUN, write_nested_log

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1000",
)


@pytest.fixture
def browser(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WebDriver]:
    """Headless Chromium with a fresh profile; Selenium never looks for a driver online."""
    for path in (CHROMIUM, CHROMEDRIVER):
        assert shutil.which(path), f"{path} is missing: sh scripts/setup-system.sh installs it"
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _until(what: Callable[[], Any], seconds: float = 20.0, message: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds} s waiting for {message or what}")


def _watch_policy(driver: WebDriver) -> None:
    """Record what the page's Content-Security-Policy refuses (``window.refused``), from the
    first byte of every page (a script the browser adds is not subject to the policy)."""
    driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": "window.refused = []; document.addEventListener("
            "'securitypolicyviolation', (e) => window.refused.push("
            "`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));"
        },
    )


def _highlighted(driver: WebDriver) -> tuple[str, list[str]]:
    """The state the page says is current, and the titles of the diagram nodes lit."""
    current, lit = driver.execute_script(
        "return [document.getElementById('diagram').dataset.current, "
        "[...document.querySelectorAll('#diagram g.node.current title')]"
        ".map((t) => t.textContent)]"
    )
    return str(current), list(lit)


def test_the_highlighted_state_follows_a_live_run(
    browser: WebDriver, live_run: Any, serve: Any
) -> None:
    """Opened before the run's log exists (the page says so and asks again); as the run
    advances, the lit node moves through stream and execute to model_complete; the chart
    ends with one point per turn."""
    folder, run = live_run
    server = serve(Catalog(folder))
    browser.get(server.run_url("log:live.jsonl:last"))
    error = browser.find_element(By.ID, "run-error")
    _until(lambda: error.text.startswith("no run 'log:live.jsonl:last'"), 10, "the 404")
    run.thread.start()
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        current, lit = _highlighted(browser)
        if lit and (not seen or seen[-1] != lit[0]):
            assert lit == [current]
            seen.append(lit[0])
        if current == "model_complete":
            break
        time.sleep(0.05)
    page = browser.execute_script("return document.body.innerHTML")
    assert "stream" in seen, f"states seen: {seen}; the page: {page[:3000]}"
    assert "execute" in seen
    assert seen.index("stream") < seen.index("execute")
    assert seen[-1] == "model_complete"
    _until(lambda: browser.find_element(By.ID, "status").text == "finished", 10, "finished")
    points = browser.find_elements(By.CSS_SELECTOR, "#chart g.turn")
    assert [p.get_attribute("data-turn") for p in points] == ["1", "2"]
    assert run.state.turns == 2
    rows = browser.find_elements(By.CSS_SELECTOR, "#tools tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["add"]


def test_the_demo_run_is_listed_and_shown(
    browser: WebDriver, demo_runs: Path, serve: Any, tmp_path: Path
) -> None:
    """The list shows the demo's runs (three, then the nested one's two); clicking the
    first draws its machine with the trace, its tools, its timeline and a chart of its
    seven turns. Takes the screenshot."""
    server = serve(Catalog(demo_runs))
    _watch_policy(browser)
    browser.get(server.url)
    row = _until(
        lambda: browser.find_elements(
            By.CSS_SELECTOR, '#runs tr[data-id="log:demo/events.jsonl:1"]'
        ),
        message="the demo's run in the list",
    )[0]
    ids = [
        r.get_attribute("data-id") for r in browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    ]
    assert ids == [f"log:demo/events.jsonl:{n}" for n in (1, 2, 3)] + [
        f"log:demo/nested.jsonl:{n}" for n in (1, 2)
    ]
    assert "model_complete" in row.text
    row.click()
    _until(lambda: _highlighted(browser)[1] == ["model_complete"], message="the diagram")
    points = browser.find_elements(By.CSS_SELECTOR, "#chart g.turn")
    assert len(points) == 7
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tools tbody tr")) == 6
    recoveries = browser.find_elements(By.CSS_SELECTOR, "#recoveries li")
    kinds = [r.get_attribute("data-type") for r in recoveries]
    assert kinds.count("backoff") == 5
    assert "fallback" in kinds
    timeline = browser.find_elements(By.CSS_SELECTOR, "#timeline li")
    assert timeline[-1].text.endswith("check → model_complete [model_finished]")
    assert f"{TIMES}5" in browser.find_element(By.ID, "diagram").text
    assert browser.execute_script("return window.refused") == []  # the policy holds the page
    browser.execute_script("window.scrollTo(0, 0)")
    folder = ROOT / "docs" if os.environ.get("INNERLOOP_SCREENSHOT") == "1" else tmp_path
    assert browser.save_screenshot(str(folder / "ui.png"))
    assert (folder / "ui.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_a_child_run_opens_from_the_tree(browser: WebDriver, tmp_path: Path, serve: Any) -> None:
    """The run's page lists its children as a tree; clicking the agent tool's child
    (its path holding ``#``, ``/``, ``[`` and ``<b>``) opens its page, the path shown as
    text; its own child opens from there with the way back up."""
    server = serve(Catalog(tmp_path, machines=[write_nested_log(tmp_path)]))
    _watch_policy(browser)
    browser.get(server.run_url(RUN))
    row = _until(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#children tbody tr"), message="the tree"
    )
    paths = [r.find_elements(By.TAG_NAME, "td")[0].text for r in row]
    assert paths == ["web#1", "web#2", HELPER, "leaf"]  # a grandchild named from its parent
    indents = [
        r.find_elements(By.TAG_NAME, "td")[0].value_of_css_property("padding-left") for r in row
    ]
    assert indents == ["6px", "6px", "6px", "20px"]  # set through the CSSOM, under the policy
    assert browser.execute_script("return window.refused") == []
    next(r for r in row if r.get_attribute("data-path") == HELPER).click()
    title = browser.find_element(By.ID, "run-title")
    _until(lambda: title.text == HELPER, message="the child's page")
    assert not browser.find_elements(By.CSS_SELECTOR, "#run-title b")
    assert browser.execute_script("return new URL(location).searchParams.get('child')") == HELPER
    messages = browser.find_elements(By.CSS_SELECTOR, "#messages li")
    _until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#messages li")) == 2, 10)
    _until(lambda: browser.find_elements(By.CSS_SELECTOR, "#children tbody tr"), 10)
    browser.find_element(By.CSS_SELECTOR, "#children tbody tr").click()
    _until(lambda: title.text == LEAF, message="the grandchild's page")
    crumbs = browser.find_elements(By.CSS_SELECTOR, "#crumbs a")
    assert [c.text for c in crumbs] == [RUN, HELPER]
    assert messages  # the helper's page had its messages
    crumbs[0].click()
    _until(lambda: title.text == RUN, message="back on the run's page")
