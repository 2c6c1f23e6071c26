"""The live view's eval reports and rerun comparisons, over real HTTP (uvicorn on
loopback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from innerloop import Harness, HarnessParams
from innerloop.checkpoint import open_checkpointer
from innerloop.evals import Case, Contains, Dataset, rerun_sync, run_eval_sync
from innerloop.testing import ScriptedProvider, reply
from innerloop.ui import Catalog


def _get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=10)


def write_report(folder: Path) -> None:
    """An eval report of two cases (one passes) as ``folder/evals/capitals.json``."""
    model = ScriptedProvider([reply("Paris"), reply("Milan")])
    harness = Harness(HarnessParams(model="scripted:m"), [model])
    dataset = Dataset(
        [
            Case("fr", "France?", checks=[Contains("Paris")]),
            Case("it", "Italy?", checks=[Contains("Rome")]),
        ],
        name="capitals",
    )
    report = run_eval_sync(dataset, harness, concurrency=1)
    (folder / "evals").mkdir()
    (folder / "evals" / "capitals.json").write_text(json.dumps(report.to_dict()))


def store_rerun(folder: Path) -> str:
    """A store (its URL) holding run ``r1`` and ``r2``, its rerun on another model."""
    db = f"sqlite:///{folder / 'runs.db'}"
    first = ScriptedProvider([reply("It is Rome.")])
    Harness(HarnessParams(model="scripted:a"), [first], checkpointer=db).run_sync(
        "Italy?", run_id="r1"
    )
    other = Harness(HarnessParams(model="scripted:b"), [ScriptedProvider([reply("Milan.")])])
    rerun_sync(other, "r1", store=db, new_run_id="r2")
    return db


def test_eval_reports_of_the_runs_folder(tmp_path: Path, serve: Any) -> None:
    """A report written as JSON into the runs folder is shown with its figures and cases;
    other JSON files are not reports."""
    write_report(tmp_path)
    (tmp_path / "other.json").write_text('{"not": "a report"}')
    server = serve(Catalog(runs_dir=tmp_path))
    data = _get(server.url + "api/evals").json()
    assert [(r["file"], r["name"], r["passed"]) for r in data["reports"]] == [
        ("evals/capitals.json", "capitals", 1)
    ]
    page = _get(server.url + "evals")
    assert page.status_code == 200
    assert "1/2 (50%), 1 failed, 0 errors" in page.text
    assert "contains: &#x27;Rome&#x27; not in &#x27;Milan&#x27;" in page.text


def test_a_malformed_report_is_one_line_of_its_own(tmp_path: Path, serve: Any) -> None:
    """A report whose figures are not figures (``"pass_rate": "lots"``) is shown as one
    line naming its file and the problem; the page is no 500 and the other reports show."""
    model = ScriptedProvider([reply("Paris")])
    harness = Harness(HarnessParams(model="scripted:m"), [model])
    dataset = Dataset([Case("fr", "France?", checks=[Contains("Paris")])], name="capitals")
    good = run_eval_sync(dataset, harness, concurrency=1).to_dict()
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "bad.json").write_text(json.dumps({**good, "pass_rate": "lots"}))
    (tmp_path / "worse.json").write_text(json.dumps({**good, "results": [1], "recoveries": []}))
    page = _get(serve(Catalog(runs_dir=tmp_path)).url + "evals")
    assert page.status_code == 200
    assert "1/1 (100%), 0 failed, 0 errors" in page.text
    lines = [line for line in page.text.split("<p class='error'>")[1:]]
    assert sorted(line.split("</p>")[0] for line in lines) == [
        "bad.json: not an eval report this page can show (ValueError: Unknown format code "
        "&#x27;%&#x27; for object of type &#x27;str&#x27;)",
        "worse.json: not an eval report this page can show (AttributeError: &#x27;list&#x27; "
        "object has no attribute &#x27;items&#x27;)",
    ]


def test_no_reports_says_how_to_make_one(tmp_path: Path, serve: Any) -> None:
    page = _get(serve(Catalog(runs_dir=tmp_path)).url + "evals")
    assert "no eval report in the runs folder yet" in page.text


def test_a_rerun_compared(tmp_path: Path, serve: Any) -> None:
    """A rerun stored in the store is shown beside its parent; a run that is no fork is
    a 409, an unknown one a 404, each saying why."""
    server = serve(Catalog(store=open_checkpointer(store_rerun(tmp_path))))
    data = _get(server.url + "api/compare/db:r2").json()
    assert (data["run_id"], data["at"], data["rerun"]["run_id"]) == ("r1", 1, "r2")
    assert (data["original"]["output"], data["rerun"]["output"]) == ("It is Rome.", "Milan.")
    assert data["divergence"] is None
    page = _get(server.url + "compare/db:r2")
    assert page.status_code == 200
    assert "rerun of r1 from checkpoint 1" in page.text
    assert "same path; outputs differ" in page.text
    not_a_fork = _get(server.url + "api/compare/db:r1")
    assert not_a_fork.status_code == 409
    assert not_a_fork.json()["error"].startswith("run 'r1' is no fork")
    unknown = _get(server.url + "compare/db:nope")
    assert unknown.status_code == 404
    assert "no run &#x27;nope&#x27; in the checkpoint store" in unknown.text


def test_compare_without_a_store(tmp_path: Path, serve: Any) -> None:
    response = _get(serve(Catalog(runs_dir=tmp_path)).url + "api/compare/db:r1")
    assert response.status_code == 404
    assert response.json() == {"error": "no checkpoint store is open: start the view with --db URL"}
