"""Text that UTF-8 cannot encode (a lone surrogate: binary data decoded with
``surrogateescape``, or a ``"\\ud800"`` JSON escape) is escaped the same way everywhere it
is hashed, logged, sent and shown: a run whose tool answers such text streams, ends, logs,
replays and is shown in the live view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from innerloop import EventLog, Harness, HarnessParams, read_event_log, tool
from innerloop._messages import TextBlock, ToolResultBlock, encodable
from innerloop.testing import ScriptedProvider, replay, reply, tool_call
from innerloop.tools import ToolCallResult
from innerloop.ui import Catalog

BINARY = b"ok \xff\xfe end".decode("utf-8", "surrogateescape")
ESCAPED = "ok \\udcff\\udcfe end"


@tool
def blob() -> str:
    """Binary data, decoded as a careless tool does."""
    return BINARY


def harness(answer: str = "done") -> Harness[Any]:
    script = [reply(tool_call("blob", {}, id="b1")), reply(answer)]
    return Harness(HarnessParams(model="scripted:m", tools=[blob]), [ScriptedProvider(script)])


def test_text_enters_the_history_escaped() -> None:
    """A lone surrogate becomes its six-character escape wherever text enters a run's data;
    encodable text is the same object."""
    assert encodable(BINARY) == ESCAPED
    assert encodable("\ud800x") == "\\ud800x"
    text = "déjà vu"
    assert encodable(text) is text
    assert TextBlock(BINARY).text == ESCAPED
    assert ToolResultBlock("t", BINARY).content == ESCAPED
    result = ToolCallResult("t", "blob", BINARY, stdout=BINARY, stderr=None)
    assert (result.output, result.stdout, result.stderr) == (ESCAPED, ESCAPED, None)


def test_a_run_with_binary_tool_output_streams_logs_and_replays(tmp_path: Path) -> None:
    """Its events are read (request fingerprints made), its log is written, its quiet run
    ends model_complete, and the log replays the same."""
    path = tmp_path / "run.jsonl"
    run = harness("done \udcff").start("go")
    with EventLog(path) as log:
        for event in run.iter_sync():
            log.write(event)
    assert run.state.exit_reason == "model_complete"
    assert run.state.history[2].content[0].content == ESCAPED  # type: ignore[union-attr]
    assert run.state.history[3].text == "done \\udcff"
    lines = read_event_log(path)
    executed = next(line for line in lines if line["type"] == "tool_executed")
    assert executed["output"] == ESCAPED
    path.read_text(encoding="utf-8")  # the whole log is UTF-8
    assert harness().run_sync("go").exit_reason == "model_complete"
    assert replay(path).assert_same().ok


def test_the_live_view_shows_such_a_run(tmp_path: Path, serve: Any) -> None:
    """The run of a log holding lone surrogates as JSON escapes (in text deltas and a tool
    output, as a provider's stream or an older innerloop may have written them) is shown,
    no 500: each as its escape, as the history holds it; so is an eval report's page."""
    path = tmp_path / "run.jsonl"
    run = harness("done \udcff").start("go")
    with EventLog(path) as log:
        for event in run.iter_sync():
            log.write(event)
    raw = path.read_text().replace("\\\\udc", "\\udc")
    assert '"done \\udcff"' in raw
    assert '"ok \\udcff\\udcfe end"' in raw
    path.write_text(raw)
    server = serve(Catalog(tmp_path))
    page = httpx.get(server.url + "api/run/log:run.jsonl:1", timeout=10)
    assert page.status_code == 200
    assert ESCAPED in json.dumps(page.json(), ensure_ascii=False).replace("\\\\", "\\")
    assert "\\udcff" in page.text
    report = {"cases": 0, "pass_rate": 0.0, "results": [], "latency": {}, "recoveries": {}}
    (tmp_path / "report.json").write_text(
        json.dumps({**report, "name": "bin \udcff", "passed": 0, "failed": 0, "errors": 0})
    )
    evals = httpx.get(server.url + "evals", timeout=10)
    assert evals.status_code == 200
    assert "bin \\udcff" in evals.text
    assert httpx.get(server.url + "api/evals", timeout=10).json()["reports"][0]["name"] == (
        "bin \\udcff"
    )
