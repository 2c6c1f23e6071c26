"""Replay speed: runs per second replayed from an event log against the same run live.

The run: a task answered in ``--turns`` model turns, each calling a tool but the last,
first recovering from a rate limit (429, ``retry-after: 1``) and a server error (500), so
the replay serves failed calls and the machine's recovery edges as well as answers. Live,
the real anthropic SDK talks HTTP to the loopback Anthropic server
(``innerloop.testing.AnthropicServer``) and the backoff waits go through a fake clock;
the replay reads the run's event log (recorded once, live) and replays it with
``innerloop.testing.areplay``: recorded answers, recorded tool results, every request
fingerprinted and checked, the path, end and history compared.

Usage: ``python bench/replay.py [--runs 30] [--turns 4]``. Prints runs per second of
each and the ratio (replay / live).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from innerloop import EventLog, Harness, HarnessParams, ToolSpec
from innerloop.providers import AnthropicProvider
from innerloop.testing import (
    AnthropicServer,
    FakeClock,
    Fault,
    RateLimit,
    areplay,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput

MODEL = "anthropic:claude-sonnet-4-5-20250929"
TASK = "Look up the first few squares, then sum them."


async def _square(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(str(args["n"] ** 2))


SQUARE = ToolSpec(
    "square",
    "The square of n.",
    {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    _square,
)
PARAMS = HarnessParams(model=MODEL, tools=[SQUARE], system="Use the tools.", max_turns=20)


def script(turns: int) -> list[Any]:
    """One run's server script."""
    steps: list[Any] = [RateLimit(1, "seconds"), Fault.server_error(500)]
    steps += [reply(f"Squaring {n}.", tool_call("square", {"n": n})) for n in range(1, turns)]
    steps.append(reply("The sum of the squares is done."))
    return steps


async def live_run(server: AnthropicServer, log: EventLog | None = None) -> str | None:
    provider = AnthropicProvider(api_key="bench-key", base_url=server.base_url)
    harness = Harness(PARAMS, {"anthropic": provider}, clock=FakeClock())
    try:
        run = harness.start(TASK)
        async for event in run.events():
            if log is not None:
                log.write(event)
        return run.state.exit_reason
    finally:
        await provider.aclose()


async def measure(runs: int, turns: int, log_path: Path) -> tuple[float, float]:
    with AnthropicServer(script(turns) * (runs + 1)) as server:
        with EventLog(log_path, {"command": "bench"}) as log:
            assert await live_run(server, log) == "model_complete"
        start = time.perf_counter()
        for _ in range(runs):
            assert await live_run(server) == "model_complete"
        live = runs / (time.perf_counter() - start)
    (await areplay(log_path)).assert_same()  # warm: the tokenizer, the machine's compile
    start = time.perf_counter()
    for _ in range(runs):
        (await areplay(log_path)).assert_same()
    replayed = runs / (time.perf_counter() - start)
    return live, replayed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.jsonl"
        live, replayed = asyncio.run(measure(args.runs, args.turns, log))
        size = log.stat().st_size
    print(f"run: {args.turns} model turns after a 429 and a 500 ({size} bytes of event log)")
    print(f"live over loopback HTTP: {live:8.1f} runs/s")
    print(f"replay from the log:     {replayed:8.1f} runs/s")
    print(f"ratio (replay / live):   {replayed / live:8.2f}x")


if __name__ == "__main__":
    main()
