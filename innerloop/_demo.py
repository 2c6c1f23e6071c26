"""The offline demo: the real anthropic and openai SDK clients talk HTTP to loopback API
servers that play a built-in scenario, driving the machine through every recovery branch;
then a second, short run that the host aborts mid-stream, so every phase (abort included)
shows on the screen and in the event log; then a third run with typed output
(``output_type``) whose first answer is repaired; then a nested run (see :func:`_nested_run`):
a research agent fans out to two scouts, one of which asks for approval, and hands off to a
writer with typed output.

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
from innerloop._events import ChildEvent, Event, TextDelta
from innerloop._harness import Harness
from innerloop._live import describe
from innerloop._tree import RunTree
from innerloop.examples.research import (
    QUESTIONS,
    SCOUT_MODEL,
    WRITER_MODEL,
    research_machine,
    scout,
    writer,
)
from innerloop.fsm._context import request_settings
from innerloop.fsm._driver import Run
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._state import HarnessState
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.recovery._clock import ScaledClock
from innerloop.testing._scripted import Fault, Reply, reply, tool_call
from innerloop.testing._servers import AnthropicServer, OpenAIServer, RateLimit, SlowReply
from innerloop.tools._process import run_process
from innerloop.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = ["NESTED_SPEC", "demo_scenario", "nested_run", "nested_scenario", "run_demo"]

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
    """Play the scenario over real HTTP, then a second run the host aborts mid-stream, a
    third with typed output and one repair, and a nested run (sub-agents, an approval, a
    handoff); show them, write their event logs and the first run's trace diagram under
    ``out``. Returns the first run's final state."""
    log_path = out / "events.jsonl"
    with EventLog(log_path, {"command": "demo", "model": PRIMARY}) as log:
        harness, state, requests = _tour(log, live)
        aborted = _aborted_run(log, live)
        typed = _typed_run(log, live)
    nested_path = out / "nested.jsonl"
    nested, tree, asked = nested_run(nested_path)
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
    _show_nested(nested, tree, asked)
    print(f"event log: {log_path} (the first three runs); {nested_path} (the nested run)")
    print(f"trace diagram: {svg_path} (the first run)")
    return state


RESEARCH_TASK = "How did European heat-pump sales do in 2024? Write me a brief."
NOTES = "Notes: heat-pump sales in Europe fell 21% in 2024 (IEA); Poland fell most, -40% (EHPA)."
BRIEF = (
    '{"title": "European heat pumps in 2024", '
    '"findings": ["Sales fell 21% in 2024.", "Poland fell most: -40%."], '
    '"sources": ["IEA 2024", "EHPA market report 2025"]}'
)


def _scout_turns() -> dict[str, tuple[Reply, Reply]]:
    """Each scout's two answers, by its question: a tool call, then what it found."""
    search = {"query": "heat pumps Europe 2024 sales"}
    report = {"title": "EHPA market report 2025"}
    return {
        QUESTIONS[0]: (
            reply("Searching the web.", tool_call("web_search", search, id="call_search")),
            reply("Sales fell 21% in 2024 (IEA 2024)."),
        ),
        QUESTIONS[1]: (
            reply("The EHPA report has it.", tool_call("buy_report", report, id="call_buy")),
            reply("Poland fell most: -40% (EHPA market report 2025)."),
        ),
    }


def _text(content: Any) -> str:
    """The text of a Chat Completions message's content (a string or text parts)."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or ())


def nested_scenario() -> tuple[list[Any], Any, list[Any]]:
    """The nested run's loopback answers: the research agent's script (Anthropic), how
    the scouts' server answers each request (OpenAI; the scouts run side by side, so by
    what a request asks, not by its order), and the writer's script (OpenAI)."""
    turns = _scout_turns()

    def scouts(body: Any) -> Reply:
        messages = body["messages"]
        asked = next(_text(m["content"]) for m in messages if m["role"] == "user")
        return turns[asked][1 if messages[-1]["role"] == "tool" else 0]

    return [reply(NOTES)], scouts, [reply(BRIEF)]


