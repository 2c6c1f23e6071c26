"""The offline demo: a built-in scenario that drives the real machine through its
recovery branches on a scripted provider. No network, no API key."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from innerloop._harness import Harness
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._state import HarnessState
from innerloop.recovery._clock import ScaledClock
from innerloop.testing._scripted import Fault, ScriptedProvider, reply, tool_call
from innerloop.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = ["demo_harness", "run_demo"]

CLOCK_FACTOR = 0.001


async def _add(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(str(args["a"] + args["b"]))


async def _flaky(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("weather service unavailable", is_error=True)


async def _slow(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    await asyncio.sleep(10)
    return ToolOutput("never")


NUMBERS = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

TOOLS = (
    ToolSpec("add", "Add two numbers.", NUMBERS, _add, "code"),
    ToolSpec("weather", "Current weather for a city.", CITY, _flaky, "network"),
    ToolSpec("slow_lookup", "A lookup that takes too long.", CITY, _slow, "network", 0.2),
)


def demo_script() -> list[Any]:
    return [
        Fault.rate_limited(retry_after=2.0),
        Fault.overloaded(),
        reply(
            "Let me add both pairs at once.",
            tool_call("add", {"a": 2, "b": 3}),
            tool_call("add", {"a": 40, "b": 2}),
        ),
        Fault.server_error(503),
        reply("Now the weather.", tool_call("weather", {"city": "Lisbon"})),
        reply("Trying again.", tool_call("weather", {"city": "Lisbon"})),
        reply("One more time.", tool_call("weather", {"city": "Lisbon"})),
        reply("I will use a lookup instead.", tool_call("slow_lookup", {"city": "Lisbon"})),
        reply(
            "Writing a long report: 2 + 3 = 5 and 40 + 2 = 42, and the weather",
            stop_reason="max_tokens",
            incomplete_tool=("add", '{"a": 1'),
        ),
        reply("... service was unavailable, so no forecast. Done: 5 and 42."),
    ]


def demo_harness(clock_factor: float = CLOCK_FACTOR) -> Harness:
    params = HarnessParams(
        model="scripted:demo-model-20250101",
        system="You are the innerloop demo agent.",
        tools=TOOLS,
        max_turns=12,
        max_output_tokens=1024,
    )
    provider = ScriptedProvider(demo_script(), name="scripted", chunk_size=24)
    return Harness(params, [provider], clock=ScaledClock(clock_factor))


def run_demo(out: Path = Path("runs/demo"), *, live: bool = False) -> HarnessState:
    """Play the demo scenario, showing it live, and write its event log under ``out``."""
    from innerloop._eventlog import EventLog
    from innerloop._live import LiveView, PlainView
    from innerloop.cli import drive

    harness = demo_harness()
    print(
        f"innerloop demo: scripted provider; backoff waits scaled by {CLOCK_FACTOR} "
        f"(a 64 s wait takes {64 * CLOCK_FACTOR:g} s)"
    )
    run = harness.start("Add 2+3 and 40+2, then tell me the weather in Lisbon.")
    log_path = out / "events.jsonl"
    view: Any = LiveView(run.state) if live else PlainView()
    with EventLog(log_path, {"command": "demo"}) as log, view:
        asyncio.run(drive(run, view, log))
    state = run.state
    print(f"exit_reason={state.exit_reason} turns={state.turns} total_wait={state.total_wait}s")
    print(f"event log: {log_path}")
    return state
