"""Crash safety with real processes: kill -9 mid-stream and mid-tool, then resume in
another process; 100 runs checkpointing at once into one SQLite file and one PostgreSQL
database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from innerloop import Harness, HarnessParams
from innerloop.checkpoint import decode, open_checkpointer
from innerloop.examples import with_approval
from innerloop.testing import ScriptedProvider, assert_valid_history, reply, tool_call
from tests.checkpoint.child import MODEL, crash_tools, pay_tools

ROOT = Path(__file__).resolve().parents[2]


def spawn(*args: str, stdout: int | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.checkpoint.child", *args],
        cwd=ROOT,
        env=env,
        stdout=stdout,
        start_new_session=True,
    )


def wait_until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def latest_state(url: str, run_id: str) -> str | None:
    store = open_checkpointer(url)
    try:
        runs = {r.run_id: r for r in store.runs()}
        info = runs.get(run_id)
        return None if info is None else f"{info.state}@{info.turns}"
    finally:
        store.close()


@pytest.mark.parametrize("commit", ["barrier", "each"])
@pytest.mark.parametrize("mode", ["tool", "stream"])
def test_kill_9_then_resume(db_url: str, mode: str, commit: str, tmp_path: Path) -> None:
    """kill -9 in turn 2 (in its tool call, or while its answer streams); another
    process resumes from the last checkpoint: every checkpoint reads back whole, turn 1's
    tool call never runs again, and the run finishes with a valid history. With group
    commit the checkpoint on entering ``stream`` waits for the next barrier, so the last
    one committed mid-stream is the model call's (a resume starts there either way)."""
    child = spawn("crash", db_url, "r1", mode, str(tmp_path), commit)
    try:
        if mode == "tool":
            wait_until(lambda: (tmp_path / "blocking").exists(), 60, "the blocking tool")
        else:
            entered = "call@1" if commit == "barrier" else "stream@1"
            wait_until(lambda: latest_state(db_url, "r1") == entered, 60, "turn 2's call")
            time.sleep(1.0)  # well inside the 20-second stream
        assert child.poll() is None
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL

    store = open_checkpointer(db_url)
    infos = store.checkpoints("r1")
    for info in infos:  # no torn or half-written checkpoint
        decode(store.rows("r1", info.seq))
    last = decode(store.rows("r1"))
    streaming = "call" if commit == "barrier" else "stream"
    assert last.info.state == ("execute" if mode == "tool" else streaming)
    assert (tmp_path / "ran.log").read_text() == "record 1\n"

    (tmp_path / "release").touch()
    params = HarnessParams(model=MODEL, tools=crash_tools(tmp_path))
    provider = ScriptedProvider([reply("done")], name="anthropic")
    harness = Harness(params, [provider], checkpointer=store)
    state = harness.resume("r1").run_sync()
    assert state.exit_reason == "model_complete"
    assert state.history[: len(last.state.history)] == last.state.history
    assert (tmp_path / "ran.log").read_text() == "record 1\n"
    assert_valid_history(state.history)
    assert [r.status for r in harness.runs()] == ["finished"]
    store.close()


def test_100_concurrent_runs(db_url: str) -> None:
    """4 processes x 25 threads, each run on its own store (on PostgreSQL two connections:
    its reads', its loop's commits'), 3 turns each, every
    transition checkpointed into one store: no 'database is locked' and no serialization
    error reaches a run; every run is stored whole."""
    children = [spawn("many", db_url, f"p{i}", "25", "3", stdout=subprocess.PIPE) for i in range(4)]
    reports = []
    for child in children:
        out, _ = child.communicate(timeout=300)
        assert child.returncode == 0
        reports.append(json.loads(out))
    assert [e for r in reports for e in r["errors"]] == []
    store = open_checkpointer(db_url)
    runs = store.runs()
    assert len(runs) == 100
    assert {(r.status, r.exit_reason, r.turns) for r in runs} == {("finished", "model_complete", 4)}
    assert {r.checkpoints for r in runs} == {1 + 3 * 6 + 5 + 1}
    store.close()


def test_two_processes_answering_one_suspension_pay_once(db_url: str, tmp_path: Path) -> None:
    """Two processes resume one stored suspension with the same answer at once: each reads
    the run and checks its answer, then both claim it after a barrier. In every trial one
    goes on and pays; the other is refused, naming the interrupt; the run pays once."""
    for trial in range(3):
        work = tmp_path / f"trial{trial}"
        work.mkdir()
        run_id = f"pay-{trial}"
        store = open_checkpointer(db_url)
        script = ScriptedProvider([reply(tool_call("pay", {"amount": 100}, id="p1"))])
        harness = Harness(
            HarnessParams(model="scripted:m", tools=pay_tools(work)),
            [script],
            machine=with_approval(),
            checkpointer=store,
        )
        assert harness.start("pay the bill", run_id=run_id).run_sync().exit_reason == "suspended"
        store.close()
        children = [
            spawn("pay", db_url, run_id, str(work), who, stdout=subprocess.PIPE)
            for who in ("a", "b")
        ]
        said = sorted(c.communicate(timeout=120)[0].decode().strip() for c in children)
        assert [c.returncode for c in children] == [0, 0], said
        assert said == [
            f"refused: run '{run_id}': its interrupt 'approve:1' was already answered by "
            "another resume (in this process or another); nothing was answered again. "
            "harness.checkpoint(run_id) shows where the run is now; fork it (at=7) to "
            "answer that question anew",
            "resumed: model_complete",
        ], trial
        assert (work / "paid.log").read_text() == "paid 100\n"
