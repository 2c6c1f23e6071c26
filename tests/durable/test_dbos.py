"""DBOS: loops as DBOS workflows in real worker processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from dbos import DBOSClient

from innerloop import Answer, ResumeError
from innerloop.durable._dbos import sqlite_problem
from innerloop.durable.dbos import DBOSLoopClient, dbos_config
from innerloop.fsm import Interrupt
from innerloop.testing import assert_valid_history
from tests.durable._checks import (
    APPROVAL_REFUSED,
    assert_each_run_replays,
    assert_only_call_1_reran,
    model_turns,
    started,
    tool_starts,
    until,
)
from tests.durable._procs import PostgresServer, Processes, spawn_dbos_worker
from tests.durable.conftest import dbos_sqlite, resumed_in_process


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh DBOS system database: a SQLite file, or a PostgreSQL server of its own."""
    if request.param == "sqlite":
        yield dbos_sqlite(tmp_path)
        return
    owner = Processes(tmp_path)
    # a directory of its own: the server's user may not enter pytest's private tmp dirs
    root = Path(tempfile.mkdtemp(prefix="innerloop-pg-"))
    server = PostgresServer(owner, root)
    try:
        server.start()
        yield server.url
    finally:
        owner.close()
        shutil.rmtree(root, ignore_errors=True)


def test_worker_killed_mid_tool_is_recovered_by_a_restart(
    database_url: str,
    procs: Processes,
    log_dir: Path,
    expected_history: list[dict[str, Any]],
) -> None:
    """kill -9 during a tool step; the restarted worker recovers the workflow and finishes
    with the same messages; only the tool call in flight runs twice."""
    (log_dir / "hold-1").touch()
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}

    async def main() -> tuple[Any, list[dict[str, Any]], int, int]:
        w1 = await asyncio.to_thread(spawn_dbos_worker, procs, "w1", database_url, env)
        client = DBOSClient(system_database_url=database_url)
        try:
            loops = DBOSLoopClient(client)
            await loops.start("tools", "go", id="dbos-crash")
            await until(started(log_dir, "call_1"), what="call_1 to start")
            procs.kill9(w1)
            w2 = await asyncio.to_thread(spawn_dbos_worker, procs, "w2", database_url, env)
            (log_dir / "hold-1").unlink()
            state = await asyncio.wait_for(loops.result("dbos-crash"), 60)
            events = [e async for e in loops.events("dbos-crash")]
            return state, events, w1.pid, w2.pid
        finally:
            client.destroy()

    state, events, pid1, pid2 = asyncio.run(main())
    assert [m.to_dict() for m in state.history] == expected_history
    assert_only_call_1_reran(log_dir, pid1, pid2)
    assert events[-1]["type"] == "finished"
    assert [e["type"] for e in events].count("model_response") == 4
    assert assert_each_run_replays(events) == ["model_complete"]  # recovered: one run


def test_abort_message_ends_the_loop_at_the_next_turn(
    procs: Processes, tmp_path: Path, log_dir: Path
) -> None:
    """An abort sent while a tool runs takes effect when the loop enters its next turn."""
    url = dbos_sqlite(tmp_path)
    (log_dir / "hold-1").touch()
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}

    async def main() -> Any:
        await asyncio.to_thread(spawn_dbos_worker, procs, "w", url, env)
        client = DBOSClient(system_database_url=url)
        try:
            loops = DBOSLoopClient(client)
            await loops.start("tools", "go", id="dbos-abort")
            await until(started(log_dir, "call_1"), what="call_1 to start")
            await loops.abort("dbos-abort", "the host said stop")
            (log_dir / "hold-1").unlink()
            state = await asyncio.wait_for(loops.result("dbos-abort"), 60)
            return state, [e async for e in loops.events("dbos-abort")]
        finally:
            client.destroy()

    state, events = asyncio.run(main())
    assert assert_each_run_replays(events) == ["aborted"]
    assert state.exit_reason == "aborted"
    assert state.abort.reason == "the host said stop"
    assert len(state.history) == 5
    assert state.history[-1].tool_results[0].content == "worked 1"


