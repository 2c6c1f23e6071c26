"""The newcomer programs in ``examples/`` run as a user runs them (their own process, the
real SDKs against loopback servers) and type-check under ``mypy --strict`` as user code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def program(*args: str, cwd: Path = ROOT, path: Path = ROOT) -> list[str]:
    """Run ``python ARGS...`` as a user would; its stdout lines (it must exit 0)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(path)
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_embed_and_stream() -> None:
    """The host prints what it matched of each typed event, as it streamed."""
    assert program(str(EXAMPLES / "embed_and_stream.py")) == [
        "[innerloop from idle]",
        "[calling weather]",
        "[weather gave 'sunny, 24 C in Lisbon']",
        "It is sunny in Lisbon.",
        "model_complete after 2 turns, 30 tokens",
        "path: assemble -> normalize -> call -> stream -> execute -> check -> assemble -> "
        "normalize -> call -> stream -> check -> model_complete",
    ]


def test_per_transition_tests_with_a_scoped_gate() -> None:
    """The newcomer's test module passes under pytest, from examples/ as its own project,
    and the gate on the edges the reviewed machine adds is met."""
    lines = program(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_reviewed_machine.py",
        "-p", "innerloop.testing.pytest_plugin",
        "--innerloop-coverage=custom_state:SPEC-innerloop.fsm:DEFAULT_SPEC",
        "--innerloop-coverage-strict",
        cwd=EXAMPLES, path=EXAMPLES,
    )  # fmt: skip
    assert "transition coverage of 'reviewed' (the transitions it adds over 'innerloop'):" in (
        lines
    )
    assert "4/4 transitions taken" in lines
    assert lines[-1].startswith("5 passed")


def test_custom_state(tmp_path: Path) -> None:
    """The review state sends the first answer back once; the path is drawn."""
    lines = program(str(EXAMPLES / "custom_state.py"), str(tmp_path))
    assert lines[0] == "model_complete 2 'Lisbon. source: an atlas'"
    assert lines[1] == (
        "idle -> assemble -> normalize -> call -> stream -> check -> review -> assemble -> "
        "normalize -> call -> stream -> check -> review -> model_complete"
    )
    assert "review --> assemble : ★" not in (tmp_path / "reviewed.mmd").read_text()
    assert "check --> review" in (tmp_path / "reviewed.mmd").read_text()
    assert (tmp_path / "reviewed.svg").read_bytes().startswith(b"<?xml")


def test_persist_resume_fork_in_three_processes(tmp_path: Path) -> None:
    """Suspended in one process, approved in a second, forked and denied in a third."""
    db = str(tmp_path / "runs.db")
    started = program(str(EXAMPLES / "persist_resume_fork.py"), "start", db)
    status, run_id, calls = started[0].split(" ", 2)
    assert (status, calls) == ("suspended", "['delete_file']")
    resumed = program(str(EXAMPLES / "persist_resume_fork.py"), "resume", db, run_id)
    assert resumed[0] == "model_complete 'Removed build.log.'"
    assert resumed[1].endswith("(14, 'check'), (15, 'model_complete')]")
    forked = program(str(EXAMPLES / "persist_resume_fork.py"), "fork", db, run_id)
    assert forked == [
        "model_complete 'I did not remove it.'",
        "[('approval', 'finished', 'model_complete'), ('approval', 'finished', "
        "'model_complete')]",
    ]


def test_typed_output() -> None:
    assert program(str(EXAMPLES / "typed_output.py")) == [
        "model_complete 1 json_schema",
        "Lisbon: 21.5 C",
    ]


def test_tracing_and_live_view(tmp_path: Path) -> None:
    lines = program(str(EXAMPLES / "tracing_and_live_view.py"), str(tmp_path))
    assert lines[0] == (
        "model_complete ['chat claude-sonnet-4-5-20250929', 'chat claude-sonnet-4-5-20250929', "
        "'execute_tool weather', 'invoke_agent innerloop']"
    )
    assert lines[1:3] == [
        "log:weather.jsonl:1 finished model_complete 2",
        "machine: innerloop None",
    ]
    assert b"<title>execute</title>" in (tmp_path / "weather.svg").read_bytes()


def test_mypy_strict_as_user_code(tmp_path: Path) -> None:
    """The programs pass ``mypy --strict`` run from outside the repository, with the
    project as ``make`` installs it (a user's own folder, the examples beside each
    other as their own modules)."""
    programs = sorted(str(p) for p in EXAMPLES.glob("*.py"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MYPYPATH"] = str(EXAMPLES)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path), *programs],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout
