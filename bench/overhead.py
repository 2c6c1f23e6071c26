"""Framework overhead per loop iteration.

One iteration = one model turn with one tool call: assemble -> normalize -> call -> stream
-> execute -> check (6 transitions). The provider is a zero-latency FakeProvider and the tool
returns at once, so what is measured is the loop machinery. The same work (build the wire
request, open and drain the stream, run the tool, append the results) runs in:

* a plain while-loop;
* innerloop on its lean table engine (the default), the same with a context budget (so
  every new message is tokenized with tiktoken), and on python-statemachine's ``send``;
* innerloop with ``innerloop.observe.Tracing`` installed but no OpenTelemetry SDK set up
  (the API's no-op tracer and meter: tracing off in a host that ships with it);
* innerloop traced by ``Tracing`` into the OpenTelemetry SDK's in-memory exporter (a simple
  span processor), when the SDK is installed (``pip install -e '.[otel]'``);
* the SDK floor: the spans, span events and metric records one traced iteration holds (a
  ``chat`` and an ``execute_tool`` span with their attributes, six transition events, three
  histogram records), made straight on the same SDK set-up with nothing else around them;
  what tracing costs per iteration cannot go below it;
* LangGraph, when installed (``pip install -e '.[bench]'``): a model node and a tool node.

Each run is ``--turns`` iterations on a fresh history (a host's loop, not a 1,000-turn
marathon, so the per-turn request building that every contender shares stays small);
``--runs`` runs are timed together, best of ``--repeat`` (the contenders take turns, a batch
of each, then again). Heavy set-up (the tokenizer, the
compiled machine, the compiled LangGraph graph) happens once, as in a host process. Prints
µs per iteration, overhead over the plain loop, and the ratios, all from this one run.

Wall time on a shared machine is noisy; ``--instructions`` counts instead the instructions
each contender executes per iteration under valgrind's callgrind (a batch of ``--runs`` runs
and one of twice as many, the difference divided by the iterations between them, so start-up
and warm-up cancel out), which no other load on the machine changes. ``--only NAME`` runs
one contender (the names as printed).

Usage: ``python bench/overhead.py [--turns 10] [--runs 100] [--repeat 5] [--instructions]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict

import attrs

from innerloop import Harness, HarnessParams, Message, ToolResultBlock, ToolSpec
from innerloop.fsm import DEFAULT_SPEC, compile_spec, request_settings
from innerloop.lowlevel import RequestSettings, build_request
from innerloop.providers import final_response
from innerloop.recovery import TiktokenCounter
from innerloop.testing import FakeProvider, Reply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

RunFn = Callable[[int], Awaitable[int]]


async def _echo(args: Mapping[str, Any], ctx: ToolContext | None) -> ToolOutput:
    return ToolOutput("ok")


TOOL = ToolSpec("echo", "Echo.", {"type": "object"}, _echo)
MACHINE = compile_spec(DEFAULT_SPEC)
COUNTER = TiktokenCounter()  # loaded once per process, as a host does


def make_provider(turns: int) -> FakeProvider:
    count = {"n": 0}

    def handler(request: Any) -> Reply:
        count["n"] += 1
        if count["n"] > turns:
            return reply("done")
        return reply("ok", tool_call("echo", {"i": count["n"]}))

    return FakeProvider(handler, chunk_size=1000)


def params(turns: int) -> HarnessParams:
    return HarnessParams(
        model="scripted:bench-20250101", system="bench", tools=[TOOL], max_turns=turns + 1
    )


async def model_turn(
    settings: RequestSettings, provider: FakeProvider, history: list[Message]
) -> bool:
    """Shared work of one turn: request, stream, append. True when tools were called.
    ``settings`` are made once per run (``request_settings(params)``), as a hand-written
    loop makes its request's fixed part once."""
    request = build_request(settings, history, "anthropic", "bench-20250101")
    response = await final_response(await provider.open(request))
    assert response is not None
    history.append(response.message)
    return bool(response.message.tool_uses)


async def tool_turn(history: list[Message]) -> None:
    results = []
    for c in history[-1].tool_uses:
        out = await TOOL.handler(c.input, None)  # type: ignore[arg-type]
        results.append(ToolResultBlock(c.id, out.content, out.is_error))
    history.append(Message("user", tuple(results)))


async def plain_loop(turns: int) -> int:
    settings, provider = request_settings(params(turns)), make_provider(turns)
    history, n = [Message.user("go")], 0
    while True:
        more = await model_turn(settings, provider, history)
        n += 1
        if not more:
            return n
        await tool_turn(history)


def innerloop_runner(
    engine: str, budget: int | None = None, observers: Sequence[Any] = ()
) -> RunFn:
    async def run(turns: int) -> int:
        harness = Harness(
            params(turns).evolve(context_budget=budget),
            [make_provider(turns)],
            machine=MACHINE,
            engine=engine,  # type: ignore[arg-type]
            token_counter=COUNTER,
            observers=observers,
        )
        state = await harness.run("go")
        assert state.exit_reason == "model_complete", state.exit_reason
        return state.turns

    return run


def untraced_runner() -> RunFn | None:
    """The table engine with ``Tracing()`` on the OpenTelemetry API alone: no SDK set up,
    so its tracer and meter are the API's no-op ones."""
    try:
        from innerloop.observe import Tracing
    except ImportError:
        return None
    return innerloop_runner("table", observers=[Tracing()])


