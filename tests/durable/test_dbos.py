"""DBOS: loops as DBOS workflows in real worker processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOSClient

from innerloop.durable.dbos import DBOSLoopClient
from tests.durable._checks import assert_only_call_1_reran, started, until
from tests.durable._procs import PostgresServer, Processes, spawn_dbos_worker


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh DBOS system database: a SQLite file, or a PostgreSQL server of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'dbos.sqlite'}"
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


def test_abort_message_ends_the_loop_at_the_next_turn(
    procs: Processes, tmp_path: Path, log_dir: Path
) -> None:
    """An abort sent while a tool runs takes effect when the loop enters its next turn."""
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
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
            return await asyncio.wait_for(loops.result("dbos-abort"), 60)
        finally:
            client.destroy()

    state = asyncio.run(main())
    assert state.exit_reason == "aborted"
    assert state.abort.reason == "the host said stop"
    assert len(state.history) == 5
    assert state.history[-1].tool_results[0].content == "worked 1"
