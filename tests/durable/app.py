"""The loops the crash tests run in worker processes.

Everything a step does is logged to append-only files under ``$INNERLOOP_TEST_DIR`` (one
line per model call and per tool start/end, with the worker's pid), so a test can count
what ran where. The model answers from the request alone (the number of tool results so
far), so any worker gives the same answer to the same history.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from innerloop import HarnessParams, ToolSpec
from innerloop.durable import LoopApp, LoopDefinition
from innerloop.examples import with_approval
from innerloop.providers._normalize import WireRequest
from innerloop.testing import FakeProvider, Fault, Reply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

TOOL_TURNS = 3


def log_dir() -> Path:
    return Path(os.environ.get("INNERLOOP_TEST_DIR", "."))


def _log(name: str, line: str) -> None:
    with open(log_dir() / name, "a") as f:
        f.write(f"{os.getpid()} {line}\n")


def _turn(request: WireRequest) -> int:
    """How many tool results the request carries."""
    return sum(
        1
        for m in request.payload["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )


async def model(request: WireRequest) -> Reply | Fault:
    """Blocks while the file ``hold-model-N`` exists (N: the turn)."""
    turn = _turn(request)
    _log("model.log", f"model {turn}")
    while (log_dir() / f"hold-model-{turn}").exists():  # noqa: ASYNC110  a test process's file
        await asyncio.sleep(0.05)
    rate_limit_at = os.environ.get("INNERLOOP_TEST_429_AT")
    if rate_limit_at is not None and turn == int(rate_limit_at):
        marker = log_dir() / f"429-{turn}"
        if not marker.exists():
            marker.touch()
            return Fault.rate_limited(retry_after=0.5)
    if turn < TOOL_TURNS:
        return reply(f"step {turn}", tool_call("work", {"n": turn}, id=f"call_{turn}"))
    return reply("all done")


async def work(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    """Blocks while the file ``hold-N`` exists, so a test can kill a worker mid-tool."""
    n = args["n"]
    _log("tool.log", f"start {ctx.tool_use_id}")
    try:
        while (log_dir() / f"hold-{n}").exists():  # noqa: ASYNC110  a test process's file
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        _log("tool.log", f"cancelled {ctx.tool_use_id}")
        raise
    _log("tool.log", f"end {ctx.tool_use_id}")
    return ToolOutput(f"worked {n}")


WORK = ToolSpec(
    "work",
    "Do unit of work n.",
    {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    work,
    category="code",
)

PARAMS = HarnessParams(model="scripted:scripted-model-20250101", system="You work.", tools=[WORK])

app = LoopApp({"tools": LoopDefinition(PARAMS, {"scripted": FakeProvider(model)})})


async def batch(request: WireRequest) -> Reply | Fault:
    """Three calls in one turn (``call_a``, ``call_b``, ``call_c``: work 10, 11, 12), then
    a final answer."""
    _log("model.log", f"model {_turn(request)}")
    if _turn(request) == 0:
        calls = [tool_call("work", {"n": 10 + i}, id=f"call_{c}") for i, c in enumerate("abc")]
        return reply("three at once", *calls)
    return reply("all done")


app.add("batch", LoopDefinition(PARAMS, {"scripted": FakeProvider(batch)}))



async def one_tool(request: WireRequest) -> Reply | Fault:
    """A call of the request's first tool, then a final answer quoting its result."""
    _log("model.log", f"model {_turn(request)}")
    results = [
        b.get("content")
        for m in request.payload["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    if not results:
        name = request.payload["tools"][0]["name"]
        return reply("first a check", tool_call(name, {"what": "colour"}, id="call_c"))
    return reply(f"got {results!r}")


async def ask(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    """Asks the host (a question interrupt)."""
    _log("tool.log", f"start {ctx.tool_use_id}")
    ctx.interrupt({"question": f"Which {args['what']}?"})


async def look(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    _log("tool.log", f"start {ctx.tool_use_id}")
    return ToolOutput(f"looked at {args['what']}")


def _spec(name: str, fn: Any) -> ToolSpec:
    schema = {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]}
    return ToolSpec(name, f"{name.title()} about something.", schema, fn, category="code")


QUESTION = LoopDefinition(
    HarnessParams(model=PARAMS.model, system="You ask.", tools=[_spec("ask", ask)]),
    {"scripted": FakeProvider(one_tool)},
)
APPROVAL = LoopDefinition(
    HarnessParams(model=PARAMS.model, system="You look.", tools=[_spec("look", look)]),
    {"scripted": FakeProvider(one_tool)},
    machine=with_approval(),
)
app.add("question", QUESTION)
app.add("approval", APPROVAL)