def _sdk() -> tuple[Any, Any, Any] | None:
    """A tracer provider exporting to an in-memory exporter through a simple span
    processor (each span exported as it ends), a meter provider, and the exporter."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, MeterProvider(), exporter


def traced_runner(transitions: str = "events") -> RunFn | None:
    """The table engine traced by ``innerloop.observe.Tracing`` into the SDK's in-memory
    exporter, the transitions recorded as ``transitions`` says."""
    sdk = _sdk()
    if sdk is None:
        return None
    from innerloop.observe import Tracing

    provider, meters, exporter = sdk
    tracing = Tracing(
        tracer_provider=provider,
        meter_provider=meters,
        transitions=transitions,  # type: ignore[arg-type]
    )
    inner = innerloop_runner("table", observers=[tracing])

    async def run(turns: int) -> int:
        exporter.clear()  # keep memory flat across batches
        return await inner(turns)

    return run


_EDGES = (
    ("assemble", "normalize", ""),
    ("normalize", "call", ""),
    ("call", "stream", "call_opened"),
    ("stream", "execute", "has_tool_calls"),
    ("execute", "check", ""),
    ("check", "assemble", ""),
)


def sdk_floor_runner(transitions: str = "events") -> RunFn | None:
    """What a traced run puts into the SDK, made straight on it: per iteration a chat span
    (five attributes at its start, seven with the response), two token-usage records and a
    duration record, an execute_tool span (seven attributes, then outcome and duration), and
    six transition events on the run's span (source, target, guard), or with
    ``transitions="summary"`` one turn event listing the states and guards."""
    sdk = _sdk()
    if sdk is None:
        return None
    from opentelemetry import trace

    provider, meters, exporter = sdk
    tracer = provider.get_tracer("floor")
    meter = meters.get_meter("floor")
    usage, duration = meter.create_histogram("tokens"), meter.create_histogram("duration")
    edges = [
        {
            "innerloop.transition.source": source,
            "innerloop.transition.target": target,
            "innerloop.transition.guard": guard,
        }
        for source, target, guard in _EDGES
    ]
    metric = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "bench-20250101",
        "gen_ai.response.model": "bench-20250101",
    }
    as_input = {**metric, "gen_ai.token.type": "input"}
    as_output = {**metric, "gen_ai.token.type": "output"}

    no_events: tuple[dict[str, str], ...] = ()
    parts = (
        (edges[:2], edges[2:3], edges[3:4], edges[4:])
        if transitions == "events"
        else (no_events,) * 4
    )
    summary = {
        "innerloop.turn.states": (*(e[0] for e in _EDGES), "assemble"),
        "innerloop.turn.guards": tuple(e[2] for e in _EDGES),
    }

    turn_event = ((), (summary,))[transitions == "summary"]

    def note(agent: Any, part: Sequence[dict[str, Any]]) -> None:
        for attributes in part:
            agent.add_event("turn" if attributes is summary else "transition", attributes)

    def turn(agent: Any, parent: Any, n: int, tools: bool) -> None:
        note(agent, parts[0])
        chat = tracer.start_span(
            "chat bench-20250101",
            context=parent,
            kind=trace.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "scripted",
                "gen_ai.request.model": "bench-20250101",
                "gen_ai.request.max_tokens": 4096,
                "innerloop.turn": n,
            },
        )
        note(agent, parts[1])
        chat.set_attributes(
            {
                "gen_ai.response.model": "bench-20250101",
                "gen_ai.response.id": f"msg_{n:04d}",
                "gen_ai.response.finish_reasons": ["tool_use" if tools else "end_turn"],
                "gen_ai.usage.input_tokens": 10,
                "gen_ai.usage.output_tokens": 5,
                "gen_ai.usage.cache_read.input_tokens": 0,
                "gen_ai.usage.cache_creation.input_tokens": 0,
            }
        )
        usage.record(10, as_input)
        usage.record(5, as_output)
        note(agent, parts[2])
        duration.record(0.001, metric)
        chat.end()
        if not tools:
            note(agent, turn_event)  # the answer's turn
            return
        tool = tracer.start_span(
            "execute_tool echo",
            context=parent,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "echo",
                "gen_ai.tool.call.id": f"toolu_{n:04d}",
                "gen_ai.tool.type": "function",
                "gen_ai.tool.description": "Echo.",
                "innerloop.tool.category": "default",
                "innerloop.tool.timeout": 60.0,
            },
        )
        tool.set_attributes({"innerloop.tool.outcome": "ok", "innerloop.tool.duration": 1e-5})
        tool.end()
        note(agent, parts[3])
        note(agent, turn_event)

    async def run(turns: int) -> int:
        exporter.clear()
        agent = tracer.start_span("invoke_agent innerloop")
        parent = trace.set_span_in_context(agent)
        for n in range(1, turns + 2):  # the turns with a tool call, then the answer
            turn(agent, parent, n, n <= turns)
        agent.end()
        return turns + 1

    return run


def innerloop_traced_summary() -> RunFn | None:
    """:func:`traced_runner` with ``Tracing(transitions="summary")``."""
    return traced_runner("summary")


def sdk_floor_summary() -> RunFn | None:
    """:func:`sdk_floor_runner` for ``Tracing(transitions="summary")``."""
    return sdk_floor_runner("summary")


def langgraph_runner() -> RunFn | None:
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    class S(TypedDict):
        history: list[Message]
        done: bool
        turns: int
        settings: RequestSettings
        provider: FakeProvider

    async def model(s: S) -> dict[str, Any]:
        more = await model_turn(s["settings"], s["provider"], s["history"])
        return {"done": not more, "turns": s["turns"] + 1}

    async def tools(s: S) -> dict[str, Any]:
        await tool_turn(s["history"])
        return {}

    g = StateGraph(S)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", lambda s: END if s["done"] else "tools")
    g.add_edge("tools", "model")
    app = g.compile()

    async def run(turns: int) -> int:
        state = {
            "history": [Message.user("go")],
            "done": False,
            "turns": 0,
            "settings": request_settings(params(turns)),
            "provider": make_provider(turns),
        }
        out = await app.ainvoke(state, {"recursion_limit": 4 * turns + 10})
        return int(out["turns"])

    return run


def per_iteration(fn: RunFn, turns: int, runs: int) -> float:
    """µs per iteration of one batch of ``runs`` runs (after a collection, so that the
    garbage of the batch before is not this one's to pay)."""

    async def batch() -> int:
        return sum([await fn(turns) for _ in range(runs)])

    gc.collect()
    start = time.perf_counter()
    n = asyncio.run(batch())
    return (time.perf_counter() - start) / n * 1e6


def best_per_iteration(
    contenders: Mapping[str, RunFn], turns: int, runs: int, repeat: int
) -> dict[str, float]:
    """The best batch of each contender, the contenders taking turns (one batch of each,
    then again), so that a change of the machine's load, or what one contender leaves in
    the heap, falls on all of them alike."""
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeat):
        for name, fn in contenders.items():
            best[name] = min(best[name], per_iteration(fn, turns, runs))
    return best


