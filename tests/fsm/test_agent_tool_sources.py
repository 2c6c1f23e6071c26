"""Agent tools offered through ``tool_sources`` forward their child's events in order, as
agent tools given in ``tools`` do: between the call and its ``tool_executed``, before the
next model call, and when the run ends right after the call."""

from __future__ import annotations

from typing import Any

import pytest

from innerloop import Child, Harness, HarnessParams, ToolSpec, agent_tool
from innerloop.events import ChildEvent, Finished, ModelCall, ToolExecuted
from innerloop.testing import ScriptedProvider, reply, tool_call


def helper() -> Child[Any]:
    return Child(
        "helper",
        HarnessParams(model="scripted:kid"),
        providers={"scripted": ScriptedProvider([reply("helper answer")])},
    )


class Agents:
    """A tool source offering one agent tool."""

    name = "agents"

    def __init__(self) -> None:
        self.tool = agent_tool(helper(), "Help.")

    async def tools(self) -> tuple[ToolSpec, ...]:
        return (self.tool,)


def _kinds(events: list[Any]) -> list[str]:
    kinds = []
    for e in events:
        if isinstance(e, ChildEvent):
            kinds.append(f"child {e.event.type}")
        elif isinstance(e, ModelCall | ToolExecuted | Finished):
            kinds.append(e.type)
    return kinds


@pytest.mark.parametrize("given", ["tools", "tool_sources"])
@pytest.mark.parametrize("max_turns", [None, 1])
def test_the_childs_events_come_in_order(given: str, max_turns: int | None) -> None:
    """The child's run, run_started to finished, comes between the parent's model call
    and its tool_executed, whether the agent tool is given in tools or by a source, and
    whether the parent goes on (a second model call) or ends right after the call (its
    turn limit)."""
    source = Agents()
    where: dict[str, Any] = (
        {"tools": [source.tool]} if given == "tools" else {"tool_sources": [source]}
    )
    limits: dict[str, Any] = {} if max_turns is None else {"max_turns": max_turns}
    params = HarnessParams(model="scripted:m", **where, **limits)
    script = [reply(tool_call("helper", {"task": "help"}, id="t1")), reply("done")]
    run = Harness(params, [ScriptedProvider(script)]).start("go")
    events = list(run.iter_sync())
    kinds = _kinds(events)
    child = [k for k in kinds if k.startswith("child ")]
    assert child[0] == "child run_started"
    assert child[-1] == "child finished"
    first_child, last_child = kinds.index("child run_started"), kinds.index("child finished")
    assert kinds[:first_child] == ["model_call"]
    assert kinds[last_child + 1] == "tool_executed"
    after = kinds[last_child + 1 :]
    ending = (
        ["tool_executed", "finished"] if max_turns else ["tool_executed", "model_call", "finished"]
    )
    assert after == ending
    assert run.state.exit_reason == ("max_turns_exceeded" if max_turns else "model_complete")
