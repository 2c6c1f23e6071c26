"""Tracing and the live view: a run traced into OpenTelemetry's in-memory exporter and
logged as JSONL, then the live view serving that log (its run list and the run's diagram
on the machine the run recorded).

    python examples/tracing_and_live_view.py OUT_DIR
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from innerloop import EventLog, Harness, HarnessParams, tool
from innerloop.observe import Tracing
from innerloop.providers import AnthropicProvider
from innerloop.testing import AnthropicServer, reply, tool_call
from innerloop.ui import Catalog, UIServer


@tool(category="network")
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


async def traced_run(log_path: Path, spans: InMemorySpanExporter) -> str:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    script = [reply(tool_call("weather", {"city": "Lisbon"}, id="w1")), reply("Sunny.")]
    with AnthropicServer(script) as server:
        model = AnthropicProvider("sk-ant-test", base_url=server.base_url)
        params = HarnessParams(model="anthropic:claude-sonnet-4-5-20250929", tools=[weather])
        harness = Harness(params, [model], observers=[Tracing(tracer_provider=provider)])
        run = harness.start("Weather in Lisbon?")
        with EventLog(log_path, {"command": "example"}) as log:
            async for event in run.events():
                log.write(event)
    provider.shutdown()
    return run.state.exit_reason or "-"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:
        body: bytes = answer.read()
        return body


def main(out: Path) -> None:
    spans = InMemorySpanExporter()
    exit_reason = asyncio.run(traced_run(out / "runs" / "weather.jsonl", spans))
    print(exit_reason, sorted(s.name for s in spans.get_finished_spans()))
    with UIServer(Catalog(out / "runs"), port=0) as server:
        (listed,) = json.loads(get(server.url + "api/runs"))["runs"]
        print(listed["id"], listed["status"], listed["exit_reason"], listed["turns"])
        detail = json.loads(get(server.url + "api/run/" + listed["id"]))
        print("machine:", detail["machine"], detail["machine_error"])
        svg = get(server.url + "api/diagram/" + listed["id"])
        (out / "weather.svg").write_bytes(svg)
    print(f"wrote {out / 'weather.svg'} ({len(svg)} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/traced"))