CONTENDERS: dict[str, Callable[[], RunFn | None]] = {
    "plain loop": lambda: plain_loop,
    "innerloop (table engine)": lambda: innerloop_runner("table"),
    "innerloop (+ context budget)": lambda: innerloop_runner("table", budget=100_000),
    "innerloop (statemachine send)": lambda: innerloop_runner("statemachine"),
    "innerloop (Tracing, no SDK)": untraced_runner,
    "innerloop (traced, in-memory)": traced_runner,
    "SDK floor (in-memory)": sdk_floor_runner,
    "innerloop (traced, summary)": lambda: innerloop_traced_summary(),
    "SDK floor (summary)": lambda: sdk_floor_summary(),
    "langgraph": langgraph_runner,
}
"""Each contender by name, built when asked for (None: its library is not installed)."""

_PARAMS = params(10)
_PROVIDER = make_provider(10)
CONSTRUCTION: dict[str, Callable[[], object]] = {
    "HarnessParams(...)": lambda: params(10),
    "attrs.evolve(params, 1 field)": lambda: attrs.evolve(_PARAMS, context_budget=100_000),
    "params.evolve(1 field)": lambda: _PARAMS.evolve(context_budget=100_000),
    "Harness(...)": lambda: Harness(_PARAMS, [_PROVIDER], machine=MACHINE, token_counter=COUNTER),
}
"""What a host builds once per run, each built once per ``run`` under ``--only NAME``."""

TRACED, UNTRACED, FLOOR = (
    "innerloop (traced, in-memory)",
    "innerloop (Tracing, no SDK)",
    "SDK floor (in-memory)",
)


async def _batch(fn: RunFn, turns: int, runs: int) -> int:
    return sum([await fn(turns) for _ in range(runs)])


def only(name: str, turns: int, runs: int) -> None:
    """Run ``name`` for one warm-up run and then ``runs`` runs; print the iterations."""
    if name in CONSTRUCTION:
        build = CONSTRUCTION[name]
        build()
        _settle()
        for _ in range(runs):
            build()
        print(f"iterations {runs}")
        return
    fn = CONTENDERS[name]()
    if fn is None:
        sys.exit(f"{name} cannot run here: its library is not installed")
    asyncio.run(_batch(fn, turns, 1))
    _settle()
    print(f"iterations {asyncio.run(_batch(fn, turns, runs))}")


def _settle() -> None:
    """After the warm-up: collect, then freeze what is left (the modules, the caches) out
    of the collector's sight, as a long-running host does after start-up. A count is then
    the runs' own work, their garbage collections included, not a full collection of the
    whole heap that falls inside one process's counted runs and outside the other's by
    chance (how many objects the imports made, the length of a path): such a collection
    moved a contender's figure by 30% between two checkouts of the same code."""
    gc.collect()
    gc.freeze()


