"""A run whose tools come from ``tool_sources`` or a ``prepare_tools`` hook can be logged:
its log names them and the tools offered on each call, and a replay says what must be
given again (and replays the same once they are)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from innerloop import EventLog, Harness, HarnessParams, HarnessState, ToolSpec, read_event_log
from innerloop.testing import ReplayError, ScriptedProvider, replay, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput


async def _clock(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("12:00")


CLOCK = ToolSpec("clock", "The time.", {"type": "object"}, _clock)
DATE = ToolSpec("date", "The date.", {"type": "object"}, _clock)


class Source:
    """A tool source (as an MCPServer is): its tools are read before each turn."""

    name = "timekeeper"

    async def tools(self) -> tuple[ToolSpec, ...]:
        return (CLOCK, DATE)


def first_then_none(state: HarnessState[Any], tools: tuple[ToolSpec, ...]) -> Sequence[str]:
    """clock on the first turn, nothing after."""
    return ["clock"] if state.turns == 0 else []


PARAMS = HarnessParams(model="scripted:m", tool_sources=[Source()], prepare_tools=first_then_none)


def record(path: Path) -> Path:
    script = [reply(tool_call("clock", {}, id="c1")), reply("It is noon.")]
    run = Harness(PARAMS, [ScriptedProvider(script)]).start("What time is it?")
    with EventLog(path, {"command": "test"}) as log:
        for event in run.iter_sync():
            log.write(event)
    return path


def test_the_log_names_the_sources_and_the_tools_of_each_call(tmp_path: Path) -> None:
    """run_started names the source (name and class) and the hook (its import path);
    each model_call lists the tools it offered."""
    lines = read_event_log(record(tmp_path / "run.jsonl"))
    started = next(line for line in lines if line["type"] == "run_started")
    assert started["params"]["tool_sources"] == [
        {"name": "timekeeper", "class": f"{__name__}:Source"}
    ]
    assert started["params"]["prepare_tools"] == {
        "name": "first_then_none",
        "function": f"{__name__}:first_then_none",
    }
    calls = [line["tools"] for line in lines if line["type"] == "model_call"]
    assert calls == [["clock"], []]
    assert lines[-1]["exit_reason"] == "model_complete"


def test_a_run_with_fixed_tools_logs_no_tools_per_call(tmp_path: Path) -> None:
    """Without sources or a hook the params' tools are every call's: model_call says
    null, and the params carry no tool_sources or prepare_tools."""
    run = Harness(HarnessParams(model="scripted:m"), [ScriptedProvider([reply("hi")])]).start("x")
    with EventLog(tmp_path / "plain.jsonl") as log:
        for event in run.iter_sync():
            log.write(event)
    lines = read_event_log(tmp_path / "plain.jsonl")
    assert [line["tools"] for line in lines if line["type"] == "model_call"] == [None]
    started = next(line for line in lines if line["type"] == "run_started")
    assert not {"tool_sources", "prepare_tools"} & set(started["params"])


def test_a_replay_says_what_to_give_again(tmp_path: Path) -> None:
    """Replayed from the log alone, the run is refused naming the source and the hook and
    how to pass them; given again, it replays the same."""
    log = record(tmp_path / "run.jsonl")
    with pytest.raises(ReplayError) as caught:
        replay(log)
    assert str(caught.value) == (
        f"cannot replay run 1 of {log}: its tools were chosen each turn by tool_sources "
        f"'timekeeper' ({__name__}:Source) and prepare_tools '{__name__}:first_then_none', "
        "which a log names but cannot carry; give them again: --harness MODULE:ATTR (the "
        "Harness it ran on), or replay(LOG, params=lambda p: attrs.evolve(p, "
        "tool_sources=[...], prepare_tools=...))"
    )
    with pytest.raises(ReplayError, match="by prepare_tools '"):
        replay(log, params=lambda p: attrs.evolve(p, tool_sources=[Source()]))
    again = replay(
        log,
        params=lambda p: attrs.evolve(p, tool_sources=[Source()], prepare_tools=first_then_none),
    )
    assert again.assert_same().state.exit_reason == "model_complete"
    assert replay(log, params=PARAMS).ok
