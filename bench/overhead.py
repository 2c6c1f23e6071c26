"""Framework overhead per loop iteration.

One iteration = one model turn with one tool call: assemble -> normalize -> call -> stream
-> execute -> check (6 transitions). The provider is a zero-latency FakeProvider; the tool
returns at once. The same work runs in:

* a plain while-loop (build_request, open, consume the stream, run the tool, append);
* innerloop on its lean table engine (the default) and on python-statemachine's ``send``;
* LangGraph (when installed: ``pip install -e '.[bench]'``), a model node and a tool node.

Prints µs per iteration, the overhead over the plain loop, and the ratios, all measured in
this one run. Usage: ``python bench/overhead.py [--turns 200] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from innerloop import Harness, HarnessParams, Message, ToolResultBlock, ToolSpec
from innerloop._events import MessageComplete
from innerloop.fsm import DEFAULT_SPEC, compile_spec
from innerloop.providers import build_request
from innerloop.testing import FakeProvider, Reply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput


async def _echo(args: Mapping[str, Any], ctx: ToolContext | None) -> ToolOutput:
    return ToolOutput("ok")


TOOL = ToolSpec("echo", "Echo.", {"type": "object"}, _echo)


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


async def plain_loop(turns: int) -> int:
    p = params(turns)
    provider = make_provider(turns)
    history = [Message.user("go")]
    n = 0
    while n <= turns:
        request = build_request(p, history, "anthropic", p.model.model)
        stream = await provider.open(request)
        response = None
        async for event in stream:
            if isinstance(event, MessageComplete):
                response = event.response
        assert response is not None
        n += 1
        history.append(response.message)
        calls = response.message.tool_uses
        if not calls:
            break
        results = []
        for c in calls:
            out = await TOOL.handler(c.input, None)  # type: ignore[arg-type]
            results.append(ToolResultBlock(c.id, out.content, out.is_error))
        history.append(Message("user", tuple(results)))
    return n


async def innerloop_run(turns: int, engine: str) -> int:
    harness = Harness(
        params(turns),
        [make_provider(turns)],
        machine=MACHINE,
        engine=engine,  # type: ignore[arg-type]
    )
    state = await harness.run("go")
    assert state.exit_reason == "model_complete", state.exit_reason
    return state.turns


MACHINE = compile_spec(DEFAULT_SPEC)


def langgraph_runner() -> Callable[[int], Any] | None:
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None
    from typing import TypedDict

    class S(TypedDict):
        history: list[Message]
        done: bool
        turns: int

    async def run(turns: int) -> int:
        p = params(turns)
        provider = make_provider(turns)

        async def model(s: S) -> dict[str, Any]:
            history = s["history"]
            request = build_request(p, history, "anthropic", p.model.model)
            stream = await provider.open(request)
            response = None
            async for event in stream:
                if isinstance(event, MessageComplete):
                    response = event.response
            assert response is not None
            history.append(response.message)
            return {"done": not response.message.tool_uses, "turns": s["turns"] + 1}

        async def tools(s: S) -> dict[str, Any]:
            history = s["history"]
            results = []
            for c in history[-1].tool_uses:
                out = await TOOL.handler(c.input, None)  # type: ignore[arg-type]
                results.append(ToolResultBlock(c.id, out.content, out.is_error))
            history.append(Message("user", tuple(results)))
            return {}

        g = StateGraph(S)
        g.add_node("model", model)
        g.add_node("tools", tools)
        g.add_edge(START, "model")
        g.add_conditional_edges("model", lambda s: END if s["done"] else "tools")
        g.add_edge("tools", "model")
        app = g.compile()
        out = await app.ainvoke(
            {"history": [Message.user("go")], "done": False, "turns": 0},
            {"recursion_limit": 4 * turns + 10},
        )
        return int(out["turns"])

    return run


def best_per_iteration(fn: Callable[[int], Any], turns: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        n = asyncio.run(fn(turns))
        elapsed = time.perf_counter() - start
        best = min(best, elapsed / n)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    turns, repeat = args.turns, args.repeat

    results: dict[str, float] = {}
    results["plain loop"] = best_per_iteration(plain_loop, turns, repeat)
    results["innerloop (table engine)"] = best_per_iteration(
        lambda t: innerloop_run(t, "table"), turns, repeat
    )
    results["innerloop (statemachine send)"] = best_per_iteration(
        lambda t: innerloop_run(t, "statemachine"), turns, repeat
    )
    lg = langgraph_runner()
    if lg is not None:
        results["langgraph"] = best_per_iteration(lg, turns, repeat)

    plain = results["plain loop"]
    print(f"{turns} iterations (one model turn + one tool call each), best of {repeat} runs")
    print(f"{'':32s} {'µs/iter':>10s} {'overhead µs':>12s}")
    for name, us in results.items():
        print(f"{name:32s} {us:10.1f} {us - plain:12.1f}")
    ours = results["innerloop (table engine)"]
    print(f"innerloop overhead per iteration: {ours - plain:.1f} µs (target <= 200 µs)")
    if "langgraph" in results:
        lgv = results["langgraph"]
        print(f"innerloop / langgraph time per iteration: {ours / lgv:.3f} (target <= 0.25)")
        print(
            f"innerloop / langgraph overhead over the plain loop: "
            f"{(ours - plain) / max(lgv - plain, 1e-9):.3f}"
        )
    else:
        print("langgraph not installed: pip install -e '.[bench]' to compare")


if __name__ == "__main__":
    main()