def _counted(name: str, turns: int, runs: int, script: str = __file__) -> tuple[int, int]:
    """(instructions, iterations) of ``only(name)`` under callgrind (``script --only
    NAME``: this file's, or another bench's that takes the same arguments)."""
    argv = ["--only", name, "--turns", str(turns), "--runs", str(runs)]
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    if shutil.which("setarch") is not None:  # the same addresses, so id()-keyed orders too
        valgrind = ["setarch", platform.machine(), "-R", *valgrind]
    out = subprocess.run(
        [*valgrind, sys.executable, os.path.abspath(script), *argv],
        env={**os.environ, "PYTHONHASHSEED": "0"},  # the same hashes, set orders in each run
        capture_output=True,
        text=True,
        check=True,
    )
    counted = re.search(r"Collected : (\d+)", out.stderr)
    iterations = re.search(r"iterations (\d+)", out.stdout)
    if counted is None or iterations is None:
        raise RuntimeError(f"no count from callgrind for {name}:\n{out.stderr[-2000:]}")
    return int(counted[1]), int(iterations[1])


def instructions_per_iteration(name: str, turns: int, runs: int, script: str = __file__) -> float:
    (i1, n1) = _counted(name, turns, runs, script)
    (i2, n2) = _counted(name, turns, 2 * runs, script)
    return (i2 - i1) / (n2 - n1)


def count_all(
    names: Sequence[str], turns: int, runs: int, script: str = __file__
) -> dict[str, float]:
    """Instructions per iteration of each of ``names``, two callgrind processes at a time
    (the counts do not depend on what else runs)."""
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind's callgrind: apt-get install valgrind")
    with ThreadPoolExecutor(max_workers=2) as pool:
        counted = pool.map(lambda n: instructions_per_iteration(n, turns, runs, script), names)
        return dict(zip(names, counted, strict=True))


def target(number: int, what: str, value: float, limit: float, unit: str = "") -> bool:
    """Print one target of the issue with its figure: met or MISSED."""
    verdict = "met" if value <= limit else "MISSED"
    shown = f"{value:,.3g}{unit}" if value < 100 else f"{value:,.0f}{unit}"
    bound = f"{limit:,.3g}{unit}" if limit < 100 else f"{limit:,.0f}{unit}"
    print(f"target {number}: {what} {shown} (target <= {bound}): {verdict}")
    return value <= limit


SUMMARY, SUMMARY_FLOOR = "innerloop (traced, summary)", "SDK floor (summary)"
PLAIN, OURS, BUDGET = "plain loop", "innerloop (table engine)", "innerloop (+ context budget)"
BUILD_PARAMS, EVOLVE_PARAMS = "HarnessParams(...)", "params.evolve(1 field)"
ATTRS_EVOLVE = "attrs.evolve(params, 1 field)"


def report_instructions(names: list[str], turns: int, runs: int) -> None:
    print(f"instructions per iteration (callgrind; {turns} iterations per run)")
    counts = count_all(names, turns, runs)
    for name, count in counts.items():
        print(f"{name:32s} {count:12,.0f}")
    built = count_all(list(CONSTRUCTION), 1, 5 * runs)
    print("instructions per build (once per run)")
    for name, count in built.items():
        print(f"{name:32s} {count:12,.0f}")
    base = counts.get(OURS)
    if base is not None and UNTRACED in counts:
        print(f"Tracing without an SDK: {counts[UNTRACED] / base - 1:+.2%} of an iteration")
    if base is not None and PLAIN in counts:
        plain = counts[PLAIN]
        target(1, "innerloop's overhead over the plain loop", base - plain, 300_000, " instr")
        target(1, "innerloop / plain loop", base / plain, 1.5, "x")
        if BUDGET in counts:
            target(1, "with a context budget / plain loop", counts[BUDGET] / plain, 1.6, "x")
    target(2, "HarnessParams(...)", built[BUILD_PARAMS], 80_000, " instr")
    # an evolve copies every field into a new frozen instance (31 slot writes, as __init__
    # makes them: about 28k instructions, the floor of any copy) and checks what changed
    evolved = built[EVOLVE_PARAMS]
    target(2, "params.evolve(1 field) / attrs.evolve", evolved / built[ATTRS_EVOLVE], 0.6, "x")
    print(f"params.evolve(1 field) / HarnessParams(...): {evolved / built[BUILD_PARAMS]:.2f}x")
    for traced, floor, mode in ((TRACED, FLOOR, "events"), (SUMMARY, SUMMARY_FLOOR, "summary")):
        if base is not None and traced in counts and floor in counts:
            extra = counts[traced] - base
            print(f"tracing on (transitions={mode!r}): +{extra:,.0f} instructions per iteration")
            target(3, f"tracing on / the SDK floor ({mode})", extra / counts[floor], 1.25, "x")
    report_import(instructions=True)


