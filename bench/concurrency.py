"""Many concurrent loops in one process: throughput, memory per idle loop, event-loop stalls.

Each loop streams its model turns at a realistic rate (a 16-character delta, about four
tokens, every 80 ms: about 50 tokens/s, 400 characters of text a turn; the recorded
Anthropic streams in the test corpus carry 11 characters per text delta at the median, 18
on average) and makes ``--tool-turns`` tool calls (0.25 to 0.75 s each) before a final
answer. The model is the loopback Anthropic server, read through ``AnthropicProvider``:
one provider shared by every loop, as a host would. ``--transport`` picks its route:

- ``sdk`` (the default): the anthropic SDK's request builder and its connection pool;
- ``asyncio``: the SDK's request builder on innerloop's ``AsyncioTransport``;
- ``wire``: ``AnthropicProvider(transport=AsyncioTransport())``, which writes each request
  itself on the transport with the SDK client's headers and credentials.

``--provider fake`` streams the same turns from an in-process provider instead (no HTTP),
for comparison.

The server runs in a child process (this script with ``--serve``), so its side of a
thousand streams does not count against the loops; on a 2-core machine it takes most of
the other core. It answers by the request, not by arrival order: a request with fewer
than ``--tool-turns`` tool results gets text and a tool call, otherwise text only. It keeps
connections alive, as the real API does.

Loops arrive at ``--arrival-rate`` per second (500: all 1,000 within 2 s), stream their
first turn and park in their first tool call (a shared gate): the resident memory added
divided by the number of loops is the memory of an idle loop. The parked loops then resume
at the same rate and run to the end, so for most of the run all 1,000 stream at once
(12,500 network reads a second). A ticker task wakes every 5 ms throughout; its lateness is
the stall of the event loop: the longest, the 99th percentile, the count over 50 ms, the
worst of each second, and, for the stalls over 50 ms, how much of the time the process was
off the CPU (near 0 means the loop's own work, not the machine, made the stall). Targets:
no stall over 50 ms, under 1 MB per idle loop.

Event loop: ``--loop uvloop`` (in the bench extra) runs the measured process on uvloop.
Its C event loop does the selector, the socket reads and the callbacks, most of the cost
of a streamed read: 10 to 15% less CPU here, and the longest stalls about halve.

Garbage collection: the loops make no reference cycles in steady state (a full collection
after the run finds ``cyclic_garbage_at_end`` objects), so ``--gc off`` (``gc.disable()``,
as a host running thousands of loops may do) costs nothing in memory. Young collections
over the thousands of live young objects take 10 to 30 ms here and free nothing: with
``--gc young-only`` (no automatic full collections) they add to the longest stalls, and
with the default thresholds full collections add 300 ms and more.

    python bench/concurrency.py --loops 1000 --transport wire --gc off --loop uvloop

    python bench/concurrency.py --loops 1000 [--transport sdk|asyncio] [--gc young-only]
        [--loop asyncio]
        [--freeze] [--provider fake] [--clients 8] [--arrival-rate 0]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from innerloop import Harness, HarnessParams, ToolSpec
from innerloop._events import StreamEvent
from innerloop.providers._normalize import WireRequest
from innerloop.testing import FakeProvider, Reply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
CLAUDE = "anthropic:claude-sonnet-4-5-20250929"
KEY = "sk-ant-bench-0123456789abcdef"
WARMUP = "warm-up"  # the system prompt of the warm-up loop: the server answers it unpaced


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def cpu_seconds(pid: int | None = None) -> float:
    if pid is None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _turn(messages: list[Any]) -> int:
    """The number of tool results so far: which turn of its loop a request is."""
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )


def _words(args: argparse.Namespace) -> str:
    chars: int = args.text_chars
    return ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]


def _reply(args: argparse.Namespace, turn: int) -> Reply:
    if turn < args.tool_turns:
        return reply(_words(args), tool_call("work", {"n": turn}, id=f"toolu_{turn:04d}"))
    return reply(_words(args))


# -- the loopback server (child process) ---------------------------------------------------


def serve(args: argparse.Namespace) -> None:
    """Run the loopback server, print its base URL, serve until stdin closes."""
    from innerloop.testing import AnthropicServer, SlowReply

    tokens_per_second = 1.0 / args.chunk_interval

    class TurnServer(AnthropicServer):
        """Chooses each reply from the request (its turn), whatever the arrival order."""

        rendered: dict[tuple[int, bool, bool, str], Any] = {}

        def _plan(self, path: str, body: Any) -> Any:
            if path != self.path or not isinstance(body, dict):
                return super()._plan(path, body)
            self.played += 1
            turn = _turn(body.get("messages") or [])
            paced = WARMUP not in json.dumps(body.get("system"))
            stream, model = bool(body.get("stream")), str(body.get("model"))
            key = (turn, paced, stream, model)
            if key not in self.rendered:  # every loop's n-th turn is the same reply
                step: Any = _reply(args, turn)
                if paced:
                    step = SlowReply(step, tokens_per_second)
                self.rendered[key] = self._render(step, stream, model)
            return self.rendered[key]

    server = TurnServer(chunk_size=args.chunk_size)
    server.requests = collections.deque(maxlen=8)  # type: ignore[assignment]
    with server:
        print(server.base_url, flush=True)
        sys.stdin.read()  # until the parent closes the pipe (or dies)


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, __file__, "--serve"]
    for flag in ("tool_turns", "chunk_interval", "chunk_size", "text_chars"):
        argv += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    url: str = child.stdout.readline().strip()
    if not url.startswith("http"):
        child.kill()
        child.wait()
        raise RuntimeError(f"the loopback server did not start: {url!r}")
    return child, url


def stop_server(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


# -- the in-process provider (--provider fake) -----------------------------------------------


class PacedStream:
    """Yields the inner stream's events with a pause before each, like a network stream."""

    def __init__(self, inner: Any, interval: float) -> None:
        self._inner = inner
        self._interval = interval

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        async for event in self._inner:
            if self._interval:
                await asyncio.sleep(self._interval)
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()


