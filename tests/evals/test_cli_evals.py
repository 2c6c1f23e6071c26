"""``innerloop eval`` and ``innerloop runs rerun`` on the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from innerloop import Harness, HarnessParams
from innerloop.cli import main
from innerloop.testing import ScriptedProvider, reply

HARNESS = """
from innerloop import Harness, HarnessParams
from innerloop.testing import FakeProvider, reply


def answer(request):
    text = str(request.payload["messages"])
    if "<rubric>" in text:  # a judge's question
        return reply('{"passed": false, "reason": "it names Milan"}')
    return reply("It is Paris." if "France" in text else "It is Milan.")


def harness():
    return Harness(HarnessParams(model="scripted:m"), [FakeProvider(answer)])


not_a_harness = 42
"""

DATASET = """
name: capitals
cases:
  - name: france
    inputs: Capital of France?
    evaluators: [{Contains: Paris}]
  - name: italy
    inputs: Capital of Italy?
    evaluators: [{Contains: Rome}, {LLMJudge: Names Rome}]
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module with a harness in the current directory; its import name (one per test,
    as imported modules stay imported)."""
    name = "evalharness_" + re.sub(r"\W", "_", tmp_path.name)
    (tmp_path / f"{name}.py").write_text(HARNESS)
    (tmp_path / "cases.yaml").write_text(DATASET)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # rich's width off a terminal: no folded cells
    return name


def test_eval_reports_and_writes_json(
    project: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A case fails: exit 1, the table names it and why; --json holds the report."""
    code = main(
        ["eval", "cases.yaml", "--harness", f"{project}:harness", "--json", "out.json",
         "--concurrency", "2", "--no-progress"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "eval capitals" in out
    assert "'Rome' not in 'It is Milan.'" in out
    assert "1/2 (50%), 1 failed, 0 errors" in out
    assert "judge: it names Milan" in out
    data = json.loads((tmp_path / "out.json").read_text())
    assert [(r["name"], r["status"]) for r in data["results"]] == [
        ("france", "passed"),
        ("italy", "failed"),
    ]
    assert data["concurrency"] == 2


def test_eval_passes_with_exit_0(project: str, tmp_path: Path) -> None:
    (tmp_path / "ok.json").write_text(
        json.dumps(
            {"cases": [{"inputs": "Capital of France?", "evaluators": [{"Contains": "Paris"}]}]}
        )
    )
    assert main(["eval", "ok.json", "--harness", f"{project}:harness"]) == 0  # with progress


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.yaml", "--harness", "x:y"], "missing.yaml: cannot be read"),
        (["cases.yaml", "--harness", "nomodule_here:h"], "--harness: cannot load the harness "
         "nomodule_here:h: No module named 'nomodule_here'"),
        (["cases.yaml", "--harness", "{project}:not_a_harness"],
         "--harness: {project}:not_a_harness: expected a Harness, got int; name a Harness"),
        (["cases.yaml", "--harness", "{project}"], "--harness: --harness expects MODULE:ATTR"),
        (["cases.yaml", "--harness", "{project}:harness", "--judge-model", "x:y"],
         "--judge-model: no provider given for x; pass providers={'x': ...}"),
        (["cases.yaml", "--harness", "{project}:harness", "--json", "no/such/dir/out.json"],
         "--json: cannot write no/such/dir/out.json (no such folder, a folder, or not writable)"),
    ],
)  # fmt: skip
def test_eval_usage_errors(
    project: str, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """Bad usage is one line on stderr and exit code 2."""
    code = main(["eval", *(a.replace("{project}", project) for a in args)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"innerloop eval: error: {message.replace('{project}', project)}")
    assert len(err.splitlines()) == 1


def test_runs_rerun(project: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stored run rerun on the module's harness with another prompt: side by side, and
    as JSON."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    first = Harness(
        HarnessParams(model="scripted:m"),
        [ScriptedProvider([reply("It is Rome.")])],
        checkpointer=db,
    )
    first.run_sync("Capital of Italy?", run_id="r1")
    code = main(
        ["runs", "rerun", "r1", "--db", db, "--harness", f"{project}:harness",
         "--message", "Capital of France?", "--json", "cmp.json"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "rerun of r1 from checkpoint 1" in out
    assert "outputs differ" in out
    data = json.loads((tmp_path / "cmp.json").read_text())
    assert (data["original"]["output"], data["rerun"]["output"]) == ("It is Rome.", "It is Paris.")
    assert data["divergence"] is None  # the same path, another answer


def test_runs_rerun_unknown_run(
    project: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    code = main(["runs", "rerun", "nope", "--db", db, "--harness", f"{project}:harness"])
    assert code == 2
    assert "no run 'nope' in the checkpoint store" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "own", "other"),
    [
        (["eval", "--help"], "innerloop eval DATASET --harness", "rerun"),
        (["runs", "rerun", "--help"], "innerloop runs rerun RUN_ID --db URL", "DATASET"),
    ],
)
def test_each_command_s_help_describes_itself_only(
    argv: list[str], own: str, other: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`innerloop eval --help` shows eval's usage alone, `runs rerun --help` rerun's."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert own in out
    assert other not in out
