"""What serving a harness costs, in two figures.

Added time per run: per protocol, the median time of one run through ``innerloop serve``
(loopback HTTP, the server in a child process) minus the median time of the same run
called in process (``await harness.run(...)``). The model is in-process and scripted
(``FakeProvider``: one short answer, no tool call), so the figures are the server's and
the protocol's own cost: HTTP, JSON, the conversation check, the event pump, the
protocol's encoding. Clients are plain ``httpx`` (the OpenAI, AG-UI, AI SDK and A2A
routes), each run a new request (a new conversation, or none), one at a time, and the official
SDKs' clients: ``mcp`` (a tool call on one session) and ``a2a-sdk`` (a message, a new
task and context each, answered whole and streamed). Target: at most 1 ms median. Each
plain route is also timed against its floor (the same bytes from a bare endpoint of the
same server), by the server's CPU, and through the app called in process (ASGI, no
socket): on a loaded machine the wall time over loopback is mostly the scheduler's,
these are the app's. MCP and A2A are timed against their SDK's floor: the same SDK's
server in the same process answering at once what the harness answers, nothing of
innerloop (most of their time is the SDKs' own, client and server; A2A's served endpoint
is innerloop's own, its floor the ``a2a-sdk``'s server).

Concurrent streams: ``--clients`` (200) streaming clients at once on one served process
(a child running the app under uvicorn, as ``innerloop serve`` does), per protocol
(OpenAI chat completions streamed, AG-UI, the AI SDK's UI message stream, A2A's
streamed task: its JSON-RPC as the ``a2a-sdk`` client sends it). Each client is its own
conversation, and the scripted model answers each with words no other client's
answer holds, a delta every ``--pause`` seconds; each client's stream is checked whole:
every event belongs to its conversation, none is lost, doubled or out of order. The
clients are one process of their own (raw sockets, each stream parsed once it ended:
little CPU taken from the cores the server shares with them). A watchdog task in the
server wakes every 5 ms and records how late it woke (the server's own loop lag: its p50,
p99 and the longest stall, with the CPU the server ran in that one; the rest of a stall is
the process waiting for a core), the server's CPU per client and its garbage collections'
CPU (the total, the longest, how many were full). Then a plain ASGI SSE app in the same
server streams the same bytes in the same writes at the same pace (one served stream
replayed, nothing of innerloop): what streaming costs any Python server on this machine,
the same run, the same load. A2A's streams are streamed a third time by the ``a2a-sdk``'s
own server answering the same words at the same pace (nothing of innerloop;
:func:`sdk_floors`): what that server costs alone, the reason innerloop writes its A2A
endpoint itself (that server stalls its loop past the target).
Targets: no stall over 50 ms, no lost or mixed event.
``--pure`` serves with h11 and asyncio's loop (without the serve extra's httptools and
uvloop). ``--collect S`` forces a full garbage collection in the server S seconds into
each protocol's streams (the worst a collection falling among them does: its CPU and the
objects it walked are reported).

    python bench/serve.py [--runs 300] [--clients 200] [--pause 0.02] [--ramp 0]
                          [--only latency|streams] [--pure] [--collect 0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
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
import mcp_types

from innerloop import Harness, HarnessParams, Message, ModelResponse, Usage
from innerloop._events import MessageComplete, TextDelta
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

    def a2a(method: str) -> Callable[[], dict[str, Any]]:
        def body() -> dict[str, Any]:
            message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "Hi"}]}
            return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}

        return body

    return {
        "openai": ("/v1/chat/completions", lambda: ASK),
        "openai stream": ("/v1/chat/completions", lambda: ASK | {"stream": True}),
        "ag-ui": ("/ag-ui", ag_ui),
        "ai-sdk": ("/ai-sdk", ai_sdk),
        "a2a": ("/a2a", a2a("SendMessage")),  # a new context (and task) each
        "a2a stream": ("/a2a", a2a("SendStreamingMessage")),
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


Paired = tuple[float, float, float, float]
"""Median ms of a run served and of its floor; the server's CPU ms a run, served and floor."""


async def alternated(
    client: httpx.AsyncClient,
    runs: int,
    served: Callable[[], Awaitable[object]],
    floor: Callable[[], Awaitable[object]],
) -> Paired:
    """``served`` and ``floor`` timed one after the other ``runs`` times (after 20 of each
    to warm up), so both see the same load of the machine; then the server's CPU (asked
    through ``client``) over ``runs`` of each, what that load does not stretch."""
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(runs + 20):
        for ask, kept in ((served, times[0]), (floor, times[1])):
            start = time.perf_counter()
            await ask()
            if i >= 20:  # warmed up
                kept.append(time.perf_counter() - start)
    cpu = []
    for ask in (served, floor):
        start = await server_cpu(client)
        for _ in range(runs):
            await ask()
        cpu.append((await server_cpu(client) - start) / runs * 1000)
    return statistics.median(times[0]) * 1000, statistics.median(times[1]) * 1000, cpu[0], cpu[1]


