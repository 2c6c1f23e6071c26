"""The server's JSON endpoints, its SVG and its live stream, over real HTTP (uvicorn on
loopback): runs from the demo's event log, from broken logs, from a SQLite store."""

from __future__ import annotations

import fnmatch
import json
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from innerloop import Harness, HarnessParams
from innerloop._eventlog import SCHEMA
from innerloop.checkpoint import open_checkpointer
from innerloop.diagrams._model import TIMES
from innerloop.testing import ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec
from innerloop.ui import Catalog
from innerloop.ui._app import STATIC

DEMO = "log:demo/events.jsonl"
DEMO_PROMPT = "Add 2+3 and 40+2, check the weather in Lisbon, and write me a short report."
HEADER = json.dumps({"type": "log_header", "schema": SCHEMA}) + "\n"


def _get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=10)


def _sse(url: str, limit: float = 20.0) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of a server-sent stream, until it ends."""
    out: list[tuple[str, dict[str, Any]]] = []
    kind = ""
    with httpx.stream("GET", url, timeout=limit) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                out.append((kind, json.loads(line.split(":", 1)[1])))
    return out


class TestLogs:
    def test_lists_the_runs_of_the_demo(self, demo_runs: Path, serve: Any) -> None:
        """The demo writes three runs to one log (the tour, the one the host aborts, and
        the one with typed output) and its nested run to another (suspended on a child's
        approval, then resumed)."""
        server = serve(Catalog(demo_runs))
        runs = _get(server.url + "api/runs").json()["runs"]
        assert [(r["id"], r["status"], r["exit_reason"]) for r in runs] == [
            (f"{DEMO}:1", "finished", "model_complete"),
            (f"{DEMO}:2", "finished", "aborted"),
            (f"{DEMO}:3", "finished", "model_complete"),
            ("log:demo/nested.jsonl:1", "finished", "model_complete"),  # resumed: one row
        ]
        assert runs[0]["turns"] == 7
        assert runs[0]["cost_usd"] > 0
        assert runs[0]["error"] is None
        assert (runs[0]["machine"], runs[0]["prompt"]) == ("innerloop", DEMO_PROMPT)
        assert abs(runs[0]["started"] - time.time()) < 600  # the log's header + the run's t
        nested = _get(server.url + "api/run/log:demo/nested.jsonl:1").json()
        assert (nested["resumptions"], nested["turns"]) == (1, 6)
        assert "interrupt" not in nested  # answered
        assert [(c["path"], c["status"], c["exit_reason"]) for c in nested["children"]] == [
            ("scout#1", "finished", "model_complete"),
            ("scout#2", "finished", "model_complete"),  # asked, was answered, went on
            ("writer", "finished", "model_complete"),
        ]
        said = [(m["role"], m["text"]) for m in nested["messages"]]
        assert ("answer", "survey:1: true") in said
        brief = next(text for role, text in said if text.startswith("[writer] "))
        assert json.loads(brief.removeprefix("[writer] "))["title"] == (
            "European heat pumps in 2024"  # the writer's typed Brief
        )
        assert "interrupt" not in _get(server.url + f"api/run/{DEMO}:1").json()

    def test_one_run_in_detail(self, demo_runs: Path, serve: Any) -> None:
        """The tour's transitions, its tool calls (two adds, three failed weathers, one
        timeout) and one point per model turn."""
        server = serve(Catalog(demo_runs))
        detail = _get(server.url + f"api/run/{DEMO}:1").json()
        assert detail["transitions"][0] == {
            "t": detail["transitions"][0]["t"],
            "source": "idle",
            "target": "assemble",
            "guard": None,
        }
        assert detail["transitions"][-1]["target"] == "model_complete"
        assert [(t["name"], t["outcome"]) for t in detail["tools"]] == [
            ("add", "ok"),
            ("add", "ok"),
            ("weather", "error"),
            ("weather", "error"),
            ("weather", "error"),
            ("climate_lookup", "timeout"),
        ]
        assert [t["turn"] for t in detail["turn_usage"]] == [1, 2, 3, 4, 5, 6, 7]
        kinds = [r["type"] for r in detail["recoveries"]]
        assert kinds.count("backoff") == 5
        assert "fallback" in kinds
        assert "compacted" in kinds

    def test_the_diagram_carries_the_trace(self, demo_runs: Path, serve: Any) -> None:
        """An SVG of the machine with each taken edge's count (call -> backoff five times)."""
        server = serve(Catalog(demo_runs))
        response = _get(server.url + f"api/diagram/{DEMO}:1")
        assert response.status_code == 200
        assert response.headers["content-type"] == "image/svg+xml"
        svg = response.text
        assert "<svg" in svg
        assert f"rate_limited_retry {TIMES}5" in svg
        assert "exit model_complete" in svg

    def test_broken_logs_are_listed_with_their_error(self, tmp_path: Path, serve: Any) -> None:
        """Not JSON, not a log, cut off mid-line: each listed with its error, the page
        still serves the others; a cut-off log keeps the runs read before the cut."""
        (tmp_path / "garbage.jsonl").write_bytes(b"\x00\xff not json\n")
        (tmp_path / "other.jsonl").write_text('{"a": 1}\n')
        transition = {"type": "transition", "source": "idle", "target": "assemble", "guard": None}
        (tmp_path / "cut.jsonl").write_text(HEADER + json.dumps(transition) + '\n{"type": "tr')
        (tmp_path / "notes.txt").write_text("not listed")
        server = serve(Catalog(tmp_path))
        runs = {r["id"]: r for r in _get(server.url + "api/runs").json()["runs"]}
        assert sorted(runs) == ["log:cut.jsonl:1", "log:garbage.jsonl:1", "log:other.jsonl:1"]
        assert runs["log:garbage.jsonl:1"]["status"] == "error"
        assert runs["log:garbage.jsonl:1"]["error"].startswith("garbage.jsonl:1: not JSON")
        assert runs["log:other.jsonl:1"]["error"] == (
            "other.jsonl:1: not an innerloop event log (no log_header line)"
        )
        cut = runs["log:cut.jsonl:1"]
        assert (cut["status"], cut["current"]) == ("running", "assemble")
        assert cut["error"].startswith("line 3 is cut off")
        detail = _get(server.url + "api/run/log:garbage.jsonl:1").json()
        assert (detail["status"], detail["transitions"]) == ("error", [])

    @pytest.mark.parametrize(
        "run_id", ["log:demo/events.jsonl:4", "log:nothing.jsonl:1", "log:x", "db:abc", "zzz"]
    )
    def test_an_unknown_run_is_a_404_saying_what_ids_look_like(
        self, demo_runs: Path, serve: Any, run_id: str
    ) -> None:
        server = serve(Catalog(demo_runs))
        for endpoint in ("run", "diagram", "events"):
            response = _get(server.url + f"api/{endpoint}/{run_id}")
            assert response.status_code == 404
            assert response.json() == {
                "error": f"no run {run_id!r}: ids are log:FILE:N (the N-th run of an event log "
                "in the runs folder) or db:RUN_ID (a run of the checkpoint store); GET "
                "/api/runs lists them"
            }

    def test_the_page_and_its_files_are_served(self, tmp_path: Path, serve: Any) -> None:
        """Plain files from the package: no CDN, no external address anywhere."""
        server = serve(Catalog(tmp_path))
        page = _get(server.url)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        for name in ("app.js", "style.css"):
            assert _get(server.url + f"static/{name}").status_code == 200
        for text in (page.text, _get(server.url + "static/app.js").text):
            assert "https://" not in text
            assert "http://" not in text.replace('"http://www.w3.org/2000/svg"', "")


