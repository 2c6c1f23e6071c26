from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from innerloop import Harness
from innerloop.durable import LoopApp
from tests.durable import app as test_app
from tests.durable._procs import Processes, TemporalServer


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    """Processes started by one test; whatever still runs is killed at its end."""
    owner = Processes(tmp_path)
    yield owner
    owner.close()


@pytest.fixture(scope="module")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalServer]:
    """One Temporal dev server for a test module (tests use their own task queues)."""
    root = tmp_path_factory.mktemp("temporal")
    owner = Processes(root)
    server = TemporalServer(owner, root / "temporal.db")
    server.start()
    yield server
    owner.close()


@pytest.fixture
def log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the test app's steps log (for workers in this process and in subprocesses)."""
    d = tmp_path / "steps"
    d.mkdir()
    monkeypatch.setenv("INNERLOOP_TEST_DIR", str(d))
    return d


@pytest.fixture(scope="session")
def expected_history(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The history the test loop has when run in process, without any crash."""
    d = tmp_path_factory.mktemp("in-process")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INNERLOOP_TEST_DIR", str(d))
        definition = test_app.app.get("tools")
        state = Harness(definition.params, definition.providers).run_sync("go")
    assert state.exit_reason == "model_complete"
    return [m.to_dict() for m in state.history]


def lines(path: Path) -> list[list[str]]:
    """A step log as [pid, what, ...] rows."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines()]


def app() -> LoopApp:
    return test_app.app


def resumed_in_process(loop: str, answer: Any, tmp: Path) -> list[dict[str, Any]]:
    """The history of loop ``loop`` of the test app run in process with ``Harness``:
    suspended once, then resumed with ``answer``."""
    tmp.mkdir(exist_ok=True)
    definition = test_app.app.get(loop)
    harness = Harness(definition.params, definition.providers, machine=definition.machine)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INNERLOOP_TEST_DIR", str(tmp))
        state = harness.run_sync("go")
        assert state.exit_reason == "suspended"
        state = harness.resume(state, answer).run_sync()
    assert state.exit_reason == "model_complete"
    return [m.to_dict() for m in state.history]


def dbos_sqlite(tmp_path: Path) -> str:
    """A SQLite system database for DBOS, or a skip saying why DBOS cannot use one under
    this Python (Python 3.12+ against a SQLite before 3.42: see ``sqlite_problem``)."""
    from innerloop.durable._dbos import sqlite_problem

    problem = sqlite_problem()
    if problem is not None:
        pytest.skip(problem)
    return f"sqlite:///{tmp_path / 'dbos.sqlite'}"