def poster(
    client: httpx.AsyncClient, path: str, body: Callable[[], dict[str, Any]]
) -> Callable[[], Awaitable[float]]:
    """A run: ``body()`` posted to ``path`` (:func:`timed`)."""
    return lambda: timed(client, path, body())


async def paired(client: httpx.AsyncClient, runs: int) -> dict[str, Paired]:
    """Per route, a run served and its floor (:func:`alternated`): a bare ASGI endpoint
    of the same server answering the same bytes in the same writes (uvicorn, HTTP, the
    socket and this client, without the app)."""
    figures = {}
    for name, (path, body) in latency_requests().items():
        await timed(client, path, body())  # records the answer the floor repeats
        figures[name] = await alternated(
            client,
            runs,
            poster(client, path, body),
            poster(client, f"/bench/floor{path}", body),
        )
    return figures


def post_scope(path: str) -> dict[str, Any]:
    """The ASGI scope of a JSON POST to ``path`` on loopback."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"a2a-version", b"1.0"),  # A2A's version (the other routes read no such header)
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }


async def asgi_call(application: Any, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """``application`` called in process for one POST of ``body`` to ``path`` (no socket,
    no HTTP: the ASGI messages only); what it sent."""
    messages = [{"type": "http.request", "body": json.dumps(body).encode()}]
    answered = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await application(post_scope(path), receive, send)
    answered.set()
    return sent


async def app_alone(runs: int) -> dict[str, float]:
    """Per route: the median ms of a run through the served app called in process
    (:func:`asgi_call`): the app's own time, what neither HTTP nor the machine's
    scheduler between two processes adds to."""
    from innerloop.serve import app

    served = app(harness())
    figures = {}
    async with served.lifespan(served):
        for name, (path, body) in latency_requests().items():
            figures[name] = await median_ms(
                runs, lambda path=path, body=body: asgi_call(served, path, body())
            )
    return figures


async def mcp_paired(client: httpx.AsyncClient, runs: int) -> Paired:
    """A tool call through the ``mcp`` client, one session each for the served tool and
    the SDK's floor."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with contextlib.AsyncExitStack() as stack:
        sessions = []
        base = str(client.base_url).rstrip("/")
        for url in (f"{base}/mcp", f"{base}/bench/sdk/mcp"):
            read, write = await stack.enter_async_context(streamable_http_client(url))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append(session)
        served, floor = (lambda s=s: s.call_tool("innerloop", {"prompt": "Hi"}) for s in sessions)
        return await alternated(client, runs, served, floor)


async def a2a_paired(
    client: httpx.AsyncClient, runs: int, streaming: bool
) -> tuple[Paired, Paired]:
    """A message (a new task, a new context each) through the ``a2a-sdk`` client, its
    answer sent whole or streamed: to the served agent against its floor (the same bytes
    from a bare endpoint of the same server, as the plain routes' floor: the client reaches
    it through the served card, its URL changed), and against the SDK's floor (the
    ``a2a-sdk``'s own server)."""
    from a2a.client import A2ACardResolver, ClientConfig, create_client
    from a2a.helpers.proto_helpers import new_text_message
    from a2a.types import Role, SendMessageRequest

    base = str(client.base_url).rstrip("/")
    card = await A2ACardResolver(client, f"{base}/a2a").get_agent_card()
    card.supported_interfaces[0].url = f"{base}/bench/floor/a2a"
    config = ClientConfig(streaming=streaming)
    served, bare, sdk = [
        await create_client(agent, config)
        for agent in (f"{base}/a2a", card, f"{base}/bench/sdk/a2a")
    ]

    def send(to: Any) -> Callable[[], Awaitable[None]]:
        async def once() -> None:
            message = new_text_message("Hi", role=Role.ROLE_USER)
            async for _ in to.send_message(SendMessageRequest(message=message)):
                pass

        return once

    try:
        await send(served)()  # records the answer the bare floor repeats
        return (
            await alternated(client, runs, send(served), send(bare)),
            await alternated(client, runs, send(served), send(sdk)),
        )
    finally:
        for to in (served, bare, sdk):
            await to.close()


async def sdk_pairs(client: httpx.AsyncClient, runs: int) -> dict[str, tuple[Paired, ...]]:
    """Per route reached through its official SDK's client (MCP; A2A, its answer sent
    whole and streamed): a run served against the SDK's floor, the same SDK's server in
    the same process answering at once what the served harness answers (a tool returning
    ``Hello.``; a task completed with it), nothing of innerloop (:func:`sdk_floors`); for
    A2A (innerloop's own endpoint) first against its bare floor. Each client is made as
    its SDK makes it."""
    return {
        "mcp": (await mcp_paired(client, runs),),
        "a2a": await a2a_paired(client, runs, streaming=False),
        "a2a stream": await a2a_paired(client, runs, streaming=True),
    }


