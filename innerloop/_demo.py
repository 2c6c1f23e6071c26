"""The offline demo: the real anthropic and openai SDK clients talk HTTP to loopback API
servers that play a built-in scenario, driving the machine through every recovery branch;
then a second, short run that the host aborts mid-stream, so every phase (abort included)
shows on the screen and in the event log; then a third run with typed output
(``output_type``) whose first answer is repaired.

No network and no API key. Backoff waits go through a :class:`ScaledClock`, so a 16-second
wait takes 0.16 s; the screen says so.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic

from innerloop._console import drive, format_cost, view_for
from innerloop._eventlog import EventLog, read_event_log
from innerloop._events import Event, TextDelta
from innerloop._harness import Harness
from innerloop.fsm._context import request_settings
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._state import HarnessState
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.recovery._clock import ScaledClock
from innerloop.testing._scripted import Fault, reply, tool_call
from innerloop.testing._servers import AnthropicServer, OpenAIServer, RateLimit, SlowReply
from innerloop.tools._process import run_process
from innerloop.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = ["demo_scenario", "run_demo"]

CLOCK_FACTOR = 0.01
PRIMARY = "anthropic:claude-sonnet-4-5-20250929"
FALLBACK = "openai:gpt-4o-mini-2024-07-18"
TASK = "Add 2+3 and 40+2, check the weather in Lisbon, and write me a short report."


async def _add(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(str(args["a"] + args["b"]))


async def _weather(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    raise ConnectionError(f"weather service for {args['city']} is unreachable")


async def _lookup(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    # a real child process that outlives the timeout; run_process kills its group
    await run_process([sys.executable, "-c", "import time; time.sleep(30)"])
    return ToolOutput("never reached")


NUMBERS = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

TOOLS = (
    ToolSpec("add", "Add two numbers.", NUMBERS, _add, "code"),
    ToolSpec("weather", "Current weather for a city.", CITY, _weather, "network"),
    ToolSpec("climate_lookup", "Long-term climate data (slow).", CITY, _lookup, "network", 0.5),
)


def demo_scenario() -> tuple[list[Any], list[Any]]:
    """The Anthropic server's script, then the OpenAI server's."""
    anthropic = [
        RateLimit(2, "seconds"),
        RateLimit(1.5, "ms"),
        RateLimit(3, "date"),
        Fault.overloaded(),
        RateLimit(None),
        RateLimit(None),
    ]
    lisbon = {"city": "Lisbon"}
    openai = [
        reply(
            "Adding both pairs at once.",
            tool_call("add", {"a": 2, "b": 3}),
            tool_call("add", {"a": 40, "b": 2}),
        ),
        Fault.server_error(500),
        reply("Now the weather.", tool_call("weather", lisbon)),
        reply("Trying the weather again.", tool_call("weather", lisbon)),
        reply("One last try.", tool_call("weather", lisbon)),
        reply("I'll use climate data instead.", tool_call("climate_lookup", lisbon)),
        reply(
            "Report: 2 + 3 = 5 and 40 + 2 = 42. The weather service was down, and the "
            "climate lookup timed out, so I cannot",
            stop_reason="max_tokens",
            incomplete_tool=("add", '{"a": 1'),
        ),
        reply("... give a forecast. Summary: 5, 42, no weather data. Done."),
    ]
    return anthropic, openai


def _params() -> HarnessParams:
    return HarnessParams(
        model=PRIMARY,
        fallbacks=[FALLBACK],
        system="You are the innerloop demo agent. Use tools; be brief.",
        tools=TOOLS,
        max_turns=12,
        max_output_tokens=1024,
    )


ABORT_TASK = "Now write me a long essay on state machines."
ABORT_AFTER_DELTAS = 5
ABORT_REASON = f"host abort: mid-stream, after {ABORT_AFTER_DELTAS} text deltas"
ESSAY = reply("State machines make every phase of a loop explicit. " * 40)


class _AbortMidStream:
    """Aborts ``run`` once it has streamed ``after`` text deltas, as a host would."""

    def __init__(self, run: Any, after: int) -> None:
        self.run = run
        self.left = after

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.left -= 1
            if self.left == 0:
                self.run.abort(ABORT_REASON)


async def _play(
    run: Any, providers: Mapping[str, Any], view: Any, log: EventLog, **kw: Any
) -> None:
    try:
        await drive(run, view, log, **kw)
    finally:
        for provider in providers.values():
            await provider.aclose()


def _tour(log: EventLog, live: bool) -> tuple[Harness, HarnessState, tuple[int, int]]:
    """The first run: every recovery branch, to a clean finish."""
    anthropic_script, openai_script = demo_scenario()
    with AnthropicServer(anthropic_script) as a_srv, OpenAIServer(openai_script) as o_srv:
        providers = {
            "anthropic": AnthropicProvider(api_key="demo-key", base_url=a_srv.base_url),
            "openai": OpenAIProvider(api_key="demo-key", base_url=o_srv.base_url),
        }
        harness = Harness(_params(), providers, clock=ScaledClock(CLOCK_FACTOR))
        print(
            f"innerloop demo: anthropic and openai SDKs -> loopback servers at "
            f"{a_srv.base_url} and {o_srv.base_url}"
        )
        print(
            f"backoff waits are scaled by {CLOCK_FACTOR} (a 16 s wait takes "
            f"{16 * CLOCK_FACTOR:g} s); tool timeouts are real"
        )
        run = harness.start(TASK)
        with view_for(run.state, no_live=not live) as view:
            asyncio.run(_play(run, providers, view, log))
        return harness, run.state, (len(a_srv.requests), len(o_srv.requests))


def _aborted_run(log: EventLog, live: bool) -> HarnessState:
    """The second run: the host aborts it mid-stream, so the abort phase shows too."""
    print(f"second run: {ABORT_TASK!r}; the host aborts it after {ABORT_AFTER_DELTAS} text deltas")
    with AnthropicServer([SlowReply(ESSAY, tokens_per_second=50)]) as server:
        providers = {"anthropic": AnthropicProvider(api_key="demo-key", base_url=server.base_url)}
        params = HarnessParams(model=PRIMARY, max_turns=2, max_output_tokens=1024)
        run = Harness(params, providers).start(ABORT_TASK)
        with view_for(run.state, no_live=not live) as view:
            asyncio.run(
                _play(run, providers, view, log, on_event=_AbortMidStream(run, ABORT_AFTER_DELTAS))
            )
        return run.state


class Report(pydantic.BaseModel):
    """The typed answer of the demo's third run."""

    city: str
    sum_a: int
    sum_b: int