T = TypeVar("T")


def with_worker(
    procs: Processes,
    url: str,
    log_dir: Path,
    body: Callable[[DBOSLoopClient], Awaitable[T]],
) -> T:
    """Run ``body`` against one DBOS worker process on ``url``."""
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}

    async def main() -> T:
        await asyncio.to_thread(spawn_dbos_worker, procs, "w", url, env)
        client = DBOSClient(system_database_url=url)
        try:
            return await asyncio.wait_for(body(DBOSLoopClient(client)), 90)
        finally:
            client.destroy()

    return asyncio.run(main())


async def suspended(loops: DBOSLoopClient, id: str) -> Interrupt:
    """Poll until the loop waits suspended; its interrupt."""
    while (interrupt := await loops.interrupt(id)) is None:  # noqa: ASYNC110  another process
        await asyncio.sleep(0.05)
    return interrupt


@pytest.mark.parametrize(
    ("loop", "answer"), [("approval", True), ("approval", {"call_c": False}), ("question", "blue")]
)
def test_suspended_loop_resumes_on_the_message(
    procs: Processes, tmp_path: Path, log_dir: Path, loop: str, answer: Any
) -> None:
    """The run suspends, its workflow waits in recv, and ``resume`` takes it to the end
    with the history of the same run resumed in process; the event stream goes on past
    the suspension."""
    expected = resumed_in_process(loop, answer, tmp_path / "in-process")

    async def body(loops: DBOSLoopClient) -> tuple[Any, Interrupt, list[dict[str, Any]]]:
        await loops.start(loop, "go", id="r")
        interrupt = await suspended(loops, "r")
        await loops.resume("r", answer)
        state = await loops.result("r")
        assert await loops.interrupt("r") is None
        return state, interrupt, [e async for e in loops.events("r")]

    state, interrupt, events = with_worker(
        procs, dbos_sqlite(tmp_path), log_dir, body
    )
    assert interrupt.kind == loop
    assert interrupt.tool_use_ids == ("call_c",)
    assert [m.to_dict() for m in state.history] == expected
    assert state.exit_reason == "model_complete"
    finished = [e["exit_reason"] for e in events if e["type"] == "finished"]
    assert finished == ["suspended", "model_complete"]
    assert assert_each_run_replays(events) == finished


def test_wrong_answer_is_refused_and_the_loop_keeps_waiting(
    procs: Processes, tmp_path: Path, log_dir: Path
) -> None:
    """A wrong answer raises ResumeError with the in-process message and is not sent; a
    malformed message sent around the client is refused by the workflow, which keeps
    waiting; an answer for another interrupt is refused naming both; a right answer, by
    the interrupt's id, then ends the run as in process; an ended run takes none."""
    expected = resumed_in_process("approval", True, tmp_path / "in-process")

    async def body(loops: DBOSLoopClient) -> tuple[Any, str, Any]:
        await loops.start("approval", "go", id="w")
        asked = await suspended(loops, "w")
        with pytest.raises(ResumeError) as info:
            await loops.resume("w", "yes")
        with pytest.raises(
            ResumeError, match=r"interrupt 'approve:9', which it no longer waits on; it waits on "
        ):
            await loops.resume("w", Answer("approve:9", True))
        await loops.client.send_async("w", {"n": 1, "answer": "yes"}, "resume")
        refused = await loops.client.get_event_async("w", "resume_refused", 30)
        assert await loops.interrupt("w") is not None
        await loops.resume("w", Answer(asked.id, True))
        state = await loops.result("w")
        with pytest.raises(ResumeError, match="it is not waiting for an answer"):
            await loops.resume("w", True)
        return state, str(info.value), refused

    state, error, refused = with_worker(
        procs, dbos_sqlite(tmp_path), log_dir, body
    )
    assert error == f"run 'w': {APPROVAL_REFUSED}"
    assert refused == {"n": 1, "error": f"run 'w': {APPROVAL_REFUSED}"}
    assert [m.to_dict() for m in state.history] == expected


