"""The live view shows no secret: a run whose tool output and model error hold every
shape of ``SECRET_PATTERNS``, served over real HTTP (runs, one run, its live stream)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from innerloop import Harness, HarnessParams, ToolSpec
from innerloop._eventlog import EventLog
from innerloop.testing import Fault, Reply, ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput
from innerloop.ui import Catalog
from tests.observe.test_secret_sinks import SAMPLES

SHORT = "\n".join(text for text, _ in SAMPLES.values() if len(text) < 70)
"""The samples short enough to survive the page's cut of long tool outputs whole."""


async def _env(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(SHORT, is_error=True)


def test_the_view_shows_no_secret(tmp_path: Path, serve: Any) -> None:
    """The run list, the run's detail and its stream carry markers, not the secrets."""
    script: list[Reply | Fault] = [
        reply("", tool_call("env", {})),
        Fault("fatal", 401, None, "\n".join(text for text, _ in SAMPLES.values())),
    ]
    params = HarnessParams(
        model="scripted:m-20250101", tools=(ToolSpec("env", "Env", {"type": "object"}, _env),)
    )
    with EventLog(tmp_path / "run.jsonl") as log:
        state = Harness(params, [ScriptedProvider(script)]).run_sync("go", on_event=log.write)
    assert state.exit_reason == "failed"
    assert any(secret in (tmp_path / "run.jsonl").read_text() for _, secret in SAMPLES.values())
    server = serve(Catalog(tmp_path))
    bodies = {
        path: httpx.get(server.url + path, timeout=10).text
        for path in ("api/runs", "api/run/log:run.jsonl:1", "api/events/log:run.jsonl:1")
    }
    assert "[redacted]" in bodies["api/run/log:run.jsonl:1"]
    assert "[redacted]" in bodies["api/events/log:run.jsonl:1"]
    for path, body in bodies.items():
        leaks = [kind for kind, (_, secret) in SAMPLES.items() if secret in body]
        assert leaks == [], path
