"""Eager + parallel tool dispatch against sequential dispatch after the message completes.

One turn: the model streams three tool calls over about one second (each call's input
completes at 0.25 s, 0.50 s and 0.75 s; the message completes at 1.0 s), and each tool
sleeps one second. Measured from the model request to the moment all three results are
in (the ``tool_executed`` events), for

* eager + parallel: ``eager_tools=True``, ``max_parallel_tools=3``: a tool starts at its
  ``tool_use_complete`` event, while the message still streams;
* sequential: ``eager_tools=False``, ``max_parallel_tools=1``: the tools run one after the
  other once the message is complete.

By default the model is the loopback Anthropic server streaming its SSE frames evenly over
one second, read by the real anthropic SDK through ``AnthropicProvider``; ``--paced`` uses
an in-process paced stream instead (real sleeps, real event loop, real tools; no HTTP).
Expected: about 1.75 s against 4.0 s. Target: ratio at most 0.5.
Usage: ``python bench/dispatch.py [--repeat 3] [--scale 1.0] [--paced]`` (``--scale``
shrinks every duration, e.g. 0.2 for a quick check).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from innerloop import Harness, HarnessParams, Message, ModelResponse, ToolUseBlock, Usage
from innerloop._events import (
    MessageComplete,
    StreamEvent,
    TextDelta,
    ToolExecuted,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop.tools import tool


class _PacedStream:
    """Yields each event at its offset (seconds) from the request."""

    def __init__(self, schedule: list[tuple[float, StreamEvent]], start: float) -> None:
        self.schedule, self.start = schedule, start

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        for offset, event in self.schedule:
            await asyncio.sleep(max(0.0, self.start + offset - time.monotonic()))
            yield event

    async def aclose(self) -> None:
        return None


class PacedModel:
    """First request: three tool calls streamed over ``scale`` seconds; then 'done'."""

    name = "scripted"
    dialect = "anthropic"

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.requests: list[float] = []

    async def open(self, request: Any) -> _PacedStream:
        now = time.monotonic()
        self.requests.append(now)
        if len(self.requests) > 1:
            final = ModelResponse(Message.assistant("done"), "end_turn", Usage(10, 1), "m")
            return _PacedStream([(0.0, TextDelta(0, "done")), (0.0, MessageComplete(final))], now)
        schedule: list[tuple[float, StreamEvent]] = []
        calls = []
        for i in range(3):
            call = ToolUseBlock(f"toolu_{i}", "nap", {"tag": f"call {i}"})
            calls.append(call)
            begin, done = (0.25 * i + 0.05) * self.scale, 0.25 * (i + 1) * self.scale
            schedule += [
                (begin, ToolUseStart(i, call.id, call.name)),
                (begin, ToolInputDelta(i, call.id, json.dumps(call.input))),
                (done, ToolUseComplete(i, call)),
            ]
        message = Message("assistant", tuple(calls))
        response = ModelResponse(message, "tool_use", Usage(10, 60), "m")
        schedule.append((1.0 * self.scale, MessageComplete(response)))
        return _PacedStream(schedule, now)

    async def aclose(self) -> None:
        return None


def _nap_tool(seconds: float) -> Any:
    @tool(timeout=10 * seconds + 1)
    async def nap(tag: str) -> str:
        """Sleep, then return the tag."""
        await asyncio.sleep(seconds)
        return tag

    return nap


async def measure(eager: bool, scale: float) -> float:
    """Seconds from the model request to all three tool results."""
    params = HarnessParams(
        model="scripted:m",
        tools=[_nap_tool(1.0 * scale)],
        eager_tools=eager,
        max_parallel_tools=3 if eager else 1,
    )
    model = PacedModel(scale)
    done_at = None
    async for event in Harness(params, [model]).start("go").events():
        if isinstance(event, ToolExecuted) and done_at is None:
            done_at = time.monotonic()  # the results arrive together, after the last call
    assert done_at is not None
    return done_at - model.requests[0]


async def measure_loopback(eager: bool, scale: float) -> float:
    """The same turn over HTTP: the server spreads the message's frames over ``scale`` s."""
    from innerloop.providers import AnthropicProvider
    from innerloop.testing import AnthropicServer, SlowReply, reply, tool_call

    calls = [tool_call("nap", {"tag": f"call {i}"}, id=f"toolu_{i}") for i in range(3)]
    turn = reply(*calls, usage=Usage(10, 60))
    server = AnthropicServer([])
    frames = len(server.frames(turn, "m"))
    server.push(SlowReply(turn, tokens_per_second=frames / scale), reply("done"))
    params = HarnessParams(
        model="anthropic:m-20250101",
        tools=[_nap_tool(1.0 * scale)],
        eager_tools=eager,
        max_parallel_tools=3 if eager else 1,
    )
    async with server:
        provider = AnthropicProvider(api_key="bench-key", base_url=server.base_url)
        start = done_at = None
        async for event in Harness(params, [provider]).start("go").events():
            if event.type == "transition" and event.target == "call" and start is None:
                start = time.monotonic()
            if isinstance(event, ToolExecuted) and done_at is None:
                done_at = time.monotonic()
        await provider.aclose()
    assert start is not None
    assert done_at is not None
    return done_at - start


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--paced", action="store_true", help="in-process stream instead of HTTP")
    args = ap.parse_args()
    fn = measure if args.paced else measure_loopback
    eager = min(asyncio.run(fn(True, args.scale)) for _ in range(args.repeat))
    sequential = min(asyncio.run(fn(False, args.scale)) for _ in range(args.repeat))
    model = "in-process paced stream" if args.paced else "loopback Anthropic server, real SDK"
    print(f"model: {model}")
    print(f"3 tool calls streamed over {args.scale:g} s, each tool sleeping {args.scale:g} s;")
    print(f"request -> all results, best of {args.repeat}:")
    print(f"  eager + parallel           {eager:7.3f} s")
    print(f"  sequential after message   {sequential:7.3f} s")
    print(f"ratio eager/sequential: {eager / sequential:.3f} (target <= 0.5)")


if __name__ == "__main__":
    main()