def _import_env(cache: str) -> dict[str, str]:
    """The environment of a fresh interpreter importing innerloop as an installed package
    does: bytecode written to and read from ``cache`` (a host's install has its ``.pyc``
    files; without them every module is compiled again, as under PYTHONDONTWRITEBYTECODE)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": cache, "PYTHONHASHSEED": "0"}


def import_figures(repeat: int = 5) -> tuple[float, int]:
    """Seconds ``import innerloop`` takes (``-X importtime``'s cumulative figure, best of
    ``repeat`` fresh interpreters, the bytecode cached by a run before them) and the
    modules it loads beyond the interpreter's own."""
    code = (
        "import sys; before = set(sys.modules); import innerloop; "
        "print(len(set(sys.modules) - before))"
    )
    best, modules = float("inf"), 0
    with tempfile.TemporaryDirectory() as cache:
        env = _import_env(cache)
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
        for _ in range(repeat):
            out = subprocess.run(
                [sys.executable, "-X", "importtime", "-c", code],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            line = next(x for x in out.stderr.splitlines() if x.rstrip().endswith("| innerloop"))
            best = min(best, int(line.split("|")[1]) / 1e6)
            modules = int(out.stdout)
    return best, modules


def import_instructions() -> int:
    """Instructions ``import innerloop`` executes beyond a bare interpreter's start-up
    (callgrind, bytecode cached): the import's cost as the load of the machine leaves it."""
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    counts = []
    with tempfile.TemporaryDirectory() as cache:
        env = _import_env(cache)
        subprocess.run([sys.executable, "-c", "import innerloop"], env=env, check=True)
        for code in ("pass", "import innerloop"):
            out = subprocess.run(
                [*valgrind, sys.executable, "-c", code],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            counted = re.search(r"Collected : (\d+)", out.stderr)
            assert counted is not None, out.stderr[-2000:]
            counts.append(int(counted[1]))
    return counts[1] - counts[0]


def report_import(instructions: bool = False) -> None:
    seconds, modules = import_figures()
    target(4, "import innerloop (s, best of 5)", seconds, 0.3, " s")
    target(4, "modules import innerloop loads", modules, 300)
    if instructions:
        print(f"import innerloop: {import_instructions():,} instructions beyond a bare interpreter")


GUARDED = (PLAIN, OURS, BUDGET, TRACED)
"""The contenders the regression guard counts."""
BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline.json")
GUARD_TURNS, GUARD_RUNS, GUARD_LIMIT = 10, 40, 0.05


def guard(write: bool) -> None:
    """Count the guarded contenders and compare each with ``bench/baseline.json``: exit 1
    when one rose more than 5%. ``write``: record these counts as the new baseline."""
    names = [n for n in GUARDED if CONTENDERS[n]() is not None]
    counts = count_all(names, GUARD_TURNS, GUARD_RUNS)
    if write:
        with open(BASELINE, "w") as f:
            json.dump({k: round(v) for k, v in counts.items()}, f, indent=2)
            f.write("\n")
        print(f"baseline written to {BASELINE}")
        return
    with open(BASELINE) as f:
        baseline: dict[str, float] = json.load(f)
    failed = []
    for name, count in counts.items():
        was = baseline.get(name)
        if was is None:
            print(f"{name:32s} {count:12,.0f}  (not in the baseline)")
            continue
        change = count / was - 1
        verdict = "ok" if change <= GUARD_LIMIT else f"ROSE more than {GUARD_LIMIT:.0%}"
        print(f"{name:32s} {count:12,.0f}  baseline {was:12,.0f}  {change:+.1%}  {verdict}")
        if change > GUARD_LIMIT:
            failed.append(name)
    if failed:
        sys.exit(
            f"instructions per iteration rose more than {GUARD_LIMIT:.0%} for "
            f"{', '.join(failed)}: find the cause, or if the rise is meant, rerun with "
            "--write-baseline and give the reason in the commit message"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description="innerloop per-iteration overhead")
    ap.add_argument("--turns", type=int, default=10, help="iterations per run")
    ap.add_argument("--runs", type=int, default=100, help="runs timed together")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many batches")
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per iteration under callgrind instead of timing "
        "(--runs 10 is plenty)",
    )
    ap.add_argument(
        "--only", choices=sorted({*CONTENDERS, *CONSTRUCTION}), help="run this contender alone"
    )
    ap.add_argument(
        "--guard",
        action="store_true",
        help="count the main contenders and fail when one rose more than 5%% over "
        "bench/baseline.json (what .ci/run does)",
    )
    ap.add_argument(
        "--write-baseline",
        action="store_true",
        help="with --guard: record the counts as bench/baseline.json (a deliberate change)",
    )
    args = ap.parse_args()
    if args.guard:
        guard(args.write_baseline)
        return
    if args.only and not args.instructions:
        only(args.only, args.turns, args.runs)
        return
    names = [args.only] if args.only else [n for n in CONTENDERS if n != "langgraph"]
    if args.instructions:
        report_instructions(names, args.turns, args.runs)
        return

    contenders = {name: fn for name, make in CONTENDERS.items() if (fn := make()) is not None}
    results = best_per_iteration(contenders, args.turns, args.runs, args.repeat)

    plain = results["plain loop"]
    print(
        f"{args.turns} iterations per run (one model turn + one tool call each), "
        f"{args.runs} runs per batch, best of {args.repeat} batches"
    )
    print(f"{'':32s} {'µs/iter':>10s} {'overhead µs':>12s}")
    for name, us in results.items():
        print(f"{name:32s} {us:10.1f} {us - plain:12.1f}")
    ours = results[OURS]
    print(f"innerloop overhead per iteration: {ours - plain:.1f} µs")
    print(f"innerloop / plain loop: {ours / plain:.2f}x (target 1 by instructions: --instructions)")
    if UNTRACED in results:
        off = results[UNTRACED] / ours - 1
        print(f"Tracing without an SDK: {off:+.1%} per iteration (target <= 2%)")
    if TRACED in results:
        cost = results[TRACED] - ours
        print(f"tracing on (in-memory exporter): +{cost:.1f} µs per iteration")
    if FLOOR in results:
        print(f"  the SDK's own floor for what it records: {results[FLOOR]:.1f} µs per iteration")
        if TRACED in results:
            ratio = (results[TRACED] - ours) / results[FLOOR]
            print(f"  tracing on / the SDK floor, wall time: {ratio:.2f}x")
    if "langgraph" in results:
        lgv = results["langgraph"]
        print(f"innerloop / langgraph, time per iteration: {ours / lgv:.3f} (target <= 0.25)")
        over = (ours - plain) / max(lgv - plain, 1e-9)
        print(f"innerloop / langgraph, overhead over the plain loop: {over:.3f}")
    else:
        print("langgraph is not installed: pip install -e '.[bench]' to compare")
    report_import()


if __name__ == "__main__":
    main()