def test_worker_restart_while_suspended_still_resumes(
    database_url: str, procs: Processes, tmp_path: Path, log_dir: Path
) -> None:
    """kill -9 the worker while its loop waits suspended; the restarted worker recovers
    the workflow, which waits again, and the answer takes it to the in-process history;
    nothing ran twice."""
    expected = resumed_in_process("question", "blue", tmp_path / "in-process")
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}

    async def main() -> Any:
        w1 = await asyncio.to_thread(spawn_dbos_worker, procs, "w1", database_url, env)
        client = DBOSClient(system_database_url=database_url)
        try:
            loops = DBOSLoopClient(client)
            await loops.start("question", "go", id="susp")
            await asyncio.wait_for(suspended(loops, "susp"), 30)
            procs.kill9(w1)
            await asyncio.to_thread(spawn_dbos_worker, procs, "w2", database_url, env)
            await loops.resume("susp", "blue")
            state = await asyncio.wait_for(loops.result("susp"), 60)
            return state, [e async for e in loops.events("susp")]
        finally:
            client.destroy()

    state, events = asyncio.run(main())
    assert assert_each_run_replays(events) == ["suspended", "model_complete"]
    assert [m.to_dict() for m in state.history] == expected
    assert model_turns(log_dir) == Counter({"0": 1, "1": 1})
    assert [c for _, c in tool_starts(log_dir)] == ["call_c"]


def test_suspend_timeout_and_abort_while_suspended(
    procs: Processes, tmp_path: Path, log_dir: Path
) -> None:
    """With ``suspend_timeout`` the workflow ends in ``suspended`` after it; an abort
    ends a waiting loop in ``aborted`` with the pending call closed by an error result."""

    async def body(loops: DBOSLoopClient) -> tuple[Any, Any, list[list[dict[str, Any]]]]:
        await loops.start("approval", "go", id="t", suspend_timeout=0.5)
        timed_out = await loops.result("t")
        assert await loops.interrupt("t") is None
        with pytest.raises(ResumeError, match=r"^run 't': it is not waiting for an answer; "):
            await loops.resume("t", True)
        await loops.start("approval", "go", id="a")
        await suspended(loops, "a")
        await loops.abort("a", "no one will answer")
        aborted = await loops.result("a")
        return timed_out, aborted, [[e async for e in loops.events(id)] for id in ("t", "a")]

    timed_out, aborted, (waited, stopped) = with_worker(
        procs, dbos_sqlite(tmp_path), log_dir, body
    )
    assert assert_each_run_replays(waited) == ["suspended"]
    assert assert_each_run_replays(stopped) == ["suspended", "aborted"]
    assert timed_out.exit_reason == "suspended"
    assert timed_out.interrupt.kind == "approval"
    assert aborted.exit_reason == "aborted"
    assert aborted.abort.reason == "no one will answer"
    (closing,) = aborted.history[-1].tool_results
    assert (closing.tool_use_id, closing.is_error) == ("call_c", True)
    assert_valid_history(aborted.history)
    assert tool_starts(log_dir) == []


def test_dbos_on_sqlite_is_refused_where_dbos_cannot_stamp_its_rows() -> None:
    """DBOS 3 on Python 3.12+ needs SQLite 3.42 (unixepoch('subsec')); before, the config
    is refused with what to use instead, not a NOT NULL error at launch."""
    assert sqlite_problem((3, 11), (3, 40, 1)) is None
    assert sqlite_problem((3, 13), (3, 42, 0)) is None
    assert sqlite_problem((3, 13), (3, 40, 1)) == (
        "DBOS on Python 3.13 needs SQLite 3.42 or later for a SQLite system database (this "
        "Python's sqlite3 is 3.40.1): use a postgresql:// database_url, or a Python built "
        "against a newer SQLite"
    )
    if sqlite_problem() is not None:
        with pytest.raises(ValueError, match=r"needs SQLite 3\.42"):
            dbos_config("sqlite:///x.db")
    assert dbos_config("postgresql://u@h/db")["system_database_url"] == "postgresql://u@h/db"
