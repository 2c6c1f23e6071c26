"""Framework overhead per loop iteration.

One iteration = one model turn with one tool call: assemble -> normalize -> call -> stream
-> execute -> check (6 transitions). The provider is a zero-latency FakeProvider and the tool
returns at once, so what is measured is the loop machinery. The same work (build the wire
request, open and drain the stream, run the tool, append the results) runs in:

* a plain while-loop;
* innerloop on its lean table engine (the default), the same with a context budget (so
  every new message is tokenized with tiktoken), and on python-statemachine's ``send``;
* innerloop traced by ``innerloop.observe.Tracing`` into the OpenTelemetry SDK's in-memory
  exporter, when the SDK is installed (``pip install -e '.[otel]'``);
* LangGraph, when installed (``pip install -e '.[bench]'``): a model node and a tool node.

Each run is ``--turns`` iterations on a fresh history (a host's loop, not a 1,000-turn
marathon, so the per-turn request building that every contender shares stays small);
``--runs`` runs are timed together, best of ``--repeat``. Heavy set-up (the tokenizer, the
compiled machine, the compiled LangGraph graph) happens once, as in a host process. Prints
µs per iteration, overhead over the plain loop, and the ratios, all from this one run.

Usage: ``python bench/overhead.py [--turns 10] [--runs 100] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict

import attrs

from innerloop import Harness, HarnessParams, Message, ToolResultBlock, ToolSpec
from innerloop.fsm import DEFAULT_SPEC, compile_spec, request_settings
from innerloop.lowlevel import build_request
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


async def model_turn(p: HarnessParams, provider: FakeProvider, history: list[Message]) -> bool:
    """Shared work of one turn: request, stream, append. True when tools were called."""
    request = build_request(request_settings(p), history, "anthropic", p.model.model)
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
    p, provider, history = params(turns), make_provider(turns), [Message.user("go")]
    n = 0
    while True:
        more = await model_turn(p, provider, history)
        n += 1
        if not more:
            return n
        await tool_turn(history)


def innerloop_runner(
    engine: str, budget: int | None = None, observers: Sequence[Any] = ()
) -> RunFn:
    async def run(turns: int) -> int:
        harness = Harness(
            attrs.evolve(params(turns), context_budget=budget),
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


def traced_runner() -> RunFn | None:
    """The table engine traced by ``innerloop.observe.Tracing`` into the SDK's in-memory
    exporter (a simple span processor: each span is exported as it ends)."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from innerloop.observe import Tracing
    except ImportError:
        return None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(tracer_provider=provider, meter_provider=MeterProvider())
    inner = innerloop_runner("table", observers=[tracing])

    async def run(turns: int) -> int:
        exporter.clear()  # keep memory flat across batches
        return await inner(turns)

    return run


def langgraph_runner() -> RunFn | None:
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    class S(TypedDict):
        history: list[Message]
        done: bool
        turns: int
        params: HarnessParams
        provider: FakeProvider

    async def model(s: S) -> dict[str, Any]:
        more = await model_turn(s["params"], s["provider"], s["history"])
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
            "params": params(turns),
            "provider": make_provider(turns),
        }
        out = await app.ainvoke(state, {"recursion_limit": 4 * turns + 10})
        return int(out["turns"])

    return run


def best_per_iteration(fn: RunFn, turns: int, runs: int, repeat: int) -> float:
    async def batch() -> int:
        return sum([await fn(turns) for _ in range(runs)])

    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        n = asyncio.run(batch())
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description="innerloop per-iteration overhead")
    ap.add_argument("--turns", type=int, default=10, help="iterations per run")
    ap.add_argument("--runs", type=int, default=100, help="runs timed together")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many batches")
    args = ap.parse_args()

    contenders: dict[str, RunFn] = {
        "plain loop": plain_loop,
        "innerloop (table engine)": innerloop_runner("table"),
        "innerloop (+ context budget)": innerloop_runner("table", budget=100_000),
        "innerloop (statemachine send)": innerloop_runner("statemachine"),
    }
    traced = traced_runner()
    if traced is not None:
        contenders["innerloop (traced, in-memory)"] = traced
    lg = langgraph_runner()
    if lg is not None:
        contenders["langgraph"] = lg
    results = {
        name: best_per_iteration(fn, args.turns, args.runs, args.repeat)
        for name, fn in contenders.items()
    }

    plain = results["plain loop"]
    print(
        f"{args.turns} iterations per run (one model turn + one tool call each), "
        f"{args.runs} runs per batch, best of {args.repeat} batches"
    )
    print(f"{'':32s} {'µs/iter':>10s} {'overhead µs':>12s}")
    for name, us in results.items():
        print(f"{name:32s} {us:10.1f} {us - plain:12.1f}")
    ours = results["innerloop (table engine)"]
    print(f"innerloop overhead per iteration: {ours - plain:.1f} µs (target <= 200 µs)")
    if "innerloop (traced, in-memory)" in results:
        cost = results["innerloop (traced, in-memory)"] - ours
        print(f"tracing on (in-memory exporter): +{cost:.1f} µs per iteration (target <= 50 µs)")
    if "langgraph" in results:
        lgv = results["langgraph"]
        print(f"innerloop / langgraph, time per iteration: {ours / lgv:.3f} (target <= 0.25)")
        over = (ours - plain) / max(lgv - plain, 1e-9)
        print(f"innerloop / langgraph, overhead over the plain loop: {over:.3f}")
    else:
        print("langgraph is not installed: pip install -e '.[bench]' to compare")


if __name__ == "__main__":
    main()
