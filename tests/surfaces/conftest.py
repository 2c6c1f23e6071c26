"""Runs of custom machines recorded the two ways users record them: an event log holding
several runs (each on its own machine) and a checkpoint store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from innerloop import DEFAULT_SPEC, EventLog, Harness, HarnessParams, tool
from innerloop.examples import with_approval
from innerloop.testing import ScriptedProvider, TransitionCoverage, reply, tool_call
from tests.surfaces.machines import COSTCAP
from tests.ui.conftest import serve  # noqa: F401 (the live view tests use it)

MODEL = "anthropic:claude-sonnet-4-5-20250929"


@tool(category="file")
async def read_file(path: str) -> str:
    """Read a file (stands in for the built-in of the same name)."""
    return f"contents of {path}"


def model(*replies: Any) -> ScriptedProvider:
    return ScriptedProvider(list(replies), name="anthropic")


APPROVAL_SCRIPT = (reply(tool_call("read_file", {"path": "a.txt"}, id="c1")),)


@pytest.fixture
def recorded(tmp_path: Path, transition_coverage: TransitionCoverage) -> dict[str, Any]:
    """A log of three runs (approval, suspended; the default machine; cost cap) and a
    store holding the same three under ids ``appr``, ``plain`` and ``cap``."""
    params = HarnessParams(model=MODEL, tools=[read_file])
    db = tmp_path / "runs.db"
    log_path = tmp_path / "runs" / "three.jsonl"
    machines = {"appr": with_approval(), "plain": DEFAULT_SPEC, "cap": COSTCAP}
    scripts = {"appr": APPROVAL_SCRIPT, "plain": (reply("hi"),), "cap": (reply("hello"),)}
    harnesses = []
    with EventLog(log_path, {"command": "test"}) as log:
        for run_id, machine in machines.items():
            harness = Harness(
                params,
                [model(*scripts[run_id])],
                machine=machine,
                checkpointer=db,
                observers=[transition_coverage],
            )
            harnesses.append(harness)

            async def drive(h: Harness = harness, run_id: str = run_id) -> None:
                async for event in h.start("go", run_id=run_id).events():
                    log.write(event)

            asyncio.run(drive())
    for harness in harnesses:
        assert harness.checkpointer is not None
        harness.checkpointer.close()
    return {"db": db, "log": log_path, "runs": log_path.parent, "params": params}