async def measure(
    base: str, runs: int
) -> tuple[
    float,
    float,
    dict[str, float],
    dict[str, Paired],
    dict[str, tuple[Paired, ...]],
]:
    """In process (ms: the run, the run with its events read, and each route's run
    through the app called in process), the routes served and their floor (ms), the
    routes an SDK reaches served and their floors (ms: :func:`sdk_pairs`)."""
    h = harness()
    direct = await median_ms(runs, lambda: h.run("Hi"))

    async def read_events() -> None:
        async for _ in h.start("Hi").events():
            pass

    evented = await median_ms(runs, read_events)
    alone = await app_alone(runs)
    # the client's writes unbatched (the headers and the body of a request are two writes:
    # with Nagle's algorithm on, the body waits for the server's delayed ACK)
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    transport = httpx.AsyncHTTPTransport(socket_options=nodelay)
    a2a = {"A2A-Version": "1.0"}  # A2A's (the other routes read no such header)
    async with httpx.AsyncClient(base_url=base, transport=transport, headers=a2a) as client:
        routes = await paired(client, runs)
        sdks = await sdk_pairs(client, runs)
    return direct, evented, alone, routes, sdks


def sdk_floors(
    url: str, pause: float = 0.0
) -> tuple[Any, Callable[[Any], contextlib.AbstractAsyncContextManager[Any]]]:
    """The SDKs' floors (:func:`sdk_pairs`), to mount at ``url``'s path: an MCP server
    (``/mcp``) whose tool ``innerloop`` answers ``Hello.`` at once, and an A2A agent
    (``/a2a``) completing each task with ``Hello.`` as the served harness's does (a working
    status with the text, the answer as an artifact); and the lifespan MCP's sessions
    live in. A concurrent stream's message (``client N``) the A2A agent answers as the
    paced harness does (:class:`PacedModel`): :func:`answer_for` ``(N)``, a working status
    of :data:`CHUNK` characters every ``pause`` seconds, nothing of innerloop."""
    from a2a.helpers.proto_helpers import (
        new_task_from_user_message,
        new_text_artifact,
        new_text_message,
    )
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes.agent_card_routes import create_agent_card_routes
    from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        TaskArtifactUpdateEvent,
        TaskState,
    )
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette

    async def innerloop(prompt: str) -> mcp_types.CallToolResult:
        """Answers at once."""
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="Hello.")])

    server = MCPServer("floor", log_level="ERROR")
    server.add_tool(innerloop, name="innerloop")
    mcp = server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    class Answer(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            task_id, context_id = context.task_id or "", context.context_id or ""
            updater = TaskUpdater(event_queue, task_id, context_id)
            assert context.message is not None
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
            await updater.start_work()
            said = context.get_user_input()
            if said.startswith("client "):  # a concurrent stream's, paced as PacedModel's
                text, chunks = paced_answer(said)
            else:
                text, chunks = "Hello.", ["Hello."]
            for chunk in chunks:
                if pause:
                    await asyncio.sleep(pause)
                delta = new_text_message(chunk, context_id=context_id, task_id=task_id)
                await updater.update_status(TaskState.TASK_STATE_WORKING, delta)
            if pause:
                await asyncio.sleep(pause)  # the model's whole message
            artifact = new_text_artifact(name="answer", text=text)
            await event_queue.enqueue_event(
                TaskArtifactUpdateEvent(
                    task_id=task_id, context_id=context_id, artifact=artifact, last_chunk=True
                )
            )
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError

    card = AgentCard(
        name="floor",
        description="Answers at once.",
        version="1",
        supported_interfaces=[
            AgentInterface(url=f"{url}/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )
    handler = DefaultRequestHandler(Answer(), InMemoryTaskStore(), card)
    routes = [
        *create_agent_card_routes(card, card_url="/a2a/.well-known/agent-card.json"),
        *create_jsonrpc_routes(handler, "/a2a"),
        *mcp.routes,
    ]
    return Starlette(routes=routes), lambda _: mcp.router.lifespan_context(mcp)


class Floor:
    """The bench's routes (``inner``) around the served app (``served``), each route's
    latest answer recorded (one at a time: a path's answers meanwhile are not);
    ``/bench/floor/PATH`` answers PATH's recorded answer again, in the same writes,
    without the app (its body read).

    The plain SSE app, what streaming costs any ASGI app on this machine:
    ``/bench/keep/PATH`` keeps PATH's latest answer (a stream of the served app, taken
    unloaded: one write a delta); ``/bench/plain/PATH`` streams it again, the same bytes
    in the same writes, one every ``pause`` seconds (as the scripted model's deltas
    come), with nothing of the app; ``/bench/kept/PATH`` answers those bytes at once."""

    def __init__(self, inner: Any, served: Any, pause: float = 0.0) -> None:
        self.inner, self.served = inner, served
        self.pause = pause
        self.recorded: dict[str, list[dict[str, Any]]] = {}
        self.recording: set[str] = set()
        self.kept: dict[str, list[dict[str, Any]]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        kind = path.split("/")[2] if path.startswith("/bench/") else ""
        if scope["type"] == "http" and kind in ("floor", "keep", "kept", "plain"):
            while (await receive()).get("more_body"):
                pass
            await self._bench(kind, path, send)
        elif scope["type"] != "http":
            await self.inner(scope, receive, send)
        elif path in self.recording:  # one answer of a path recorded at a time
            await self._app(path)(scope, receive, send)
        else:
            messages: list[dict[str, Any]] = []

            async def keep(message: dict[str, Any]) -> None:
                messages.append(message)
                await send(message)

            self.recording.add(path)
            try:
                await self._app(path)(scope, receive, keep)
            finally:
                self.recording.discard(path)
            self.recorded[path] = messages

    def _app(self, path: str) -> Any:
        """The served app itself for its paths, as ``innerloop serve`` serves it (the
        bench's routes around it add nothing to a served request)."""
        return self.inner if path.startswith("/bench/") else self.served

    async def _bench(self, kind: str, path: str, send: Any) -> None:
        route = path.removeprefix(f"/bench/{kind}")
        if kind == "floor":
            for message in self.recorded[route]:
                await send(message)
            return
        if kind == "keep":
            self.kept[route] = self.recorded[route]
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        start, *writes = self.kept[route]
        if kind == "kept":
            body = b"".join(message.get("body", b"") for message in writes)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        await send(start)
        for at, message in enumerate(writes):
            if at:
                await asyncio.sleep(self.pause)
            await send(message)


# -- concurrent streams ---------------------------------------------------------------------

WORDS = 30
"""Words in each client's answer (about 25 deltas of 8 characters)."""
PROTOCOLS = ("openai", "ag-ui", "ai-sdk", "a2a")


def answer_for(client: int) -> str:
    """Client ``client``'s answer: words no other client's answer holds, in order."""
    return " ".join(f"c{client}.{word}" for word in range(WORDS))


CHUNK = 8
"""Characters in each delta of the scripted answers."""


def paced_answer(said: str) -> tuple[str, list[str]]:
    """The answer to a concurrent stream's message (``client N``): :func:`answer_for`
    ``(N)`` and its deltas of :data:`CHUNK` characters, as the paced model streams it."""
    text = answer_for(int(said.removeprefix("client ")))
    return text, [text[at : at + CHUNK] for at in range(0, len(text), CHUNK)]


class _Paced:
    """A scripted answer streamed as a model streams it: a delta of :data:`CHUNK`
    characters every ``pause`` seconds, each made when it is due (a model's stream holds
    none before it came), then the whole message."""

    def __init__(self, said: str, model: str, pause: float) -> None:
        self.said, self.model, self.pause = said, model, pause

    async def __aiter__(self) -> AsyncIterator[Any]:
        text, chunks = paced_answer(self.said)
        for chunk in chunks:
            await asyncio.sleep(self.pause)
            yield TextDelta(0, chunk)
        await asyncio.sleep(self.pause)
        response = ModelResponse(Message.assistant(text), "end_turn", Usage(10, 5), self.model)
        yield MessageComplete(response)

    async def aclose(self) -> None:
        return None


class PacedModel:
    """Answers the message ``client N`` with :func:`answer_for` ``(N)``, :data:`CHUNK`
    characters a delta, one delta every ``pause`` seconds."""

    name = "scripted"
    dialect = "anthropic"

    def __init__(self, pause: float) -> None:
        self.pause = pause

    async def open(self, request: Any) -> _Paced:
        content = request.payload["messages"][-1]["content"]
        said = content if isinstance(content, str) else content[-1]["text"]
        return _Paced(said, request.model or "scripted-model", self.pause)

    async def aclose(self) -> None:
        return None


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
    if protocol == "a2a":
        message = {
            "messageId": f"m{client}",
            "contextId": conversation,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        params = {"message": message}
        return "/a2a", {
            "jsonrpc": "2.0",
            "id": client,
            "method": "SendStreamingMessage",
            "params": params,
        }
    parts = [{"type": "text", "text": text}]
    return "/ai-sdk", {
        "id": conversation,
        "messages": [{"id": "u", "role": "user", "parts": parts}],
    }


Read = tuple[set[Any], str, list[str]]
"""What a stream says: the conversations its events name, its text, what is wrong with it."""


def _openai_stream(events: list[dict[str, Any]], client: int, expected: str) -> Read:
    ids = {e["id"] for e in events}
    problems = [] if len(ids) == 1 else [f"chunks of {len(ids)} completions"]
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    return {e.get("conversation_id") for e in events}, text, problems


def _ag_ui_stream(events: list[dict[str, Any]], client: int, expected: str) -> Read:
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    problems = []
    if not events or events[-1]["type"] != "RUN_FINISHED":
        problems.append("no RUN_FINISHED at the end")
    elif events[-1]["result"] != expected:
        problems.append(f"RUN_FINISHED's result is {events[-1]['result']!r}")
    return {e["threadId"] for e in events if "threadId" in e}, text, problems


def _ai_sdk_stream(events: list[dict[str, Any]], client: int, expected: str) -> Read:
    text = "".join(e["delta"] for e in events if e["type"] == "text-delta")
    problems = [] if events and events[-1]["type"] == "finish" else ["no finish at the end"]
    return set(), text, problems  # its events name no conversation


def _a2a_stream(events: list[dict[str, Any]], client: int, expected: str) -> Read:
    """Each event answers client ``client``'s request; the working statuses' text; the
    last event completes the task, whose artifact is the answer."""
    problems = [] if {e.get("id") for e in events} <= {client} else ["answers of other requests"]
    results = [e.get("result", {}) for e in events]
    updates = [next(iter(r.values()), {}) for r in results]  # task, statusUpdate, artifactUpdate
    states = [u.get("status", {}).get("state") for u in updates]
    text = "".join(
        part.get("text", "")
        for u, state in zip(updates, states, strict=True)
        if state == "TASK_STATE_WORKING"
        for part in u["status"].get("message", {}).get("parts", ())
    )
    answered = "".join(
        part.get("text", "")
        for r, u in zip(results, updates, strict=True)
        if "artifactUpdate" in r
        for part in u["artifact"].get("parts", ())
    )
    if answered != expected:
        problems.append(f"the answer's artifact is {answered!r}")
    if not states or states[-1] != "TASK_STATE_COMPLETED":
        problems.append("no completed task at the end")
    return {u.get("contextId") for u in updates}, text, problems


STREAMS: dict[str, Callable[[list[dict[str, Any]], int, str], Read]] = {
    "openai": _openai_stream,
    "ag-ui": _ag_ui_stream,
    "ai-sdk": _ai_sdk_stream,
    "a2a": _a2a_stream,
}
"""Per protocol, how its stream is read (:func:`stream_problems`)."""


def stream_problems(protocol: str, client: int, run: str, data: list[str]) -> list[str]:
    """What is wrong with client ``client``'s stream (its SSE ``data`` fields, in order):
    an event of another conversation, a lost, doubled or misplaced delta, a missing end."""
    conversation, expected = f"{run}-{client}", answer_for(client)
    problems = []
    if not data or (protocol in ("openai", "ai-sdk") and data[-1] != "[DONE]"):
        problems.append("the stream did not end with [DONE]")
    events = [json.loads(d) for d in data if d != "[DONE]"]
    others, text, found = STREAMS[protocol](events, client, expected)
    problems += found
    if others - {conversation}:
        problems.append(f"events of conversations {sorted(others - {conversation})}")
    if text != expected:
        problems.append(f"text {text!r}, expected {expected!r}")
    return [f"client {client} ({protocol}): {p}" for p in problems]


HEADERS = {"a2a": "a2a-version: 1.0\r\n"}
"""A protocol's own request headers (A2A's clients say which version they speak)."""


async def post_raw(
    base: str, path: str, body: dict[str, Any], headers: str = ""
) -> tuple[int, bytes]:
    """POST ``body`` to ``base + path`` on a connection of its own (with ``headers``,
    each line ending in CRLF), the answer read whole as it comes (each read only kept: no
    parsing while the streams run, so the clients take little of the cores the server
    needs), then its status and body (dechunked)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(payload)}\r\nconnection: close\r\n{headers}\r\n"
    )
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode() + payload)
        parts = []
        while part := await reader.read(1 << 16):
            parts.append(part)
    finally:
        writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return _http_answer(b"".join(parts))


def _http_answer(raw: bytes) -> tuple[int, bytes]:
    """An HTTP/1.1 answer's status and body (its chunked transfer coding undone)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    if "transfer-encoding: chunked" not in (line.lower() for line in lines[1:]):
        return status, body
    out, at = [], 0
    while True:
        end = body.index(b"\r\n", at)
        size = int(body[at:end].split(b";")[0], 16)
        if size == 0:
            return status, b"".join(out)
        out.append(body[end + 2 : end + 2 + size])
        at = end + 4 + size


def sse_data(body: bytes) -> list[str]:
    """The ``data`` fields of a stream of server-sent events, in order."""
    return [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]


async def one_stream(
    base: str, protocol: str, number: int, run: str, prefix: str = ""
) -> list[str]:
    """Client ``number``'s request streamed whole (to its path under ``prefix``); what is
    wrong with it."""
    path, body = _request(protocol, number, run)
    status, answer = await post_raw(base, prefix + path, body, HEADERS.get(protocol, ""))
    if status != 200:
        return [f"client {number} ({protocol}): HTTP {status} {answer.decode()}"]
    return stream_problems(protocol, number, run, sse_data(answer))


async def concurrent_streams(
    base: str, protocol: str, clients: int, run: str, ramp: float = 0.0, prefix: str = ""
) -> list[str]:
    """``clients`` streaming requests on ``protocol``, all at once or their starts spread
    over ``ramp`` seconds, each on a connection of its own: every problem seen."""

    async def one(number: int) -> list[str]:
        await asyncio.sleep(ramp * number / clients)
        return await one_stream(base, protocol, number, run, prefix)

    found = await asyncio.gather(*(one(n) for n in range(clients)))
    return [problem for problems in found for problem in problems]


async def plain_streams(base: str, protocol: str, clients: int, ramp: float = 0.0) -> list[str]:
    """``clients`` streams of the plain SSE app (:class:`Floor`) at once, each replaying
    the kept stream of ``protocol``'s route: each checked to be those bytes whole."""
    path = _request(protocol, 0, "")[0]
    expected = await post_raw(base, f"/bench/kept{path}", {})

    async def one(number: int) -> list[str]:
        await asyncio.sleep(ramp * number / clients)
        if await post_raw(base, f"/bench/plain{path}", {}) != expected:
            return [f"plain client {number} ({protocol}): not the kept stream"]
        return []

    found = await asyncio.gather(*(one(n) for n in range(clients)))
    return [problem for problems in found for problem in problems]


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


async def watchdog(lags: list[float], worst: list[float], period: float = 0.005) -> None:
    """Wake every ``period`` s; ``lags``: how late each wake-up was (s), ``worst``: the
    latest one so far and the CPU time the process had meanwhile (the stall's own part:
    the rest was the machine's scheduler: the process waiting for a core). A late wake-up
    is an event-loop stall: a callback that held the loop, too many ready at once, or the
    process waiting for a core. Timed by the wall clock, not the loop's (uvloop's is
    read once per turn of the loop: a long turn would hide in it)."""
    while True:
        asked, cpu = time.perf_counter(), time.process_time()
        await asyncio.sleep(period)
        late = max(0.0, time.perf_counter() - asked - period)
        lags.append(late)
        if late > worst[0]:
            worst[:] = [late, max(0.0, time.process_time() - cpu - period)]


def serve_watched(pause: float, pure: bool = False) -> None:
    """The child: the served app under uvicorn (as ``innerloop serve`` runs it; with no
    ``pause``, the harness answering at once), the watchdog (``POST /bench/stall`` answers
    the event loop's lags since the last one, and the CPU the process ran meanwhile) and
    the floor and plain app (:class:`Floor`)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    from innerloop.serve import app
    from innerloop.serve._cli import listen, serve_on

    sock = listen("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    served = app(paced_harness(pause) if pause else harness(), public_url=base)
    floors, floors_lifespan = sdk_floors(f"{base}/bench/sdk", pause)
    lags: list[float] = []
    worst = [0.0, 0.0]
    since = [time.process_time()]
    collections: list[tuple[int, float]] = []  # each collection's generation, CPU seconds
    collecting = [0.0]  # the CPU time the one under way started at

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[0] = time.process_time()
        else:
            collections.append((info["generation"], time.process_time() - collecting[0]))

    gc.callbacks.append(collected)

    async def stall(request: Request) -> JSONResponse:
        seen, worst[:] = worst[:], [0.0, 0.0]
        ordered = sorted(lags)
        lags.clear()
        cpu, since[0] = time.process_time() - since[0], time.process_time()
        pauses = list(collections)
        collections.clear()
        return JSONResponse(
            {
                "gc_ms": sum(cpu for _, cpu in pauses) * 1000,
                "gc_max_ms": max((cpu for _, cpu in pauses), default=0.0) * 1000,
                "gc_full": sum(1 for generation, _ in pauses if generation == 2),
                "worst_ms": seen[0] * 1000,
                "cpu_ms": seen[1] * 1000,
                "p50_ms": percentile(ordered, 0.5) * 1000,
                "p99_ms": percentile(ordered, 0.99) * 1000,
                "wakes": len(ordered),
                "cpu_s": cpu,
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[None]:
        async with served.lifespan(application), floors_lifespan(floors):
            task = asyncio.get_running_loop().create_task(watchdog(lags, worst))
            yield
            task.cancel()

    async def cpu(request: Request) -> JSONResponse:
        return JSONResponse({"cpu_s": time.process_time()})

    async def collect(request: Request) -> JSONResponse:
        start = time.process_time()
        gc.collect()
        cpu = time.process_time() - start
        return JSONResponse({"forced_ms": cpu * 1000, "forced_objects": len(gc.get_objects())})

    routes = [
        Route("/bench/stall", stall, methods=["POST"]),
        Route("/bench/cpu", cpu, methods=["POST"]),
        Route("/bench/collect", collect, methods=["POST"]),
        Mount("/bench/sdk", floors),
        Mount("/", served),
    ]
    outer = Floor(Starlette(routes=routes, lifespan=lifespan), served, pause)
    print(base, flush=True)
    with sock:
        # as innerloop serve runs it (or with h11 and asyncio's loop, as it runs without
        # the serve extra's httptools and uvloop)
        serve_on(outer, sock, **({"http": "h11", "loop": "asyncio"} if pure else {}))


Phase = tuple[float, dict[str, float], list[str]]
"""Seconds the streams took, the server's ``/bench/stall`` figures meanwhile, problems."""


async def timed_phase(base: str, streams: Awaitable[list[str]], collect: float = 0.0) -> Phase:
    """The streams timed, with the server's figures meanwhile; with ``collect``, a full
    garbage collection forced in the server that many seconds in (its CPU and the objects
    it walked added to them)."""
    async with httpx.AsyncClient(base_url=base) as client:

        async def forced() -> dict[str, float]:
            await asyncio.sleep(collect)
            answer: dict[str, float] = (await client.post("/bench/collect")).json()
            return answer

        (await client.post("/bench/stall")).raise_for_status()  # from now on
        start = time.perf_counter()
        forcing = asyncio.ensure_future(forced()) if collect else None
        problems = await streams
        took = time.perf_counter() - start
        stall = (await client.post("/bench/stall")).json()
        if forcing is not None:
            stall |= await forcing
    return took, stall, problems


SDK_SERVED = {"a2a": "/bench/sdk"}
"""The protocols whose SDK has a server of its own (what innerloop's endpoint is weighed
against), and where that SDK's floor is mounted."""


async def measure_streams(
    base: str, clients: int, ramp: float = 0.0, collect: float = 0.0
) -> dict[str, tuple[Phase, ...]]:
    """Per protocol: the ``clients`` streams served, then the same bytes from the plain
    SSE app (:class:`Floor`) at the same pace, then for a protocol whose SDK has a server
    (:data:`SDK_SERVED`), the same streams from that SDK's floor (:func:`sdk_floors`):
    each phase's :data:`Phase`."""
    figures: dict[str, tuple[Phase, ...]] = {}
    for protocol in PROTOCOLS:
        await concurrent_streams(base, protocol, 1, f"kept-{protocol}")  # recorded
        await post_raw(base, f"/bench/keep{_request(protocol, 0, '')[0]}", {})
        await concurrent_streams(base, protocol, 5, f"warm-{protocol}")
        await plain_streams(base, protocol, 5)
        served = await timed_phase(
            base, concurrent_streams(base, protocol, clients, protocol, ramp), collect
        )
        plain = await timed_phase(base, plain_streams(base, protocol, clients, ramp))
        figures[protocol] = (served, plain)
        if protocol in SDK_SERVED:
            sdk = concurrent_streams(
                base, protocol, clients, f"sdk-{protocol}", ramp, SDK_SERVED[protocol]
            )
            figures[protocol] += (await timed_phase(base, sdk),)
    return figures


@contextlib.contextmanager
def watched_server(pause: float, pure: bool = False) -> Iterator[str]:
    """A child serving the app (:func:`serve_watched`); its URL."""
    command = [sys.executable, "-m", "bench.serve", "--serve-watched", "--pause", str(pause)]
    command += ["--pure"] if pure else []
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            yield server.stdout.readline().strip()
        finally:
            server.terminate()
            server.wait(timeout=30)


def machine() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def client_loop() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop where it is installed (the clients' CPU is the machine's, shared with
    the server's), asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def _phase_line(label: str, clients: int, phase: Phase) -> str:
    took, stall, problems = phase
    whole = "every stream whole" if not problems else f"{len(problems)} problems"
    return (
        f"{label:>12}  {took:5.2f} s; loop lag p50 {stall['p50_ms']:5.1f}, p99 "
        f"{stall['p99_ms']:6.1f}, max {stall['worst_ms']:6.1f} ms (the server ran "
        f"{stall['cpu_ms']:5.1f} ms of it); server CPU {stall['cpu_s'] * 1000 / clients:5.2f} "
        f"ms a client; garbage collections {stall['gc_ms']:5.1f} ms CPU, the longest "
        f"{stall['gc_max_ms']:4.1f} ms, {stall['gc_full']} full; {whole}"
    )


def streams(clients: int, pause: float, ramp: float, pure: bool, collect: float = 0.0) -> None:
    with watched_server(pause, pure) as base, asyncio.Runner(loop_factory=client_loop()) as runner:
        figures = runner.run(measure_streams(base, clients, ramp, collect))
    print(
        f"{clients} concurrent streaming clients, a delta every {pause * 1000:g} ms, started "
        f"{f'over {ramp:g} s' if ramp else 'at once'} ({machine()}); then the plain SSE "
        "app streaming the same bytes in the same writes at the same pace:"
    )
    for protocol, (served, plain, *sdk) in figures.items():
        print(_phase_line(protocol, clients, served))
        if "forced_ms" in served[1]:
            print(
                f"{'':>14}a full collection forced {collect:g} s in: "
                f"{served[1]['forced_ms']:.1f} ms CPU, {served[1]['forced_objects']:.0f} objects"
            )
        print(_phase_line("plain", clients, plain))
        ratio = served[1]["cpu_s"] / max(plain[1]["cpu_s"], 1e-9)
        print(f"{'':>14}served/plain: server CPU x{ratio:.2f}")
        for floor in sdk:  # the same streams from the SDK's own server, nothing of innerloop
            print(_phase_line(f"{protocol} sdk", clients, floor))
            ratio = served[1]["cpu_s"] / max(floor[1]["cpu_s"], 1e-9)
            print(f"{'':>14}served/the SDK's own server: server CPU x{ratio:.2f}")
        for problem in (served[2] + plain[2] + [p for f in sdk for p in f[2]])[:5]:
            print(f"{'':>14}{problem}")


def latency(runs: int, pure: bool) -> None:
    with watched_server(0, pure) as base:
        direct, evented, alone, routes, sdks = asyncio.run(measure(base, runs))
    print(f"added time per run, median of {runs} ({machine()}):")
    print(f"{'in process':>14}  {direct:7.3f} ms; its events read: {evented:7.3f} ms")
    print("the served app alone, called in process (ASGI, no socket):")
    for name, ms in alone.items():
        print(f"{name:>14}  {ms:7.3f} ms, added {ms - direct:+7.3f} ms")
    print("served over loopback HTTP (uvicorn in a child process):")
    for name, (served, floor, cpu, floor_cpu) in routes.items():
        print(
            f"{name:>14}  {served:7.3f} ms served, added {served - direct:+7.3f} ms; "
            f"floor {floor:7.3f} ms, added over it {served - floor - direct:+7.3f} ms; "
            f"server CPU {cpu:6.3f} ms a run, floor {floor_cpu:6.3f} ms, "
            f"added {cpu - floor_cpu - direct:+6.3f} ms"
        )
    print("served through the official SDKs' clients (as they come): A2A against its floor,")
    print("then MCP and A2A against the SDK's own server answering at once in the same process")
    print("(MCP's is the server innerloop serves with; A2A's, the one its endpoint replaced):")
    for name, pairs in sdks.items():
        for label, (served, floor, cpu, floor_cpu) in zip(
            ("floor", "the SDK's floor")[-len(pairs) :], pairs, strict=True
        ):
            print(
                f"{name:>14}  {served:7.3f} ms served, added {served - direct:+7.3f} ms; "
                f"{label} {floor:7.3f} ms, added over it {served - floor - direct:+7.3f} ms; "
                f"server CPU {cpu:6.3f} ms a run, floor {floor_cpu:6.3f} ms, added "
                f"{cpu - floor_cpu - direct:+6.3f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--pause", type=float, default=0.02)
    parser.add_argument("--ramp", type=float, default=0.0, help="seconds to start clients over")
    parser.add_argument("--only", choices=["latency", "streams"])
    parser.add_argument(
        "--collect",
        type=float,
        default=0.0,
        help="force a full garbage collection in the server this many seconds into each "
        "protocol's streams",
    )
    parser.add_argument(
        "--pure",
        action="store_true",
        help="serve with h11 and asyncio's loop (as without the serve extra's httptools, uvloop)",
    )
    parser.add_argument("--serve-watched", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_watched:
        serve_watched(args.pause, args.pure)
        return
    if args.only != "streams":
        latency(args.runs, args.pure)
    if args.only != "latency":
        streams(args.clients, args.pause, args.ramp, args.pure, args.collect)


if __name__ == "__main__":
    main()
