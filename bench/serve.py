"""What serving a harness costs, in two figures.

Added time per run: per protocol, the median time of one run through ``innerloop serve``
(loopback HTTP, the server in a child process) minus the median time of the same run
called in process (``await harness.run(...)``). The model is in-process and scripted
(``FakeProvider``: one short answer, no tool call), so the figures are the server's and
the protocol's own cost: HTTP, JSON, the conversation check, the event pump, the
protocol's encoding. Clients are plain ``httpx`` (the OpenAI and AG-UI routes) and the
official ``mcp`` client over one session (MCP); each run is a new stateless request (no
conversation), one at a time. Target: at most 1 ms median.

Concurrent streams: ``--clients`` (200) streaming clients at once on one served process
(a child running the app under uvicorn, as ``innerloop serve`` does), per protocol
(OpenAI chat completions streamed, AG-UI, the AI SDK's UI message stream). Each client is
its own conversation, and the scripted model answers each with words no other client's
answer holds, a delta every ``--pause`` seconds; each client's stream is checked whole:
every event belongs to its conversation, none is lost, doubled or out of order. A
watchdog task in the server wakes every 5 ms and records how late it woke: the longest
event-loop stall. Targets: no stall over 50 ms, no lost or mixed event.

    python bench/serve.py [--runs 300] [--clients 200] [--pause 0.02] [--ramp 0]
                          [--only latency|streams]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
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


def latency_requests() -> dict[str, tuple[str, Callable[[], dict[str, Any]]]]:
    """Per route measured: its path and a new request body (a new conversation each)."""
    numbers = itertools.count()

    def ag_ui() -> dict[str, Any]:
        message = {"id": "m", "role": "user", "content": "Hi"}
        return {"threadId": f"t{next(numbers)}", "runId": "r", "messages": [message]}

    def ai_sdk() -> dict[str, Any]:
        parts = [{"type": "text", "text": "Hi"}]
        return {
            "id": f"c{next(numbers)}",
            "messages": [{"id": "u", "role": "user", "parts": parts}],
        }

    return {
        "openai": ("/v1/chat/completions", lambda: ASK),
        "openai stream": ("/v1/chat/completions", lambda: ASK | {"stream": True}),
        "ag-ui": ("/ag-ui", ag_ui),
        "ai-sdk": ("/ai-sdk", ai_sdk),
    }


async def timed(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> float:
    """Seconds from sending the request to the answer's last byte."""
    start = time.perf_counter()
    async with client.stream("POST", path, json=body) as response:
        async for _ in response.aiter_raw():
            pass
        response.raise_for_status()
    return time.perf_counter() - start


async def server_cpu(client: httpx.AsyncClient) -> float:
    """The CPU seconds the server process has used so far."""
    return float((await client.post("/bench/cpu")).json()["cpu_s"])


async def paired(
    client: httpx.AsyncClient, runs: int
) -> dict[str, tuple[float, float, float, float]]:
    """Per route: the median ms of a run served, and of the floor: a bare ASGI endpoint
    of the same server answering the same bytes in the same writes (uvicorn, HTTP, the
    socket and this client, without the app). The two alternate, so both see the same
    load of the machine. Then the server's CPU ms per run, served and floor (what the
    load of the machine does not stretch)."""
    figures = {}
    for name, (path, body) in latency_requests().items():
        await timed(client, path, body())  # records the answer the floor repeats
        served, floor = [], []
        for i in range(runs + 20):
            one = await timed(client, path, body())
            bare = await timed(client, f"/bench/floor{path}", body())
            if i >= 20:  # warmed up
                served.append(one)
                floor.append(bare)
        cpu = []
        for where in (path, f"/bench/floor{path}"):
            start = await server_cpu(client)
            for _ in range(runs):
                await timed(client, where, body())
            cpu.append((await server_cpu(client) - start) / runs * 1000)
        medians = statistics.median(served) * 1000, statistics.median(floor) * 1000
        figures[name] = (*medians, *cpu)
    return figures


