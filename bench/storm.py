"""A 429 storm: many concurrent loops against a loopback API that answers 429 for a while.

Every loop shares one ``AnthropicProvider`` (the wire route, innerloop's
``AsyncioTransport``) on the loopback Anthropic server, which answers every request with a
429 (no Retry-After unless ``--retry-after``) for ``--storm`` seconds, then one short
answer per request. ``--gate on`` (the default) runs the loops through one
``RateLimitGates``; ``--gate off`` gives the gates a threshold no storm reaches (each loop
pays its own retries, as before the gate). Reported:

- ``storm_requests``: requests the server answered with a 429, and ``per_loop``;
- ``requests_after_first_wave``: of those, the ones beyond each loop's first call (the
  retries and the half-open probes);
- ``first_success_after_storm`` and ``all_done_after_storm``: seconds from the end of the
  storm to the first answered call and to the last loop's end (the time to recover);
- ``completed``/``failed``: how the loops ended.

``--factor`` scales every wait and the storm (0.1: a 10 s storm in 1 s of real time, on a
``ScaledClock``); the figures are in the clock's seconds.

    python bench/storm.py --loops 1000 --storm 10
    python bench/storm.py --loops 1000 --storm 10 --gate off
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from innerloop import Harness, HarnessParams
from innerloop.providers import AnthropicProvider, AsyncioTransport
from innerloop.recovery import RateLimitGates, ScaledClock, SystemClock
from innerloop.testing import AnthropicServer, reply

KEY = "sk-ant-storm-0123456789abcdef"
MODEL = "anthropic:claude-sonnet-4-5-20250929"


async def measure(
    loops: int = 1000,
    storm: float = 10.0,
    *,
    gate: bool = True,
    factor: float = 1.0,
    retry_after: float | None = None,
    failures: int = 10,
    cooldown: float = 5.0,
    max_cooldown: float = 60.0,
    at_least: int = 0,
) -> dict[str, Any]:
    """Run ``loops`` loops through a ``storm``-second 429 storm (lasting on until it has
    answered ``at_least`` requests); the figures, timed from the storm's real end."""
    server = AnthropicServer([reply("ok")] * (loops + 17))
    server.start()
    transport = AsyncioTransport(max_connections=loops + 64)
    provider = AnthropicProvider(KEY, base_url=server.base_url, transport=transport)
    clock = ScaledClock(factor) if factor != 1.0 else SystemClock()
    gates = RateLimitGates(
        failures=failures if gate else 10**9, cooldown=cooldown, max_cooldown=max_cooldown
    )
    harness = Harness(
        HarnessParams(model=MODEL, system="storm", max_turns=1),
        [provider],
        clock=clock,
        gates=gates,
    )
    ends: list[float] = []

    async def one() -> str:
        state = await harness.run("hello")
        ends.append(time.monotonic())
        return state.exit_reason or ""

    try:
        await harness.run("warm up")  # the SDK's first request builds its client: not timed
        server.storm(storm * factor, retry_after, at_least=at_least)
        storm_end = time.monotonic() + storm * factor
        reasons = await asyncio.gather(*(one() for _ in range(loops)))
    finally:
        await provider.aclose()
        server.stop()
    storm_end = server.storm_end or storm_end
    stormed = len(server.storm_requests)
    answered = [e for e in ends if e >= storm_end]
    g = gates.gate(provider, MODEL.split(":", 1)[1])
    return {
        "loops": loops,
        "storm_seconds": storm,
        "gate": gate,
        "storm_requests": stormed,
        "per_loop": round(stormed / loops, 3),
        "requests_after_first_wave": max(stormed - loops, 0),
        "circuit_opened": g.opened,
        "probes": g.probes,
        "first_success_after_storm": round((min(answered) - storm_end) / factor, 3)
        if answered
        else None,
        "all_done_after_storm": round((max(ends) - storm_end) / factor, 3) if ends else None,
        "completed": reasons.count("model_complete"),
        "failed": loops - reasons.count("model_complete"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--loops", type=int, default=1000)
    parser.add_argument("--storm", type=float, default=10.0, help="seconds of 429s")
    parser.add_argument("--gate", choices=["on", "off"], default="on")
    parser.add_argument("--factor", type=float, default=1.0, help="time scale (0.1: 10x faster)")
    parser.add_argument("--retry-after", type=float, default=None)
    parser.add_argument("--failures", type=int, default=10, help="failures that open the circuit")
    parser.add_argument("--cooldown", type=float, default=5.0)
    parser.add_argument("--max-cooldown", type=float, default=60.0)
    args = parser.parse_args()
    figures = asyncio.run(
        measure(
            args.loops,
            args.storm,
            gate=args.gate == "on",
            factor=args.factor,
            retry_after=args.retry_after,
            failures=args.failures,
            cooldown=args.cooldown,
            max_cooldown=args.max_cooldown,
        )
    )
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
