"""End to end: spans leave through the OTLP/HTTP exporter into a real OTLP receiver
(oteltap's native receiver on loopback) and are read back there."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from oteltap import OtelTapHttpProtobufReceiver, OtelTapHttpProtobufReceiverSettings

from innerloop import HarnessParams
from innerloop.observe import Tracing
from innerloop.testing import Fault, Reply, ScriptedProvider, reply, tool_call
from tests.observe.test_otel import TOOLS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _attributes(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        out[kv.key] = getattr(value, kind) if kind else None
    return out


def test_spans_reach_a_real_otlp_receiver(make_harness: Any) -> None:
    """The run's three kinds of span arrive over OTLP/HTTP, in one trace, with their
    GenAI attributes and the agent span's transition events."""
    port = _free_port()
    provider = TracerProvider(resource=Resource.create({"service.name": "innerloop-test"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    script: list[Reply | Fault] = [reply("", tool_call("echo", {"x": "a"})), reply("done")]
    harness = make_harness(
        HarnessParams(model="scripted:m-20250101", system="s", tools=TOOLS),
        ScriptedProvider(script),
        observers=[Tracing(tracer_provider=provider)],
    )

    async def scenario() -> dict[str, Span]:
        settings = OtelTapHttpProtobufReceiverSettings(http_port=port)
        receiver = await OtelTapHttpProtobufReceiver(settings).start()
        got: dict[str, Span] = {}
        wanted = {"invoke_agent innerloop", "execute_tool echo", "chat m-20250101"}

        async def collect() -> None:  # subscribed before anything is sent
            async for span in receiver.stream_traces():
                got.setdefault(span.name, span)
                if wanted <= got.keys():
                    return

        collector = asyncio.ensure_future(collect())
        try:
            await asyncio.sleep(0)
            state = await harness.run("go")
            assert state.exit_reason == "model_complete"
            assert await asyncio.to_thread(provider.force_flush, 10_000)
            await asyncio.wait_for(collector, 10)
            return got
        finally:
            collector.cancel()
            await receiver.stop()

    try:
        spans = asyncio.run(scenario())
    finally:
        provider.shutdown()
    agent, tool, chat = (
        spans["invoke_agent innerloop"],
        spans["execute_tool echo"],
        spans["chat m-20250101"],
    )
    assert {tool.trace_id, chat.trace_id} == {agent.trace_id}
    assert tool.parent_span_id == agent.span_id
    assert chat.parent_span_id == agent.span_id
    assert _attributes(agent)["innerloop.exit_reason"] == "model_complete"
    assert _attributes(chat)["gen_ai.request.model"] == "m-20250101"
    assert _attributes(chat)["gen_ai.operation.name"] == "chat"
    assert _attributes(tool)["gen_ai.tool.name"] == "echo"
    assert _attributes(tool)["innerloop.tool.outcome"] == "ok"
    assert [e.name for e in agent.events].count("transition") == 12