class PacedProvider:
    """The inner provider's replies at one event per ``interval`` (unpaced for the
    warm-up loop)."""

    def __init__(self, inner: FakeProvider, interval: float) -> None:
        self._inner = inner
        self._interval = interval
        self.name = inner.name
        self.dialect = inner.dialect

    async def open(self, request: WireRequest) -> PacedStream:
        warm = WARMUP in json.dumps(request.payload.get("system"))
        return PacedStream(await self._inner.open(request), 0.0 if warm else self._interval)

    async def aclose(self) -> None:
        return None


# -- the loops ----------------------------------------------------------------------------


def providers(args: argparse.Namespace, url: str | None) -> tuple[list[Any], str]:
    """The providers the loops share (one unless ``--clients``), and the model name."""
    if url is None:
        fake = FakeProvider(
            lambda r: _reply(args, _turn(r.payload["messages"])), chunk_size=args.chunk_size
        )
        return [PacedProvider(fake, args.chunk_interval)], "scripted:bench-20250101"
    import anthropic
    import httpx2  # the anthropic SDK's httpx

    from innerloop.providers import AnthropicProvider, AsyncioTransport

    # a pool for every loop's stream at once (the SDK's default allows 1,000 connections)
    per_client = -(-args.loops // args.clients)
    shared = []
    for _ in range(args.clients):
        if args.transport == "wire":
            transport = AsyncioTransport(max_connections=per_client + 64)
            shared.append(AnthropicProvider(KEY, base_url=url, transport=transport))
            continue
        if args.transport == "asyncio":
            http_client = httpx2.AsyncClient(
                transport=AsyncioTransport(max_connections=per_client + 64)
            )
        else:
            limits = httpx2.Limits(max_connections=per_client + 64, max_keepalive_connections=100)
            http_client = anthropic.DefaultAsyncHttpxClient(limits=limits)
        client = anthropic.AsyncAnthropic(
            api_key=KEY,
            base_url=url,
            max_retries=0,
            timeout=600.0,
            http_client=http_client,
        )
        shared.append(AnthropicProvider(client=client))
    return shared, CLAUDE


def harnesses(
    args: argparse.Namespace, url: str | None, gates: list[asyncio.Event], parked: list[int]
) -> tuple[list[Harness], list[Harness], Any]:
    async def work(arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        if arguments["n"] == 0 and not warming[0]:
            gate = asyncio.Event()
            gates.append(gate)
            parked[0] += 1
            await gate.wait()
        if not warming[0]:  # tools take different times, so loops do not move in lockstep
            await asyncio.sleep(args.tool_seconds * random.uniform(0.5, 1.5))
        return ToolOutput(f"done {arguments['n']}")

    warming = [True]
    tool = ToolSpec(
        "work",
        "Do unit n.",
        {"type": "object", "properties": {"n": {"type": "integer"}}},
        work,
    )
    shared, model = providers(args, url)
    params = HarnessParams(model=model, system="bench", tools=[tool], max_turns=50)
    warm = HarnessParams(model=model, system=WARMUP, tools=[tool], max_turns=50)
    loops = [Harness(params, [p]) for p in shared]
    return loops, [Harness(warm, [p]) for p in shared], (warming, shared)


async def ticker(
    stop: asyncio.Event,
    lateness: list[float],
    moments: list[float],
    waited: list[float],
    period: float = 0.005,
) -> None:
    """Wakes every ``period`` seconds and records how late each wake-up was."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before, cpu_before = loop.time(), time.thread_time()
        await asyncio.sleep(period)
        late = loop.time() - before - period
        lateness.append(late)
        moments.append(loop.time())
        if late > 0.05:  # how much of the interval this thread had a CPU for
            waited.append(loop.time() - before - (time.thread_time() - cpu_before))


async def paced(count: int, rate: float) -> AsyncIterator[int]:
    """0 .. count-1, the i-th at ``i / rate`` seconds from now (0 rate: all at once)."""
    loop = asyncio.get_running_loop()
    begin = loop.time()
    for i in range(count):
        if rate > 0:
            await asyncio.sleep(max(0.0, begin + i / rate - loop.time()))
        else:
            await asyncio.sleep(0)
        yield i


def by_second(lateness: list[float], moments: list[float]) -> list[float]:
    """The worst lateness (ms) in each second of the run: where the stalls were."""
    if not moments:
        return []
    first = moments[0]
    worst = [0.0] * (int(moments[-1] - first) + 1)
    for late, when in zip(lateness, moments, strict=True):
        i = int(when - first)
        worst[i] = max(worst[i], round(late * 1000, 1))
    return worst


class GCTimer:
    """Counts the collections of each generation and times the longest."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]
        self._t = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
            return
        g = info["generation"]
        self.count[g] += 1
        self.longest[g] = max(self.longest[g], time.perf_counter() - self._t)


async def bench(args: argparse.Namespace, url: str | None) -> dict[str, Any]:
    gates: list[asyncio.Event] = []
    parked = [0]
    random.seed(args.seed)
    loops, warm_loops, (warming, shared) = harnesses(args, url, gates, parked)
    for warm in warm_loops:  # one-time imports and caches, each client's first connection
        warm_state = await warm.run("go")
        if warm_state.exit_reason != "model_complete":
            raise RuntimeError(f"warm-up loop ended {warm_state.exit_reason!r}")
    warming[0] = False
    gc.collect()
    if args.freeze:
        gc.freeze()
    timer = GCTimer()
    gc.callbacks.append(timer)
    base_rss = rss_bytes()
    base_cpu = cpu_seconds()
    stop = asyncio.Event()
    lateness: list[float] = []
    moments: list[float] = []
    waited: list[float] = []
    tick = asyncio.create_task(ticker(stop, lateness, moments, waited))
    start = time.perf_counter()
    runs = [  # loops arrive at a steady rate
        asyncio.create_task(loops[i % len(loops)].run("go"))
        async for i in paced(args.loops, args.arrival_rate)
    ]
    while parked[0] < args.loops:
        if any(r.done() for r in runs):
            failed = next(r for r in runs if r.done())
            raise RuntimeError(f"a loop ended before parking: {failed.result().exit_reason!r}")
        await asyncio.sleep(0.05)
    parked_at = time.perf_counter() - start
    idle_rss = rss_bytes()
    stall_to_parked = max(lateness, default=0.0)
    async for i in paced(len(gates), args.arrival_rate):  # and resume at the same rate
        gates[i].set()
    states = await asyncio.gather(*runs)
    wall = time.perf_counter() - start
    stop.set()
    await tick
    gc.callbacks.remove(timer)
    cpu = cpu_seconds() - base_cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    garbage = gc.collect()  # what the cyclic collector would have had to free
    for p in shared:
        await p.aclose()
    reasons = {s.exit_reason for s in states}
    return {
        "provider": "fake (in-process)" if url is None else "anthropic SDK, loopback server",
        "loops": args.loops,
        "sdk_clients": len(shared) if url is not None else 0,
        "transport": args.transport if url is not None else "",
        "event_loop": args.loop,
        "gc": args.gc + (" + freeze" if args.freeze else ""),
        "exit_reasons": sorted(r or "" for r in reasons),
        "wall_s": round(wall, 2),
        "loops_per_s": round(args.loops / wall, 1),
        "model_turns_per_loop": args.tool_turns + 1,
        "seconds_to_park_all": round(parked_at, 2),
        "cpu_s_measured_process": round(cpu, 1),
        "idle_rss_per_loop_kb": round((idle_rss - base_rss) / args.loops / 1024, 1),
        "peak_rss_per_loop_kb": round((peak - base_rss) / args.loops / 1024, 1),
        "base_rss_mb": round(base_rss / 2**20, 1),
        "peak_rss_mb": round(peak / 2**20, 1),
        "arrival_rate_per_s": args.arrival_rate,
        "longest_stall_ms": round(max(lateness, default=0.0) * 1000, 1),
        "p99_stall_ms": round(sorted(lateness)[int(len(lateness) * 0.99)] * 1000, 1),
        "ticks_late_over_50ms": sum(1 for x in lateness if x > 0.05),
        "ticks": len(lateness),
        "worst_stall_ms_by_second": by_second(lateness, moments),
        "off_cpu_ms_in_stalls_over_50ms": [round(w * 1000, 1) for w in waited],
        "longest_stall_until_parked_ms": round(stall_to_parked * 1000, 1),
        "cyclic_garbage_at_end": garbage,
        "gc_collections": timer.count,
        "gc_longest_ms": [round(t * 1000, 1) for t in timer.longest],
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
        "--arrival-rate",
        type=float,
        default=500.0,
        help="loops started per second, and parked loops resumed per second (0: all at once)",
    )
    parser.add_argument(
        "--provider",
        choices=("loopback", "fake"),
        default="loopback",
        help="loopback: real SDK against a loopback server in a child process; "
        "fake: paced in-process provider",
    )
    parser.add_argument(
        "--gc",
        choices=("default", "young-only", "off"),
        default="default",
        help="young-only: no automatic full collections (young ones still free cycles)",
    )
    parser.add_argument(
        "--clients",
        type=int,
        default=1,
        help="loopback: spread the loops over this many SDK clients (default one, shared)",
    )
    parser.add_argument(
        "--transport",
        choices=("sdk", "asyncio", "wire"),
        default="sdk",
        help="loopback: sdk = the SDK's request builder and connection pool; asyncio = the "
        "SDK's request builder on innerloop's AsyncioTransport; wire = requests written by "
        "the provider on AsyncioTransport (AnthropicProvider(transport=AsyncioTransport()))",
    )
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the measured process's event loop (uvloop comes with the bench extra)",
    )
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() after setup")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    if args.gc == "young-only":
        gc.set_threshold(700, 3, 1_000_000_000)
    elif args.gc == "off":
        gc.disable()
    child, url = start_server(args) if args.provider == "loopback" else (None, None)
    try:
        if args.loop == "uvloop":
            import uvloop

            result = uvloop.run(bench(args, url))
        else:
            result = asyncio.run(bench(args, url))
        if child is not None:
            result["cpu_s_server_process"] = round(cpu_seconds(child.pid), 1)
    finally:
        if child is not None:
            stop_server(child)
    print(json.dumps(result, indent=2))
    ok = result["longest_stall_ms"] <= 50 and result["idle_rss_per_loop_kb"] < 1024
    print("targets (stall <= 50 ms, < 1 MB per idle loop):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
