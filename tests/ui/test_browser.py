"""The page in a real headless Chromium (Debian's chromium and chromium-driver, through
Selenium) at 1280x800: it lists the demo's runs, highlights the state of a live run as it
advances, draws one chart bar per turn, answers a fan-out branch's approval, and takes the
screenshots the manual shows (docs/ui.png and docs/guides/img/live-view-*.png, written
there when ``INNERLOOP_SCREENSHOT=1``, as ``make screenshot`` sets it, so that a test run
does not change the repository; elsewhere under the test's temporary folder)."""

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

from innerloop.checkpoint import open_checkpointer
from innerloop.diagrams._model import TIMES
from innerloop.ui import Catalog, UIServer

from .answering import ASKED, TASK, answering_harness, suspended_run
from .answering import RUN as WAITING
from .test_children import HELPER, LEAF, RUN, write_nested_log
from .test_reports import store_rerun, write_report

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
    "--window-size=1280,800",
    "--hide-scrollbars",
)
OPEN = "\N{BLACK RIGHT-POINTING SMALL TRIANGLE}"
"""In front of a collapsed child's name (a click opens it)."""
SIZE = (1280, 800)
"""The size every page is looked at (and shot) in."""


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
    inner = driver.execute_script("return [outerWidth - innerWidth, outerHeight - innerHeight]")
    driver.set_window_size(SIZE[0] + inner[0], SIZE[1] + inner[1])  # the page's own size
    try:
        yield driver
    finally:
        driver.quit()


def shoot(browser: WebDriver, name: str, tmp_path: Path) -> Path:
    """Screenshot the page at :data:`SIZE` as ``name``: into the manual (``docs/``) with
    ``INNERLOOP_SCREENSHOT=1``, else into ``tmp_path``."""
    assert tuple(browser.execute_script("return [innerWidth, innerHeight]")) == SIZE
    manual = os.environ.get("INNERLOOP_SCREENSHOT") == "1"
    path = (ROOT / "docs" if manual else tmp_path) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(path))
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    return path


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
        if lit == ["model_complete"]:  # drawn with the path's next picture
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
    assert ids == [f"log:demo/events.jsonl:{n}" for n in (1, 2, 3)] + ["log:demo/nested.jsonl:1"]
    assert "Add 2+3 and 40+2" in row.find_element(By.CSS_SELECTOR, ".prompt").text
    assert row.find_element(By.CSS_SELECTOR, ".about").text.startswith("innerloop · ")
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
    shoot(browser, "ui.png", tmp_path)


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
    _until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#messages li")) == 3, 10)
    _until(lambda: browser.find_elements(By.CSS_SELECTOR, "#children tbody tr"), 10)
    browser.find_element(By.CSS_SELECTOR, "#children tbody tr").click()
    _until(lambda: title.text == LEAF, message="the grandchild's page")
    crumbs = browser.find_elements(By.CSS_SELECTOR, "#crumbs a")
    assert [c.text for c in crumbs] == [RUN, HELPER]
    assert messages  # the helper's page had its messages
    crumbs[0].click()
    _until(lambda: title.text == RUN, message="back on the run's page")


def _status(browser: WebDriver) -> str:
    """The status the page shows (its element is drawn anew at each update)."""
    return str(browser.execute_script("return document.getElementById('status')?.textContent"))


def _attributes(browser: WebDriver, selector: str, *names: str) -> list[list[str]]:
    """The ``data-`` attributes ``names`` of the elements ``selector`` finds, read at
    once (the page draws its lists anew at each update)."""
    found = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map((e) => arguments[1].map((n) => e.dataset[n]))",
        selector,
        list(names),
    )
    return [list(row) for row in found]


def _texts(browser: WebDriver, selector: str) -> list[str]:
    """The text of each element ``selector`` finds, read at once (``textContent``)."""
    found = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)", selector
    )
    return [str(text) for text in found]


def _shown(browser: WebDriver, selector: str) -> list[Any]:
    return [e for e in browser.find_elements(By.CSS_SELECTOR, selector) if e.is_displayed()]


