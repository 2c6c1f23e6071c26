"""End to end: spans leave through the OTLP/HTTP exporter into a real OTLP receiver
(oteltap's native receiver on loopback) and are read back there."""

from __future__ import annotations

import asyncio
import os
import re
import socket
from pathlib import Path
from typing import Any

from opentelemetry import trace
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


def test_readme_tracing_snippet_sends_spans(make_harness: Any) -> None:
    """The tracing guide's OTLP snippet (a fragment there: it uses the host's harness),
    run as written against a receiver on loopback (the exporter's endpoint comes from the
    environment, as the comment says)."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "tracing.md").read_text()
    fence = r'```python \{test="skip"\}\n(from opentelemetry import trace\n.*?)```'
    code = re.search(fence, guide, re.S)
    assert code is not None
    port = _free_port()
    params = HarnessParams(model="scripted:m-20250101", system="s")
    namespace: dict[str, Any] = {
        "Harness": lambda p, providers, observers: make_harness(p, providers, observers=observers),
        "params": params,
        "providers": ScriptedProvider([reply("hi")]),
    }
    old = trace._TRACER_PROVIDER  # the snippet sets the global provider: put it back
    old_once = trace._TRACER_PROVIDER_SET_ONCE._done
    env = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    try:
        exec(compile(code.group(1), "tracing.md", "exec"), namespace)

        async def scenario() -> Span:
            settings = OtelTapHttpProtobufReceiverSettings(http_port=port)
            receiver = await OtelTapHttpProtobufReceiver(settings).start()
            try:
                waiting = asyncio.ensure_future(
                    receiver.await_trace(lambda s: s.name == "invoke_agent innerloop", timeout=10)
                )
                await asyncio.sleep(0)
                await namespace["harness"].run("go")
                assert await asyncio.to_thread(namespace["provider"].force_flush, 10_000)
                return await waiting
            finally:
                await receiver.stop()

        span = asyncio.run(scenario())
    finally:
        namespace["provider"].shutdown()
        trace._TRACER_PROVIDER = old
        trace._TRACER_PROVIDER_SET_ONCE._done = old_once
        if env is None:
            os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        else:
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = env
    assert _attributes(span)["innerloop.exit_reason"] == "model_complete"
