from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FunctionType
from typing import Any

import httpx
import pytest
import uvicorn

from innerloop import Harness, HarnessParams, tool
from innerloop.fsm import HarnessState
from innerloop.serve import app
from innerloop.serve._cli import listen
from innerloop.testing import ScriptedProvider, reply, tool_call


@tool
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def harness(*script: Any, **options: Any) -> Harness[Any]:
    """A harness on a scripted model with the ``weather`` tool."""
    params = HarnessParams(model="scripted:m", tools=[weather])
    return Harness(params, [ScriptedProvider(list(script))], **options)


def weather_script() -> list[Any]:
    return [reply(tool_call("weather", {"city": "Lisbon"})), reply("Sunny in Lisbon.")]


@tool
async def wait_forever(reason: str) -> str:
    """Waits until cancelled."""
    await asyncio.Event().wait()
    return "never"


def waiting_harness(store: Path) -> Harness[Any]:
    """A harness (checkpointed into ``store``) whose one tool call waits until cancelled."""
    params = HarnessParams(model="scripted:m", tools=[wait_forever])
    script = [reply("Waiting.", tool_call("wait_forever", {"reason": "test"}))]
    return Harness(params, [ScriptedProvider(script)], checkpointer=f"sqlite:///{store}")


def ended(h: Harness[Any], run_id: str) -> HarnessState[Any]:
    """The stored state of ``run_id`` once it reached a final state (its run goes on in
    the server's task after the client left: waited for, at most 10 s)."""
    deadline = time.monotonic() + 10
    while h.checkpoint(run_id).state.final_state is None:
        assert time.monotonic() < deadline, f"run {run_id!r} did not end"
        time.sleep(0.02)
    return h.checkpoint(run_id).state


def leave_at(server: Any, path: str, body: Any, marker: str, run_id: str, h: Harness[Any]) -> Any:
    """Post ``body`` to ``path``, read the stream up to a line holding ``marker``, close the
    connection (a client going away) and return the run's stored state once it ended."""
    with httpx.Client(base_url=server.base_url) as c, c.stream("POST", path, json=body) as r:
        for line in r.iter_lines():
            if marker in line:
                break
    return ended(h, run_id)


def sent(h: Harness[Any]) -> list[str]:
    """The texts of the messages the scripted model was last sent."""
    provider: Any = h.providers["scripted"]
    texts = []
    for message in provider.requests[-1].payload["messages"]:
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.append("".join(b.get("text", "") for b in content))
    return texts


class Server:
    """``application`` served by uvicorn on a free loopback port, from a thread."""

    def __init__(self, application: Any) -> None:
        """``application``, or a function of the server's URL making it."""
        self.socket = listen("127.0.0.1", 0)
        self.port = int(self.socket.getsockname()[1])
        if isinstance(application, FunctionType):
            application = application(f"http://127.0.0.1:{self.port}")
        config = uvicorn.Config(
            application,
            loop="asyncio",
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )
        self.base_url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive(), "the server stopped"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.socket.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(harness, **app_options)``: a started server (stopped after the test)."""
    servers: list[Server] = []

    def start(h: Harness[Any], **options: Any) -> Server:
        server = Server(lambda url: app(h, **({"public_url": url} | options))).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()


NODE_CLIENTS = Path(__file__).resolve().parent / "node"


@pytest.fixture(scope="session")
def node_clients(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding tests/serve/node/ with its npm packages installed (the official
    JavaScript clients; npm and node 20 must be on PATH)."""
    folder = tmp_path_factory.mktemp("node-clients")
    for name in ("package.json", "ai_sdk_chat.mjs", "ag_ui_chat.mjs"):
        shutil.copy(NODE_CLIENTS / name, folder / name)
    npm = shutil.which("npm")
    assert npm is not None, "the serve tests need npm (and node 20) on PATH"
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--silent"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"npm install failed: {done.stderr[-2000:]}"
    return folder


def node(folder: Path, *args: str) -> str:
    """What ``node ARGS`` printed, run in ``folder`` (tests/serve/node/ installed)."""
    executable = shutil.which("node")
    assert executable is not None, "the serve tests need node (20) on PATH"
    done = subprocess.run(
        [executable, *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_node(folder: Path, script: str, *args: str) -> list[Any]:
    """Run ``script`` of tests/serve/node/ (installed in ``folder``) under node; the JSON
    lines it printed."""
    return [json.loads(line) for line in node(folder, script, *args).splitlines()]