def _research_machine(
    scout_providers: Mapping[str, Any] | None = None,
    writer_providers: Mapping[str, Any] | None = None,
) -> Any:
    return research_machine(
        scout(SCOUT_MODEL, scout_providers), writer(WRITER_MODEL, writer_providers)
    ).with_import_path("innerloop._demo:NESTED_SPEC")


NESTED_SPEC = _research_machine()
"""The nested run's machine (its children on the parent's providers): what a reader of
its event log loads to draw or replay it (the run's own children have providers of
their own, the loopback servers'; the structure is the same)."""


def _depth_of(path: str) -> int:
    return path.count("/") + 1


class _TreeView:
    """Plain lines for a nested run: a child's events indented under their path."""

    def __init__(self, parent: str) -> None:
        self.parent = parent

    def handle(self, event: Event) -> None:
        path = self.parent
        if isinstance(event, ChildEvent):
            path, event = event.path, event.event
        line = describe(event)
        if line is not None:
            indent = "    " * _depth_of(path) if path != self.parent else ""
            print(f"{indent}[{path}]{line}" if indent else line)


def nested_run(log_path: Path) -> tuple[HarnessState, RunTree, Any]:
    """The fourth run: a research agent fans out to two scouts (sub-agents with their own
    tools, on the OpenAI SDK); one asks before a paid call, which suspends the whole run;
    the host approves and resumes it; the research agent then hands off to a writer whose
    answer is a typed ``Brief``. Written to its own event log. Returns the final state,
    the tree of runs (both stretches of the run, and its children) and the approval."""
    print(
        f"fourth run: {RESEARCH_TASK!r}: a research agent fans out to two scouts (one asks "
        "the host before a paid call), then hands off to a writer with output_type=Brief"
    )
    research_script, scouts, writer_script = nested_scenario()
    with (
        AnthropicServer(research_script) as lead_srv,
        OpenAIServer(respond=scouts) as scout_srv,
        OpenAIServer(writer_script) as writer_srv,
    ):
        providers = {
            "research": AnthropicProvider(api_key="demo-key", base_url=lead_srv.base_url),
            "scouts": OpenAIProvider(api_key="demo-key", base_url=scout_srv.base_url),
            "writer": OpenAIProvider(api_key="demo-key", base_url=writer_srv.base_url),
        }
        spec = _research_machine({"openai": providers["scouts"]}, {"openai": providers["writer"]})
        params = HarnessParams(
            model=PRIMARY,
            system="You lead the research: read the scouts' findings, write short notes.",
            max_output_tokens=1024,
        )
        harness = Harness(params, [providers["research"]], machine=spec)
        view = _TreeView("research")
        asked: Any = None

        async def play() -> Run:
            nonlocal asked
            try:
                with EventLog(log_path, {"command": "demo", "model": PRIMARY}) as log:
                    run = harness.start(RESEARCH_TASK)
                    await drive(run, view, log)
                    asked = run.state.interrupt
                    if asked is not None:
                        calls = ", ".join(
                            f"{c['name']}({c['input']})" for c in asked.payload["calls"]
                        )
                        print(
                            f"{asked.kind} asked by {asked.path}: {calls}; the whole run is "
                            f"{run.state.exit_reason}; the host answers True "
                            "(harness.resume(run, answer=True))"
                        )
                        run = harness.resume(run, answer=True)
                        await drive(run, view, log)
                    return run
            finally:
                for provider in providers.values():
                    await provider.aclose()

        run = asyncio.run(play())
        return run.state, RunTree.of(run), asked


def _show_nested(state: HarnessState, tree: RunTree, asked: Any) -> None:
    """The nested run's summary: the tree of runs (``RunTree.format``), the approval,
    the typed result and the totals rolled up to the research agent."""
    print(f"fourth run: exit_reason={state.exit_reason} output={state.output!r}")
    print(
        "  the tree of runs (RunTree.of(run).format(); 'resumed:' where a run went on after "
        "the answer; the research agent's totals count its children's):"
    )
    for line in tree.format(name="research").splitlines():
        print(f"  {line}")
    if asked is not None:
        print(
            f"  {asked.kind} asked by {asked.path} (the research agent waited in "
            f"{asked.state!r}), answered True"
        )
    print(
        f"  rolled up to the research agent: {state.usage.total_tokens} tokens, "
        f"cost={format_cost(state.cost_usd)}"
    )