REPORT_TASK = "Report 2+3 and 40+2 for Lisbon as JSON."
REPORT_SCRIPT = [
    reply('{"city": "Lisbon", "sum_a": 5}'),  # a field missing: one repair
    reply('{"city": "Lisbon", "sum_a": 5, "sum_b": 42}'),
]


def _typed_run(log: EventLog, live: bool) -> HarnessState:
    """The third run: typed output; the first answer misses a field and is repaired."""
    print(f"third run: {REPORT_TASK!r} with output_type=Report; the first answer is repaired")
    params = HarnessParams(model=PRIMARY, output_type=Report, max_output_tokens=1024)
    schema = request_settings(params).anthropic_output_schema
    with AnthropicServer(REPORT_SCRIPT, output_schema=schema) as server:
        providers = {"anthropic": AnthropicProvider(api_key="demo-key", base_url=server.base_url)}
        run = Harness(params, providers).start(REPORT_TASK)
        with view_for(run.state, no_live=not live) as view:
            asyncio.run(_play(run, providers, view, log))
        return run.state


def _first_run(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ends = [i for i, e in enumerate(events) if e["type"] == "finished"]
    return events[: ends[0] + 1] if ends else events


def run_demo(out: Path = Path("runs/demo"), *, live: bool = False) -> HarnessState:
    """Play the scenario over real HTTP, then a second run the host aborts mid-stream and a
    third with typed output and one repair; show them, write their event log and the first
    run's trace diagram under ``out``. Returns the first run's final state."""
    log_path = out / "events.jsonl"
    with EventLog(log_path, {"command": "demo", "model": PRIMARY}) as log:
        harness, state, requests = _tour(log, live)
        aborted = _aborted_run(log, live)
        typed = _typed_run(log, live)
    svg_path = out / "trace.svg"
    try:
        from innerloop.diagrams import build_diagram, render

        trace = _first_run(read_event_log(log_path))
        svg_path.write_bytes(render(build_diagram(harness.machine, trace=trace), "svg"))
    except Exception as exc:  # the diagram is a bonus; the run's outcome stands
        print(f"trace diagram not written: {exc}")
        svg_path = Path("-")
    print(
        f"exit_reason={state.exit_reason} turns={state.turns} "
        f"http_requests=anthropic:{requests[0]} openai:{requests[1]} "
        f"total_backoff={state.total_wait:g}s (scaled) cost={format_cost(state.cost_usd)}"
    )
    why = aborted.abort.reason if aborted.abort is not None else "no abort"
    print(f"second run: exit_reason={aborted.exit_reason} ({why})")
    print(
        f"third run: exit_reason={typed.exit_reason} output={typed.output!r} "
        f"repairs={typed.output_repairs}"
    )
    print(f"event log: {log_path} (all three runs)")
    print(f"trace diagram: {svg_path} (the first run)")
    return state