def test_a_fan_out_branchs_approval_is_answered_from_the_page(
    browser: WebDriver, tmp_path: Path
) -> None:
    """The run waits on the approval a fan-out branch (``scout#2``) asks before a paid
    call: the page shows the question (the branch, the tool and its arguments); Approve
    answers it through ``harness.resume``, and the page follows the run, one row, to its
    end: the branch ran its call, the answer is among the messages."""
    db, spec = suspended_run(tmp_path)
    harness = answering_harness(db)
    with UIServer(Catalog(tmp_path, machines=[spec]), port=0, harness=harness) as server:
        _watch_policy(browser)
        browser.get(server.run_url(WAITING))
        (ask,) = _until(lambda: _shown(browser, "#asks .ask"), message="the question")
        assert ask.get_attribute("data-interrupt") == ASKED
        assert ask.find_element(By.CSS_SELECTOR, ".asked").text == (
            f"approval asked by scout#2 in state survey · interrupt {ASKED}"
        )
        call = ask.find_element(By.CSS_SELECTOR, "table.calls tbody tr").text
        assert call.startswith("buy_report")
        assert '"title": "EHPA market report 2025"' in call
        assert browser.find_element(By.ID, "status").text == "suspended"
        assert TASK[:40] in browser.find_element(By.ID, "prompt").text
        _until(lambda: _highlighted(browser)[1] == ["suspended"], message="the diagram")
        shoot(browser, "guides/img/live-view-asks.png", tmp_path)
        ask.find_element(By.CSS_SELECTOR, "button.approve").click()
        _until(lambda: _status(browser) == "finished", 30, "the run's end")
        assert not _shown(browser, "#asks")
        facts = browser.find_element(By.ID, "facts").text
        assert "exit model_complete" in facts
        assert _attributes(browser, "#children tbody tr", "path", "status") == [
            ["scout#1", "finished"],
            ["scout#2", "finished"],
        ]
        assert _texts(browser, "#messages li.answer") == [f"answer{ASKED}: true"]  # role, answer
        _until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == 1)
        assert (
            browser.find_element(By.CSS_SELECTOR, "#runs tbody tr").get_attribute("data-status")
            == "finished"
        )
        assert _attributes(browser, "#chart g.child", "path") == [["scout#1"], ["scout#2"]]
        assert browser.execute_script("return window.refused") == []
        _until(lambda: _highlighted(browser)[1] == ["model_complete"], message="the diagram")
        shoot(browser, "guides/img/live-view-answered.png", tmp_path)
        browser.execute_script("document.getElementById('side').scrollIntoView()")
        shoot(browser, "guides/img/live-view-answered-tree.png", tmp_path)
        browser.execute_script("window.scrollTo(0, 0)")
        browser.find_element(By.CSS_SELECTOR, '#children tr[data-path="scout#2"]').click()
        title = browser.find_element(By.ID, "run-title")
        _until(lambda: title.text == "scout#2", message="the branch's page")
        _until(lambda: browser.find_elements(By.CSS_SELECTOR, "#tools tbody tr td.ok"), 10)
        (tool,) = _texts(browser, "#tools tbody tr")
        assert tool.startswith("buy_reportok")
        _until(lambda: _highlighted(browser)[1] == ["model_complete"], message="its diagram")
        shoot(browser, "guides/img/live-view-child.png", tmp_path)
    assert harness.checkpointer is not None
    harness.checkpointer.close()