async def measure(
    base: str, runs: int
) -> tuple[float, float, dict[str, tuple[float, float, float, float]], tuple[float, float]]:
    """In process (ms: the run, and the run with its events read), the routes served and
    their floor (ms), MCP served (ms)."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    h = harness()
    direct = await median_ms(runs, lambda: h.run("Hi"))

    async def read_events() -> None:
        async for _ in h.start("Hi").events():
            pass

    evented = await median_ms(runs, read_events)
    # the client's writes unbatched (the headers and the body of a request are two writes:
    # with Nagle's algorithm on, the body waits for the server's delayed ACK)
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    transport = httpx.AsyncHTTPTransport(socket_options=nodelay)
    async with httpx.AsyncClient(base_url=base, transport=transport) as client:
        routes = await paired(client, runs)
    mcp = []
    # as the SDK makes its client, and the same with the client's writes unbatched
    unbatched = httpx2.AsyncHTTPTransport(socket_options=nodelay)
    for http in (
        None,
        httpx2.AsyncClient(transport=unbatched, timeout=httpx2.Timeout(30, read=300)),
    ):
        async with (
            streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            ask = lambda: session.call_tool("innerloop", {"prompt": "Hi"})  # noqa: E731
            mcp.append(await median_ms(runs, ask))
        if http is not None:
            await http.aclose()
    return direct, evented, routes, (mcp[0], mcp[1])


class Floor:
    """The served app, each route's latest answer recorded; ``/bench/floor/PATH`` answers
    PATH's recorded answer again, in the same writes, without the app (its body read)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.recorded: dict[str, list[dict[str, Any]]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
        elif path.startswith("/bench/floor/"):
            while (await receive()).get("more_body"):
                pass
            for message in self.recorded[path.removeprefix("/bench/floor")]:
                await send(message)
        else:
            messages: list[dict[str, Any]] = []

            async def keep(message: dict[str, Any]) -> None:
                messages.append(message)
                await send(message)

            await self.inner(scope, receive, keep)
            self.recorded[path] = messages


# -- concurrent streams ---------------------------------------------------------------------

WORDS = 30
"""Words in each client's answer (about 25 deltas of 8 characters)."""
PROTOCOLS = ("openai", "ag-ui", "ai-sdk")


def answer_for(client: int) -> str:
    """Client ``client``'s answer: words no other client's answer holds, in order."""
    return " ".join(f"c{client}.{word}" for word in range(WORDS))


class _Paced:
    """A scripted stream giving one event every ``pause`` seconds, as a model streams."""

    def __init__(self, stream: Any, pause: float) -> None:
        self.stream, self.pause = stream, pause

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for event in self.stream:
            await asyncio.sleep(self.pause)
            yield event

    async def aclose(self) -> None:
        await self.stream.aclose()


class PacedModel(FakeProvider):
    """Answers the message ``client N`` with :func:`answer_for` ``(N)``, 8 characters a
    delta, one delta every ``pause`` seconds."""

    def __init__(self, pause: float) -> None:
        super().__init__(self._answer, chunk_size=8, keep_requests=0)
        self.pause = pause

    @staticmethod
    def _answer(request: Any) -> Any:
        content = request.payload["messages"][-1]["content"]
        said = content if isinstance(content, str) else content[-1]["text"]
        return reply(answer_for(int(said.removeprefix("client "))))

    async def open(self, request: Any) -> Any:
        return _Paced(await super().open(request), self.pause)


def paced_harness(pause: float) -> Harness[Any]:
    return Harness(HarnessParams(model="scripted:m"), [PacedModel(pause)])


def _request(protocol: str, client: int, run: str) -> tuple[str, dict[str, Any]]:
    """The path and body of client ``client``'s streamed request (its own conversation)."""
    text = f"client {client}"
    conversation = f"{run}-{client}"
    if protocol == "openai":
        body = {
            "model": "m",
            "stream": True,
            "conversation_id": conversation,
            "messages": [{"role": "user", "content": text}],
        }
        return "/v1/chat/completions", body
    if protocol == "ag-ui":
        message = {"id": "m", "role": "user", "content": text}
        return "/ag-ui", {"threadId": conversation, "runId": "r", "messages": [message]}
    parts = [{"type": "text", "text": text}]
    return "/ai-sdk", {
        "id": conversation,
        "messages": [{"id": "u", "role": "user", "parts": parts}],
    }


