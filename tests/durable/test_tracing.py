"""A durable run is one trace: the host's span, the workflow and its model and tool
steps. Temporal: temporalio's tracing interceptor on the client (the worker built on that
client takes it over); DBOS: the context carried in the workflow's input and each step's
arguments."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import attrs
from dbos import DBOS, DBOSClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor

from innerloop.durable import LoopApp
from innerloop.durable.dbos import DBOSLoopClient, DBOSLoops, dbos_config
from innerloop.durable.temporal import TemporalLoops, TemporalOptions, temporal_worker
from innerloop.observe import Tracing
from tests.durable import app as test_app
from tests.durable._procs import TemporalServer
from tests.durable.conftest import dbos_sqlite


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


def test_dbos_run_is_one_trace(tmp_path: Path, log_dir: Path) -> None:
    """The workflow, its run's spans and every step are spans of the host's trace: the
    host's span holds the loop's, which holds the run's ``invoke_agent`` span and one span
    per step."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("host")
    tools = test_app.app.get("tools")
    app = LoopApp({"traced": attrs.evolve(tools, observers=(Tracing(tracer_provider=provider),))})
    url = dbos_sqlite(tmp_path)

    async def main() -> int:
        client = DBOSClient(system_database_url=url)
        try:
            with tracer.start_as_current_span("host request") as host:
                await DBOSLoopClient(client).start("traced", "go", id="traced")
            state = await asyncio.wait_for(DBOSLoopClient(client).result("traced"), 60)
            assert state.exit_reason == "model_complete"
            return host.get_span_context().trace_id
        finally:
            client.destroy()

    DBOS(config=dbos_config(url))
    try:
        loops = DBOSLoops(app, tracer_provider=provider)
        DBOS.launch()
        loops.listen()
        trace_id = asyncio.run(main())
    finally:
        DBOS.destroy(destroy_registry=True)
    provider.shutdown()
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {trace_id}  # one trace, the host's
    by_id = {s.context.span_id: s for s in spans}

    def parent(name: str) -> set[str]:
        return {
            by_id[s.parent.span_id].name for s in spans if s.name == name and s.parent is not None
        }

    kinds = Counter(s.name for s in spans)
    assert kinds["innerloop.loop"] == 1
    assert kinds["innerloop.model_call"] == 4
    assert kinds["innerloop.tool_call"] == 3
    assert kinds["invoke_agent innerloop"] == 1
    assert kinds["chat scripted-model-20250101"] == 4
    assert parent("innerloop.loop") == {"host request"}
    assert parent("invoke_agent innerloop") == {"innerloop.loop"}
    assert parent("chat scripted-model-20250101") == {"invoke_agent innerloop"}
    assert parent("innerloop.model_call") == {"innerloop.loop"}
    assert parent("innerloop.tool_call") == {"innerloop.loop"}
