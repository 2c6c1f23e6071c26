"""A durable run is one trace: the host's span, the Temporal workflow and its model and
tool steps, through temporalio's tracing interceptor on the client (the worker built on
that client takes it over)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor

from innerloop.durable.temporal import TemporalLoops, TemporalOptions, temporal_worker
from tests.durable import app as test_app
from tests.durable._procs import TemporalServer


def test_temporal_run_is_one_trace(temporal_server: TemporalServer, log_dir: Path) -> None:
    """The workflow and every step activity are spans of the host's trace."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("host")

    async def main() -> int:
        interceptor = TracingInterceptor(tracer)
        client = await Client.connect(temporal_server.address, interceptors=[interceptor])
        queue = "tracing"
        async with temporal_worker(
            client, test_app.app, task_queue=queue, options=TemporalOptions(heartbeat_timeout=2)
        ):
            loops = TemporalLoops(client, queue)
            with tracer.start_as_current_span("host request") as host:
                handle = await loops.start("tools", "go", id="traced-1")
            state = await asyncio.wait_for(handle.result(), 60)
            assert state.exit_reason == "model_complete"
            return host.get_span_context().trace_id

    trace_id = asyncio.run(main())
    provider.shutdown()
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {trace_id}  # one trace, the host's
    kinds = Counter(s.name for s in spans)
    assert kinds["StartWorkflow:innerloop.loop"] == 1
    assert kinds["RunWorkflow:innerloop.loop"] == 1
    assert kinds["RunActivity:innerloop.model_call"] == kinds["StartActivity:innerloop.model_call"]
    assert kinds["RunActivity:innerloop.model_call"] >= 2
    assert kinds["RunActivity:innerloop.tool_call"] >= 1
