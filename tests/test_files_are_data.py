"""Files are data: opening a log, a checkpoint store or a dataset never imports, calls or
evaluates anything named inside it (issue 37, section 1), and what cannot be read or loaded
is one line and exit 2 (section 2).

Each log, store and dataset here names a module placed beside it in the current folder
(``evil_marker``: importing it writes ``imported.marker``, calling its functions writes
``called.marker``) or a stdlib callable that would end or disturb the process (``os:abort``,
``sys:exit``, ``faulthandler:dump_traceback``). Every command that reads them must leave no
marker, keep ``evil_marker`` out of ``sys.modules``, survive, and say what to pass."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from innerloop import DEFAULT_SPEC, EventLog, Harness, ResumeError
from innerloop.cli import main
from innerloop.evals import Dataset, DatasetError
from innerloop.fsm import MachineNotFound, load_spec
from innerloop.testing import ReplayError, ScriptedProvider, replay
from innerloop.ui import Catalog
from tests.test_cli import cli
from tests.testing.test_replay import PARAMS, SCRIPT

EVIL = """
import pathlib

pathlib.Path("imported.marker").write_text("imported")


def SPEC():
    pathlib.Path("called.marker").write_text("called")


def pred(ctx):
    pathlib.Path("called.marker").write_text("called")
    return True


async def tool(args, ctx):
    pathlib.Path("called.marker").write_text("called")


class Out:
    pass