class TestLive:
    def test_the_stream_follows_a_run_to_its_end(self, live_run: Any, serve: Any) -> None:
        """Server-sent events: the run's detail at each change, states in the order the
        run took them, then end."""
        folder, run = live_run
        server = serve(Catalog(folder))
        run.thread.start()
        deadline = time.monotonic() + 10
        while not run.log.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        events = _sse(server.url + "api/events/log:live.jsonl:1")
        assert events[-1] == ("end", {"status": "finished"})
        updates = [data for kind, data in events if kind == "run"]
        seen = [u["current"] for u in updates]
        assert "stream" in seen
        assert "execute" in seen
        assert seen.index("stream") < seen.index("execute")
        assert seen[-1] == "model_complete"
        assert updates[-1]["turns"] == 2
        # the first message carries the run so far; each later one only what was added
        assert [u["append"] for u in updates] == [False] + [True] * (len(updates) - 1)
        turns = [t for u in updates for t in u["turn_usage"]]
        assert [t["turn"] for t in turns] == [1, 2]
        assert updates[-1]["totals"]["turn_usage"] == 2
        tools = [t for u in updates for t in u["tools"]]
        assert [(t["name"], t["outcome"]) for t in tools] == [("add", "ok")]
        assert tools[0]["duration"] >= 1.0
        steps = [t for u in updates for t in u["transitions"]]
        assert len(steps) == updates[-1]["totals"]["transitions"]
        assert run.state.exit_reason == "model_complete"


class TestStore:
    def test_runs_of_a_sqlite_store(self, tmp_path: Path, serve: Any) -> None:
        """Status, exit reason, turns and cost from the store; the timeline from the
        checkpoints, the tool calls from the history, each turn from its checkpoint."""

        async def echo(args: Any, ctx: ToolContext) -> ToolOutput:
            return ToolOutput("echo:" + args["x"])

        db = f"sqlite:///{tmp_path / 'runs.db'}"
        params = HarnessParams(
            model="scripted:m", tools=[ToolSpec("echo", "Echo x", {"type": "object"}, echo)]
        )
        script = [reply("one", tool_call("echo", {"x": "a"}, id="c1")), reply("done")]
        harness = Harness(params, [ScriptedProvider(script)], checkpointer=db)
        harness.start("go", run_id="r1").run_sync()
        assert harness.checkpointer is not None
        harness.checkpointer.close()
        server = serve(Catalog(store=open_checkpointer(db)))
        (entry,) = _get(server.url + "api/runs").json()["runs"]
        assert {k: entry[k] for k in ("id", "source", "status", "exit_reason", "turns")} == {
            "id": "db:r1",
            "source": "db",
            "status": "finished",
            "exit_reason": "model_complete",
            "turns": 2,
        }
        detail = _get(server.url + "api/run/db:r1").json()
        path = [t["target"] for t in detail["transitions"]]
        assert path == [
            "assemble",
            "normalize",
            "call",
            "stream",
            "execute",
            "check",
            "assemble",
            "normalize",
            "call",
            "stream",
            "check",
            "model_complete",
        ]
        assert [(t["name"], t["outcome"], t["output"]) for t in detail["tools"]] == [
            ("echo", "ok", "echo:a")
        ]
        assert [t["turn"] for t in detail["turn_usage"]] == [1, 2]
        svg = _get(server.url + "api/diagram/db:r1").text
        assert "exit model_complete" in svg
        assert _sse(server.url + "api/events/db:r1")[-1] == ("end", {"status": "finished"})


def test_the_page_ships_as_package_data() -> None:
    """Every file of the page matches a package-data pattern, so a wheel carries it."""
    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["innerloop"]
    files = [p.relative_to(root / "innerloop").as_posix() for p in STATIC.iterdir()]
    assert sorted(files) == ["ui/static/app.js", "ui/static/index.html", "ui/static/style.css"]
    for name in files:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name
