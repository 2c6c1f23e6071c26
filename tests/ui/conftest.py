from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from innerloop import Harness, HarnessParams
from innerloop._demo import run_demo
from innerloop._eventlog import EventLog
from innerloop.providers import AnthropicProvider
from innerloop.testing import AnthropicServer, SlowReply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec
from innerloop.ui import Catalog, UIServer

MODEL = "anthropic:claude-sonnet-4-5-20250929"
NUMBERS = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
TOOL_SECONDS = 1.5
"""How long the live run's tool takes: long enough to see ``execute`` on the page."""


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder holding the offline demo's event logs: ``demo/events.jsonl`` (three
    runs) and ``demo/nested.jsonl`` (the nested run: suspended, then resumed)."""
    root = tmp_path_factory.mktemp("runs")
    run_demo(root / "demo")
    return root


async def _slow_add(args: Any, ctx: ToolContext) -> ToolOutput:
    await asyncio.sleep(TOOL_SECONDS)
    return ToolOutput(str(args["a"] + args["b"]))


def live_script() -> list[Any]:
    """Two slow turns (a tool call, then the answer), slow enough to watch in a browser."""
    return [
        SlowReply(reply("Let me add those numbers.", tool_call("add", {"a": 2, "b": 3})), 8),
        SlowReply(reply("The sum is 5, as the tool says: two plus three is five."), 8),
    ]


class LiveRun:
    """A real run (Anthropic SDK over loopback HTTP) logged to ``log`` on a thread."""

    def __init__(self, log: Path, base_url: str) -> None:
        self.log = log
        params = HarnessParams(
            model=MODEL, tools=(ToolSpec("add", "Add two numbers.", NUMBERS, _slow_add),)
        )
        self.provider = AnthropicProvider(api_key="test-key", base_url=base_url)
        self.harness = Harness(params, {"anthropic": self.provider})
        self.state: Any = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        asyncio.run(self._play())

    async def _play(self) -> None:
        run = self.harness.start("Add 2 and 3.")
        with EventLog(self.log, {"command": "test", "model": MODEL}) as log:
            try:
                async for event in run.events():
                    log.write(event)
            finally:
                await self.provider.aclose()
        self.state = run.state


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[tuple[Path, LiveRun]]:
    """A runs folder, and a slow run (not started yet) that logs into it as ``live.jsonl``."""
    with AnthropicServer(live_script()) as server:
        run = LiveRun(tmp_path / "live.jsonl", server.base_url)
        yield tmp_path, run
        run.thread.join(30)


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start a UIServer on a free port for a catalog; stopped at the end of the test."""
    servers: list[UIServer] = []

    def start(catalog: Catalog) -> UIServer:
        server = UIServer(catalog, port=0).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