PREDICATES = {}
"""

MODULE = "evil_marker"
TARGETS = ["evil_marker:SPEC", "sys:exit", "faulthandler:dump_traceback"]
"""What a file may name, for the tests run in this process: a function of the module beside
it, and stdlib callables that end the process (``sys:exit``) or write to stderr when called.
``os:abort`` (which would take the test process down with it) is tried in a real process
(:class:`TestInARealProcess`)."""


MACHINE = DEFAULT_SPEC.renamed("house")
"""A custom machine (no import path): a reader finds it only when given it."""


def house_harness() -> Harness:
    return Harness(PARAMS, [ScriptedProvider(SCRIPT)], machine=MACHINE)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The current folder, holding ``evil_marker.py``; afterwards nothing was imported or
    called."""
    (tmp_path / f"{MODULE}.py").write_text(EVIL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    yield tmp_path
    assert not (tmp_path / "imported.marker").exists()
    assert not (tmp_path / "called.marker").exists()
    assert MODULE not in sys.modules


def log_naming(folder: Path, target: str, name: str = "run.jsonl") -> Path:
    """A run's event log whose machine, tool function and output type name ``target``."""
    path = folder / name
    run = house_harness().start("What is 2 + 2?")
    with EventLog(path, {"command": "test"}) as log:
        for event in run.iter_sync():
            log.write(event)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if line.get("type") == "run_started":
            line["import_path"] = target
            line["params"]["tools"][0]["function"] = target
            line["params"]["output_type"] = {"import_path": target, "schema": {"type": "object"}}
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def store_naming(folder: Path, target: str) -> str:
    """A SQLite store holding run ``r1`` (finished) whose machine import path is ``target``."""
    url = f"sqlite:///{folder / 'runs.db'}"
    harness = Harness(PARAMS, [ScriptedProvider(SCRIPT)], machine=MACHINE, checkpointer=url)
    assert harness.start("What is 2 + 2?", run_id="r1").run_sync().exit_reason is not None
    assert harness.checkpointer is not None
    harness.checkpointer.close()
    db = sqlite3.connect(folder / "runs.db")
    try:  # a connection's with-block commits; it does not close (3.13 warns)
        with db:
            db.execute("UPDATE innerloop_runs SET machine_import_path = ?", (target,))
    finally:
        db.close()
    return url


def dataset_naming(folder: Path, target: str) -> Path:
    path = folder / "cases.json"
    case = {"name": "one", "inputs": "hi", "evaluators": [{"Predicate": target}]}
    path.write_text(json.dumps({"cases": [case]}))
    return path


def named(target: str) -> str:
    return f"pass --spec {target} naming that spec"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``innerloop ARGS`` in a real process run from ``cwd`` (where ``python -m`` puts the
    current folder first on the path: the module beside the file is importable)."""
    return cli(*args, cwd=cwd)


@pytest.mark.parametrize("target", TARGETS)
class TestLogs:
    def test_replay(self, here: Path, target: str, capsys: pytest.CaptureFixture[str]) -> None:
        """``innerloop replay LOG`` names the recorded machine as the --spec to pass."""
        log = log_naming(here, target)
        assert main(["replay", str(log)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"innerloop replay: run 1 of {log} ran on machine 'house'")
        assert err.endswith(named(target) + "\n")
        assert len(err.splitlines()) == 1
        with pytest.raises(ReplayError, match=named(target)):
            replay(log)

    def test_replay_with_the_machine_given(self, here: Path, target: str) -> None:
        """Given the machine, the replay runs: the recorded tool function and output type
        are read as data, not imported (the run had no output type: the caller's params
        say so)."""
        log = log_naming(here, target)
        unset = lambda p: p.evolve(output_type=None)  # noqa: E731
        result = replay(log, specs=[MACHINE], params=unset).assert_same()
        assert result.state.exit_reason == "model_complete"
        with pytest.raises(ReplayError, match="tool 'add' is only its record"):
            replay(log, specs=[MACHINE], real_tools=True)

    def test_diagram_trace(
        self, here: Path, target: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        log = log_naming(here, target)
        assert main(["diagram", "--trace", str(log), "--format", "mermaid"]) == 1
        err = capsys.readouterr().err
        assert err.endswith(named(target) + "\n")
        assert len(err.splitlines()) == 1

    def test_ui_runs_and_the_live_view(self, here: Path, target: str) -> None:
        """The page's run detail says which --spec to pass; its diagram is refused."""
        (here / "runs").mkdir()
        log = log_naming(here / "runs", target)
        for catalog, run_id in (
            (Catalog(here / "runs"), "log:run.jsonl:1"),
            (Catalog(files=(log,)), "log:run.jsonl:1"),
        ):
            assert catalog.detail(run_id)["machine_error"].endswith(named(target))
            with pytest.raises(MachineNotFound, match=named(target)):
                catalog.diagram(run_id)


@pytest.mark.parametrize("target", TARGETS)
class TestStores:
    def test_runs_show_diagram(
        self, here: Path, target: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        url = store_naming(here, target)
        assert main(["runs", "show", "r1", "--db", url, "--diagram", "t.svg"]) == 2
        err = capsys.readouterr().err
        assert err.endswith(named(target) + "\n")
        assert not (here / "t.svg").exists()

    def test_runs_resume(self, here: Path, target: str, capsys: pytest.CaptureFixture[str]) -> None:
        url = store_naming(here, target)
        assert main(["runs", "resume", "r1", "--db", url]) == 2
        assert capsys.readouterr().err.endswith(named(target) + "\n")

    def test_runs_rerun(self, here: Path, target: str, capsys: pytest.CaptureFixture[str]) -> None:
        url = store_naming(here, target)
        harness = "tests.test_files_are_data:default_harness"
        assert main(["runs", "rerun", "r1", "--db", url, "--harness", harness]) == 2
        err = capsys.readouterr().err
        assert "it ran on machine 'house'" in err
        assert len(err.splitlines()) == 1

    def test_ui_db(self, here: Path, target: str) -> None:
        from innerloop.checkpoint import open_checkpointer

        store = open_checkpointer(store_naming(here, target))
        try:
            catalog = Catalog(store=store)
            assert catalog.detail("db:r1")["machine_error"].endswith(named(target))
            with pytest.raises(MachineNotFound, match=named(target)):
                catalog.diagram("db:r1")
        finally:
            store.close()

    def test_resume_and_fork(self, here: Path, target: str) -> None:
        """A harness on another machine is refused, the recorded path only named."""
        url = store_naming(here, target)
        harness = Harness(PARAMS, [ScriptedProvider([])], checkpointer=url)
        try:
            for go_on in (harness.resume, harness.fork):
                with pytest.raises(ResumeError, match="it ran on machine 'house'"):
                    go_on("r1")
        finally:
            assert harness.checkpointer is not None
            harness.checkpointer.close()


def default_harness() -> Harness:
    """A harness on the default machine, for ``--harness``."""
    return Harness(PARAMS, [ScriptedProvider(SCRIPT)])


@pytest.mark.parametrize("target", TARGETS)
class TestDatasets:
    def test_eval(self, here: Path, target: str, capsys: pytest.CaptureFixture[str]) -> None:
        """A dataset's Predicate is a name the user's code registers, never imported."""
        path = dataset_naming(here, target)
        harness = "tests.test_files_are_data:default_harness"
        assert main(["eval", str(path), "--harness", harness]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"innerloop eval: error: {path}: case 'one': evaluators[0]: Predicate {target!r} "
            f"is not registered; a dataset file is data and names only the predicates your "
            f"code registers: pass predicates={{{target!r}: fn}} to Dataset.load, or "
            "--predicates MODULE:ATTR (a mapping of names to functions) to innerloop eval\n"
        )
        with pytest.raises(DatasetError, match="is not registered"):
            Dataset.load(path)

    def test_a_registered_name_is_the_users_function(self, here: Path, target: str) -> None:
        seen: list[str] = []

        def mine(ctx: Any) -> bool:
            seen.append("mine")
            return True

        (case,) = Dataset.load(dataset_naming(here, target), predicates={target: mine}).cases
        assert case.checks[0].fn is mine  # type: ignore[attr-defined]


PREDICATES = {"polite": lambda ctx: "please" in str(ctx.output)}


def test_eval_takes_the_predicates_named_on_the_command_line(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--predicates MODULE:ATTR`` names the mapping a dataset's names are looked up in."""
    path = dataset_naming(here, "polite")
    harness = "tests.test_files_are_data:default_harness"
    predicates = "tests.test_files_are_data:PREDICATES"
    args = ["eval", str(path), "--harness", harness, "--no-progress"]
    assert main([*args, "--predicates", predicates]) == 1  # "4." is not polite: a case failed
    assert "polite" in capsys.readouterr().out
    assert main([*args, "--predicates", "tests.test_files_are_data:MACHINE"]) == 2
    assert capsys.readouterr().err == (
        "innerloop eval: error: --predicates: tests.test_files_are_data:MACHINE: expected a "
        "Mapping, got MachineSpec; name a Mapping, or a function of no argument that returns "
        "one\n"
    )


class TestForwardReference:
    @pytest.mark.parametrize(
        "schema",
        [
            f"__import__('{MODULE}') or str",
            "__import__('os').system('touch called.marker') or str",
            ["__import__('os')"],
        ],
    )
    def test_a_recorded_type_is_never_evaluated(
        self, here: Path, schema: Any, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A recorded output type whose schema is not a JSON Schema object (pydantic would
        take a string as a forward reference and evaluate it) is refused, naming it."""
        log = log_naming(here, "evil_marker:SPEC")
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        for line in lines:
            if line.get("type") == "run_started":
                line["params"]["output_type"] = {"import_path": None, "schema": schema}
        log.write_text("".join(json.dumps(line) + "\n" for line in lines))
        assert main(["replay", str(log), "--spec", "tests.test_files_are_data:MACHINE"]) == 2
        got = type(schema).__name__
        assert capsys.readouterr().err == (
            f"innerloop replay: cannot replay run 1 of {log}: output_type.schema is a {got}, "
            "not a JSON Schema object; a recorded type is read back only as a JSON Schema dict "
            "(pass params= with the output_type to use your own class)\n"
        )


@pytest.mark.parametrize("target", ["os:abort", "sys:exit", "faulthandler:dump_traceback"])
class TestInARealProcess:
    """The commands in a real process, the file naming a stdlib callable: it survives."""

    def test_replay_and_diagram(self, tmp_path: Path, target: str) -> None:
        log = log_naming(tmp_path, target)
        done = run_cli("replay", str(log), cwd=tmp_path)
        assert (done.returncode, done.stderr.endswith(named(target) + "\n")) == (2, True)
        drawn = run_cli("diagram", "--trace", str(log), "--format", "mermaid", cwd=tmp_path)
        assert (drawn.returncode, drawn.stderr.endswith(named(target) + "\n")) == (1, True)

    def test_runs_show(self, tmp_path: Path, target: str) -> None:
        url = store_naming(tmp_path, target)
        done = run_cli("runs", "show", "r1", "--db", url, "--diagram", "t.svg", cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.endswith(named(target) + "\n")

    def test_eval(self, tmp_path: Path, target: str) -> None:
        path = dataset_naming(tmp_path, target)
        harness = "tests.test_files_are_data:default_harness"
        done = run_cli("eval", str(path), "--harness", harness, cwd=tmp_path)
        assert done.returncode == 2
        assert f"Predicate {target!r} is not registered" in done.stderr
        assert len(done.stderr.splitlines()) == 1
        assert "Stack" not in done.stderr  # faulthandler was not called either


# -- section 2: one line and exit 2 ----------------------------------------------------------

RAISES = 'raise RuntimeError("configuration missing")\n'
BAD_SYNTAX = "def harness(:\n    pass\n"
CALL_RAISES = "def harness():\n    raise KeyError('API_KEY')\n"


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The current folder with modules that fail to load, a dataset and a log."""
    (tmp_path / "mod_raises.py").write_text(RAISES)
    (tmp_path / "mod_syntax.py").write_text(BAD_SYNTAX)
    (tmp_path / "mod_call_raises.py").write_text(CALL_RAISES)
    (tmp_path / "cases.json").write_text(json.dumps({"cases": [{"inputs": "hi"}]}))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("mod_raises", "mod_syntax", "mod_call_raises"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        (
            "mod_raises:harness",
            "cannot load the harness mod_raises:harness: importing mod_raises raised "
            "RuntimeError: configuration missing",
        ),
        (
            "mod_syntax:harness",
            "cannot load the harness mod_syntax:harness: module mod_syntax has a syntax error "
            "({folder}/mod_syntax.py, line 1): invalid syntax",
        ),
        (
            "mod_call_raises:harness",
            "mod_call_raises:harness() raised KeyError: 'API_KEY'",
        ),
        (
            "builtins:input",
            "builtins:input: expected a Harness, got builtin_function_or_method; name a "
            "Harness, or a function of no argument that returns one",
        ),
    ],
)
def test_a_harness_that_cannot_be_loaded_is_one_line_and_exit_2(
    modules: Path, target: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval, rerun and replay: exit 2 (for eval, 1 means a case failed) and one line."""
    line = problem.replace("{folder}", str(modules))
    assert main(["eval", "cases.json", "--harness", target]) == 2
    assert capsys.readouterr().err == f"innerloop eval: error: --harness: {line}\n"
    assert main(["runs", "rerun", "r1", "--db", "sqlite:///x.db", "--harness", target]) == 2
    assert capsys.readouterr().err == f"innerloop runs: error: --harness: {line}\n"
    log = log_naming(modules, "x:y")
    assert main(["replay", str(log), "--harness", target]) == 2
    assert capsys.readouterr().err == f"innerloop replay: --harness: {line}\n"


def test_a_spec_that_cannot_be_loaded_is_one_line_and_exit_2(
    modules: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = (
        "cannot load the machine mod_raises:SPEC: importing mod_raises raised RuntimeError: "
        "configuration missing"
    )
    log = log_naming(modules, "x:y")
    assert main(["replay", str(log), "--spec", "mod_raises:SPEC"]) == 2
    assert capsys.readouterr().err == f"innerloop replay: {line}\n"
    url = store_naming(modules, "x:y")
    args = ["runs", "show", "r1", "--db", url, "--diagram", "t.svg", "--spec", "mod_syntax:S"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("innerloop runs: error: --spec: cannot load the machine mod_syntax:S")
    assert len(err.splitlines()) == 1


def test_a_log_with_nan_in_a_usage_is_one_line_and_exit_2(
    modules: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = log_naming(modules, "x:y")
    usage = '"usage": {"input_tokens": '
    text = log.read_text().replace(usage, usage + 'NaN, "x": ')
    assert "NaN" in text
    log.write_text(text)
    assert main(["replay", str(log), "--spec", "tests.test_files_are_data:MACHINE"]) == 2
    assert capsys.readouterr().err == (
        f"innerloop replay: cannot replay run 1 of {log}: its events cannot be read: cannot "
        "read a Event from this data: expected an integer, got a number (nan) @ "
        "$.usage.input_tokens\n"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "cases:\n  - inputs: hi\n    expected_output: " + "[" * 3000 + "]" * 3000 + "\n",
            "nested too deep to read (a dataset nests at most 100 levels)",
        ),
        (
            "cases:\n  - inputs: hi\n    evaluators:\n      - MatchesSchema: &a\n"
            "          type: object\n          properties: {x: *a}\n",
            "a value holds itself (a YAML alias inside its own anchor); a dataset is a tree of "
            "plain values",
        ),
        (
            "cases:\n  - inputs: hi\n    expected_output: "
            + "[" * 150
            + "]" * 150
            + "\n",
            "nested deeper than 100 levels of lists and mappings",
        ),
    ],
)
def test_a_dataset_too_deep_or_holding_itself_is_one_line_and_exit_2(
    modules: Path, text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (modules / "deep.yaml").write_text(text)
    harness = "tests.test_files_are_data:default_harness"
    assert main(["eval", "deep.yaml", "--harness", harness]) == 2
    assert capsys.readouterr().err == f"innerloop eval: error: deep.yaml: {problem}\n"


def test_a_module_named_on_the_command_line_is_found_in_the_current_folder_last(
    modules: Path,
) -> None:
    """The current folder is searched after every other entry of the path while the
    module the user named is imported (a file beside a log never shadows an installed
    module), and taken off the path afterwards."""
    (modules / "where_am_i.py").write_text(
        "import os, sys\n"
        "from innerloop.fsm import DEFAULT_SPEC as SPEC\n"
        "LAST = sys.path[-1] == os.getcwd()\n"
    )
    try:
        assert load_spec("where_am_i:SPEC") is DEFAULT_SPEC
        assert sys.modules["where_am_i"].LAST is True
        assert str(modules) not in sys.path
    finally:
        sys.modules.pop("where_am_i", None)
