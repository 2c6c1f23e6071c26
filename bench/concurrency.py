"""Many concurrent loops in one process: throughput, memory per idle loop, event-loop stalls.

Each loop streams its model turns at a realistic rate (a 16-character delta, about four
tokens, every 80 ms: about 50 tokens/s, 100 tokens a turn) from an in-process provider and
makes ``--tool-turns`` tool calls. The run has two phases:

1. every loop streams its first turn and parks in its first tool call (waiting on a shared
   gate): the resident memory added divided by the number of loops is the memory of an
   idle loop;
2. the gate opens and every loop runs to the end: loops per second over the whole run.

A ticker task wakes every 5 ms throughout; its worst lateness is the longest stall of the
event loop. Targets: no stall over 50 ms, under 1 MB per idle loop.

With a thousand live loops the heap holds a few million objects and CPython's automatic
full (generation 2) collections become the longest stalls (hundreds of ms); the loops
themselves never block. ``--gc young-only`` (``gc.set_threshold(700, 3, 10**9)``) keeps the young
collections, small and frequent, which free the short-lived cycles of tasks and
exceptions, and turns off the automatic full ones, which a long-running host can run at a
quiet moment instead.

    python bench/concurrency.py --loops 1000 --gc young-only

    python bench/concurrency.py --loops 1000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import resource
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from innerloop import Harness, HarnessParams, ToolSpec
from innerloop._events import StreamEvent
from innerloop.providers._normalize import WireRequest
from innerloop.testing import FakeProvider, Reply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PacedStream:
    """Yields the inner stream's events with a pause before each, like a network stream."""

    def __init__(self, inner: Any, interval: float) -> None:
        self._inner = inner
        self._interval = interval

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        async for event in self._inner:
            await asyncio.sleep(self._interval)
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()


class PacedProvider:
    """A provider streaming the replies of ``handler`` at one event per ``interval``."""

    def __init__(self, inner: FakeProvider, interval: float) -> None:
        self._inner = inner
        self._interval = interval
        self.name = inner.name
        self.dialect = inner.dialect

    async def open(self, request: WireRequest) -> PacedStream:
        return PacedStream(await self._inner.open(request), self._interval)

    async def aclose(self) -> None:
        return None


def _turn(request: WireRequest) -> int:
    return sum(
        1
        for m in request.payload["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )


def build(args: argparse.Namespace, gates: list[asyncio.Event], parked: list[int]) -> Harness:
    words = ("lorem ipsum dolor sit amet " * (args.text_chars // 27 + 1))[: args.text_chars]

    def model(request: WireRequest) -> Reply:
        turn = _turn(request)
        if turn < args.tool_turns:
            return reply(words, tool_call("work", {"n": turn}, id=f"call_{turn}"))
        return reply(words)

    async def work(arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        if arguments["n"] == 0:
            gate = asyncio.Event()
            gates.append(gate)
            parked[0] += 1
            await gate.wait()
        # tools take different times, so loops do not move in lockstep
        await asyncio.sleep(args.tool_seconds * random.uniform(0.5, 1.5))
        return ToolOutput(f"done {arguments['n']}")

    tool = ToolSpec(
        "work",
        "Do unit n.",
        {"type": "object", "properties": {"n": {"type": "integer"}}},
        work,
    )
    params = HarnessParams(
        model="scripted:bench-20250101", system="bench", tools=[tool], max_turns=50
    )
    fake = FakeProvider(model, chunk_size=args.chunk_size)
    return Harness(params, [PacedProvider(fake, args.chunk_interval)])


async def ticker(stop: asyncio.Event, worst: list[float], period: float = 0.005) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(period)
        worst[0] = max(worst[0], loop.time() - before - period)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    gates: list[asyncio.Event] = []
    parked = [0]
    random.seed(args.seed)
    harness = build(args, gates, parked)
    gc.collect()
    base_rss = rss_bytes()
    stop = asyncio.Event()
    worst = [0.0]
    tick = asyncio.create_task(ticker(stop, worst))
    start = time.perf_counter()
    runs = []
    for _ in range(args.loops):  # a host starts loops one by one, yielding in between
        runs.append(asyncio.create_task(harness.start("go").run()))
        await asyncio.sleep(0)
    while parked[0] < args.loops:
        await asyncio.sleep(0.05)
    parked_at = time.perf_counter() - start
    idle_rss = rss_bytes()
    stall_to_parked = worst[0]
    for g in gates:  # the parked loops resume one by one, as independent events would
        g.set()
        await asyncio.sleep(0)
    states = await asyncio.gather(*runs)
    wall = time.perf_counter() - start
    stop.set()
    await tick
    reasons = {s.exit_reason for s in states}
    events_per_loop = args.tool_turns + 1
    return {
        "loops": args.loops,
        "gc": args.gc,
        "exit_reasons": sorted(r or "" for r in reasons),
        "wall_s": round(wall, 2),
        "loops_per_s": round(args.loops / wall, 1),
        "model_turns_per_loop": events_per_loop,
        "seconds_to_park_all": round(parked_at, 2),
        "idle_rss_per_loop_kb": round((idle_rss - base_rss) / args.loops / 1024, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "longest_stall_ms": round(worst[0] * 1000, 1),
        "longest_stall_until_parked_ms": round(stall_to_parked * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", type=int, default=1000)
    parser.add_argument("--tool-turns", type=int, default=3)
    parser.add_argument("--chunk-interval", type=float, default=0.08, help="seconds per event")
    parser.add_argument("--chunk-size", type=int, default=16, help="characters per text event")
    parser.add_argument("--text-chars", type=int, default=400, help="text per model turn")
    parser.add_argument("--tool-seconds", type=float, default=0.5, help="mean per tool call")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--gc",
        choices=("default", "young-only"),
        default="default",
        help="young-only: no automatic full collections (young ones still free cycles)",
    )
    args = parser.parse_args()
    if args.gc == "young-only":
        gc.set_threshold(700, 3, 1_000_000_000)
    result = asyncio.run(bench(args))
    print(json.dumps(result, indent=2))
    ok = result["longest_stall_ms"] <= 50 and result["idle_rss_per_loop_kb"] < 1024
    print("targets (stall <= 50 ms, < 1 MB per idle loop):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