def stream_problems(protocol: str, client: int, run: str, data: list[str]) -> list[str]:
    """What is wrong with client ``client``'s stream (its SSE ``data`` fields, in order):
    an event of another conversation, a lost, doubled or misplaced delta, a missing end."""
    conversation, expected = f"{run}-{client}", answer_for(client)
    problems = []
    if not data or (protocol != "ag-ui" and data[-1] != "[DONE]"):
        problems.append("the stream did not end with [DONE]")
    events = [json.loads(d) for d in data if d != "[DONE]"]
    if protocol == "openai":
        ids = {e["id"] for e in events}
        if len(ids) != 1:
            problems.append(f"chunks of {len(ids)} completions")
        others = {e.get("conversation_id") for e in events} - {conversation}
        text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    elif protocol == "ag-ui":
        others = {e["threadId"] for e in events if "threadId" in e} - {conversation}
        text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        if not events or events[-1]["type"] != "RUN_FINISHED":
            problems.append("no RUN_FINISHED at the end")
        elif events[-1]["result"] != expected:
            problems.append(f"RUN_FINISHED's result is {events[-1]['result']!r}")
    else:
        others = set()
        text = "".join(e["delta"] for e in events if e["type"] == "text-delta")
        if not events or events[-1]["type"] != "finish":
            problems.append("no finish at the end")
    if others:
        problems.append(f"events of conversations {sorted(others)}")
    if text != expected:
        problems.append(f"text {text!r}, expected {expected!r}")
    return [f"client {client} ({protocol}): {p}" for p in problems]


async def one_stream(client: httpx.AsyncClient, protocol: str, number: int, run: str) -> list[str]:
    """Client ``number``'s request streamed whole; what is wrong with it."""
    path, body = _request(protocol, number, run)
    async with client.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return [f"client {number} ({protocol}): HTTP {response.status_code} {response.text}"]
        data = [line[6:] async for line in response.aiter_lines() if line.startswith("data: ")]
    return stream_problems(protocol, number, run, data)


async def concurrent_streams(
    client: httpx.AsyncClient, protocol: str, clients: int, run: str, ramp: float = 0.0
) -> list[str]:
    """``clients`` streaming requests on ``protocol``, all at once or their starts spread
    over ``ramp`` seconds: every problem seen."""

    async def one(number: int) -> list[str]:
        await asyncio.sleep(ramp * number / clients)
        return await one_stream(client, protocol, number, run)

    found = await asyncio.gather(*(one(n) for n in range(clients)))
    return [problem for problems in found for problem in problems]


def stream_client(base: str, clients: int) -> httpx.AsyncClient:
    """A client holding ``clients`` connections at once."""
    limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10)
    return httpx.AsyncClient(base_url=base, limits=limits, timeout=120)


async def watchdog(worst: list[float], period: float = 0.005) -> None:
    """Wake every ``period`` s; ``worst``: how late the latest wake-up so far was (an
    event-loop stall: a callback that held the loop, too many ready at once, or the
    process waiting for a core) and the CPU time the process had meanwhile (the stall's
    own part: the rest was the machine's scheduler)."""
    loop = asyncio.get_running_loop()
    while True:
        asked, cpu = loop.time(), time.process_time()
        await asyncio.sleep(period)
        late = loop.time() - asked - period
        if late > worst[0]:
            worst[:] = [late, max(0.0, time.process_time() - cpu - period)]


