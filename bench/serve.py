"""What serving a harness adds to a run: per protocol, the median time of one run through
``innerloop serve`` (loopback HTTP, the server in a child process) minus the median time of
the same run called in process (``await harness.run(...)``).

The model is in-process and scripted (``FakeProvider``: one short answer, no tool call),
so the figures are the server's and the protocol's own cost: HTTP, JSON, the conversation
check, the event pump, the protocol's encoding. Clients are plain ``httpx`` (the OpenAI
and AG-UI routes) and the official ``mcp`` client over one session (MCP); each run is a
new stateless request (no conversation), one at a time. Target: at most 1 ms median.

    python bench/serve.py [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from innerloop import Harness, HarnessParams
from innerloop.testing import FakeProvider, reply

ROOT = Path(__file__).resolve().parents[1]
ASK = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


def harness() -> Harness[Any]:
    """The served harness: every request answered ``Hello.`` at once."""
    return Harness(
        HarnessParams(model="scripted:m"), [FakeProvider(lambda request: reply("Hello."))]
    )


async def median_ms(runs: int, once: Callable[[], Awaitable[object]]) -> float:
    for _ in range(min(20, runs)):  # warm up
        await once()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await once()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def over(client: httpx.AsyncClient, runs: int, where: str) -> dict[str, float]:
    """The OpenAI and AG-UI routes' medians through ``client``."""

    async def openai_whole() -> None:
        (await client.post("/v1/chat/completions", json=ASK)).raise_for_status()

    async def openai_stream() -> None:
        body = ASK | {"stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            async for _ in r.aiter_bytes():
                pass

    async def ag_ui() -> None:
        body = {
            "threadId": f"t{time.perf_counter_ns()}",
            "runId": "r",
            "messages": [{"id": "m", "role": "user", "content": "Hi"}],
        }
        async with client.stream("POST", "/ag-ui", json=body) as r:
            async for _ in r.aiter_bytes():
                pass

    return {
        f"openai {where}": await median_ms(runs, openai_whole),
        f"openai stream {where}": await median_ms(runs, openai_stream),
        f"ag-ui {where}": await median_ms(runs, ag_ui),
    }


async def measure(base: str, runs: int) -> dict[str, float]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from innerloop.serve import app

    h = harness()
    figures = {"in process": await median_ms(runs, lambda: h.run("Hi"))}
    asgi = httpx.ASGITransport(app=app(harness()))  # the app's own cost: no socket
    async with httpx.AsyncClient(base_url="http://127.0.0.1", transport=asgi) as client:
        figures |= await over(client, runs, "(ASGI)")
    # the client's writes unbatched (the headers and the body of a request are two writes:
    # with Nagle's algorithm on, the body waits for the server's delayed ACK)
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    transport = httpx.AsyncHTTPTransport(socket_options=nodelay)
    async with httpx.AsyncClient(base_url=base, transport=transport) as client:
        figures |= await over(client, runs, "(HTTP)")
    async with (
        streamable_http_client(f"{base}/mcp") as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        figures["mcp (HTTP)"] = await median_ms(
            runs, lambda: session.call_tool("innerloop", {"prompt": "Hi"})
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    command = [sys.executable, "-m", "innerloop", "serve", "bench.serve:harness", "--port", "0"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            base = line.split()[2].removesuffix("/v1")
            figures = asyncio.run(measure(base, args.runs))
        finally:
            server.terminate()
            server.wait(timeout=30)
    direct = figures.pop("in process")
    print(f"{'in process':>22}  {direct:7.3f} ms median per run")
    for name, ms in figures.items():
        print(f"{name:>22}  {ms:7.3f} ms median per run, added {ms - direct:+7.3f} ms")


if __name__ == "__main__":
    main()