def test_a_nested_run_reads_at_page_size(
    browser: WebDriver, demo_runs: Path, serve: Any, tmp_path: Path
) -> None:
    """The demo's nested run, one row across its suspension: its chart has a bar per
    turn of its own and per child run (its tokens are mostly theirs), the writer's typed
    Brief among its messages, and a finished list says none, not none yet; its diagram
    draws the path taken, each child state's machine collapsed (one node naming the child
    and its exit) until a click opens it, the whole machine on asking, zooms (buttons,
    wheel) and a double click zooms onto a child run's cluster."""
    from innerloop._demo import NESTED_SPEC

    server = serve(Catalog(demo_runs, machines=[NESTED_SPEC]))
    _watch_policy(browser)
    browser.get(server.run_url("log:demo/nested.jsonl:1"))
    _until(lambda: _highlighted(browser)[1] == ["model_complete"], message="the diagram")
    assert _attributes(browser, "#chart g.child", "path") == [["scout#1"], ["scout#2"], ["writer"]]
    assert browser.find_elements(By.CSS_SELECTOR, "#chart g.turn")  # its own turns too
    said = _texts(browser, "#messages li.child")
    assert any('"title": "European heat pumps in 2024"' in text for text in said)
    assert _texts(browser, "#tools tbody tr") == ["none"]
    diagram = browser.find_element(By.ID, "diagram")
    browser.find_element(By.ID, "zoom-in").click()
    assert diagram.get_attribute("data-zoom") == "1.50"
    browser.find_element(By.ID, "zoom-fit").click()
    assert diagram.get_attribute("data-zoom") == "1.00"
    folded = "#diagram g.node.collapsed"
    assert sorted(_texts(browser, f"{folded} title")) == ["survey__", "write__"]
    assert _texts(browser, "#diagram g.cluster title") == []  # no recovery: none drawn
    assert "backoff" not in _texts(browser, "#diagram g.node title")  # the path taken only
    assert OPEN + " scout: scout" in _texts(browser, f"{folded} text")
    assert any(t.startswith("exit model_complete, ") for t in _texts(browser, f"{folded} text"))
    shoot(browser, "guides/img/live-view-nested.png", tmp_path)
    (scouts,) = [
        g
        for g in browser.find_elements(By.CSS_SELECTOR, folded)
        if g.find_element(By.TAG_NAME, "title").get_attribute("textContent") == "survey__"
    ]
    scouts.click()
    _until(
        lambda: "cluster_child_survey__" in _texts(browser, "#diagram g.cluster title"),
        message="the scouts' cluster opened",
    )
    assert _texts(browser, f"{folded} title") == ["write__"]
    (cluster,) = [
        g
        for g in browser.find_elements(By.CSS_SELECTOR, "#diagram g.cluster")
        if g.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        == "cluster_child_survey__"  # the fan-out's scouts
    ]
    webdriver.ActionChains(browser).double_click(cluster).perform()
    assert float(diagram.get_attribute("data-zoom") or 0) > 1.5
    assert browser.execute_script("return window.refused") == []
    shoot(browser, "guides/img/live-view-zoomed.png", tmp_path)
    browser.find_element(By.ID, "diagram-whole").click()
    _until(
        lambda: "backoff" in _texts(browser, "#diagram g.node title"), message="the whole machine"
    )
    assert "cluster_recovery" in _texts(browser, "#diagram g.cluster title")
    assert "cluster_child_survey__" in _texts(browser, "#diagram g.cluster title")  # still open


def test_the_report_pages_at_page_size(browser: WebDriver, tmp_path: Path, serve: Any) -> None:
    """The eval reports and a rerun compared, looked at (and shot) at page size."""
    write_report(tmp_path)
    server = serve(Catalog(tmp_path, store=open_checkpointer(store_rerun(tmp_path))))
    browser.get(server.url + "evals")
    assert "1/2 (50%)" in browser.find_element(By.TAG_NAME, "body").text
    shoot(browser, "guides/img/live-view-evals.png", tmp_path)
    browser.get(server.url + "compare/db:r2")
    assert "rerun of r1 from checkpoint 1" in browser.find_element(By.TAG_NAME, "body").text
    shoot(browser, "guides/img/live-view-compare.png", tmp_path)


def test_a_typed_answer_is_sent_from_the_page(browser: WebDriver, tmp_path: Path) -> None:
    """An answer typed on the page is read as JSON (else text), as ``runs resume
    --answer`` reads it: here a verdict per call that denies the paid one; the branch
    gets the denial as its tool's error and the run goes on to its end."""
    db, spec = suspended_run(tmp_path)
    harness = answering_harness(db)
    with UIServer(Catalog(tmp_path, machines=[spec]), port=0, harness=harness) as server:
        browser.get(server.run_url(WAITING))
        (ask,) = _until(lambda: _shown(browser, "#asks .ask"), message="the question")
        ask.find_element(By.CSS_SELECTOR, "input.typed").send_keys('{"call_buy": false}')
        ask.find_element(By.CSS_SELECTOR, "button.send").click()
        _until(lambda: _status(browser) == "finished", 30, "the run's end")
        answer = _texts(browser, "#messages li.answer")
        assert answer == [f'answer{ASKED}: {{"call_buy": false}}']
    assert harness.checkpointer is not None
    harness.checkpointer.close()
    branch = Catalog(tmp_path, machines=[spec]).detail(WAITING, child="scout#2")
    assert [(t["name"], t["outcome"]) for t in branch["tools"]] == [("buy_report", "error")]