def serve_watched(pause: float) -> None:
    """The child: the served app under uvicorn (as ``innerloop serve`` runs it; with no
    ``pause``, the harness answering at once), the watchdog (``POST /bench/stall``
    answers the longest stall since the last one) and the floor (:class:`Floor`)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    from innerloop.serve import app
    from innerloop.serve._cli import listen, serve_on

    served = app(paced_harness(pause) if pause else harness())
    worst = [0.0, 0.0]

    async def stall(request: Request) -> JSONResponse:
        seen, worst[:] = worst[:], [0.0, 0.0]
        return JSONResponse({"worst_ms": seen[0] * 1000, "cpu_ms": seen[1] * 1000})

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[None]:
        async with served.lifespan(application):
            task = asyncio.get_running_loop().create_task(watchdog(worst))
            yield
            task.cancel()

    async def cpu(request: Request) -> JSONResponse:
        return JSONResponse({"cpu_s": time.process_time()})

    routes = [
        Route("/bench/stall", stall, methods=["POST"]),
        Route("/bench/cpu", cpu, methods=["POST"]),
        Mount("/", served),
    ]
    outer = Floor(Starlette(routes=routes, lifespan=lifespan))
    sock = listen("127.0.0.1", 0)
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    with sock:
        serve_on(outer, sock)  # as innerloop serve runs it


async def measure_streams(
    base: str, clients: int, ramp: float = 0.0
) -> dict[str, tuple[float, dict[str, float], list[str]]]:
    """Per protocol: the seconds the ``clients`` streams took, the longest stall in the
    server meanwhile (``worst_ms``, and ``cpu_ms`` the server ran in it), the problems."""
    figures = {}
    for protocol in PROTOCOLS:
        # a client of its own each time: no connection left idle past the server's
        # keep-alive (closed by it as the client reuses it: a ReadError, not a figure)
        async with stream_client(base, 5) as client:
            await concurrent_streams(client, protocol, 5, f"warm-{protocol}")
            (await client.post("/bench/stall")).raise_for_status()  # from now on
        async with stream_client(base, clients) as client:
            start = time.perf_counter()
            problems = await concurrent_streams(client, protocol, clients, protocol, ramp)
            took = time.perf_counter() - start
            stall = (await client.post("/bench/stall")).json()
        figures[protocol] = (took, stall, problems)
    return figures


@contextlib.contextmanager
def watched_server(pause: float) -> Iterator[str]:
    """A child serving the app (:func:`serve_watched`); its URL."""
    command = [sys.executable, "-m", "bench.serve", "--serve-watched", "--pause", str(pause)]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            yield server.stdout.readline().strip()
        finally:
            server.terminate()
            server.wait(timeout=30)


def machine() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def streams(clients: int, pause: float, ramp: float) -> None:
    with watched_server(pause) as base:
        figures = asyncio.run(measure_streams(base, clients, ramp))
    print(
        f"{clients} concurrent streaming clients, a delta every {pause * 1000:g} ms, started "
        f"{f'over {ramp:g} s' if ramp else 'at once'} ({machine()}):"
    )
    for protocol, (took, stall, problems) in figures.items():
        whole = "every stream whole" if not problems else f"{len(problems)} problems"
        print(
            f"{protocol:>10}  {took:6.2f} s, longest event-loop stall {stall['worst_ms']:6.1f} ms"
            f" (the server ran {stall['cpu_ms']:5.1f} ms of it), {whole}"
        )
        for problem in problems[:5]:
            print(f"{'':>12}{problem}")


def latency(runs: int) -> None:
    with watched_server(0) as base:
        direct, evented, routes, mcp = asyncio.run(measure(base, runs))
    print(f"added time per run, median of {runs} ({machine()}):")
    print(f"{'in process':>14}  {direct:7.3f} ms; its events read: {evented:7.3f} ms")
    for name, (served, floor, cpu, floor_cpu) in routes.items():
        print(
            f"{name:>14}  {served:7.3f} ms served, added {served - direct:+7.3f} ms; "
            f"floor {floor:7.3f} ms, added over it {served - floor - direct:+7.3f} ms; "
            f"server CPU {cpu:6.3f} ms a run, floor {floor_cpu:6.3f} ms, "
            f"added {cpu - floor_cpu - direct:+6.3f} ms"
        )
    print(
        f"{'mcp':>14}  {mcp[0]:7.3f} ms served, added {mcp[0] - direct:+7.3f} ms (the mcp "
        f"client as it comes); {mcp[1]:7.3f} ms, added {mcp[1] - direct:+7.3f} ms (its "
        "writes unbatched: TCP_NODELAY)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--pause", type=float, default=0.02)
    parser.add_argument("--ramp", type=float, default=0.0, help="seconds to start clients over")
    parser.add_argument("--only", choices=["latency", "streams"])
    parser.add_argument("--serve-watched", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_watched:
        serve_watched(args.pause)
        return
    if args.only != "streams":
        latency(args.runs)
    if args.only != "latency":
        streams(args.clients, args.pause, args.ramp)


if __name__ == "__main__":
    main()
