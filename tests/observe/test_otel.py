"""OpenTelemetry: the span tree, GenAI attributes, recovery events and metrics of a run,
read back from the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from innerloop import HarnessParams, ToolSpec
from innerloop.observe import Tracing
from innerloop.providers import (
    AnthropicProvider,
    AsyncioTransport,
    OpenAIProvider,
    OpenAIResponsesProvider,
)
from innerloop.testing import (
    AnthropicServer,
    FakeClock,
    Fault,
    OpenAIServer,
    Reply,
    ResponsesServer,
    ScriptedProvider,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput
from tests.observe._tools import traceparent

KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(f"echo:{args.get('x', '')}")


async def _sleepy(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    await asyncio.sleep(30)
    return ToolOutput("woke up")


OBJ = {"type": "object", "properties": {"x": {"type": "string"}}}
TOOLS = (
    ToolSpec("echo", "Echo x.", OBJ, _echo, category="search"),
    ToolSpec("sleepy", "Sleeps.", OBJ, _sleepy),
    traceparent,
)


def params(**kw: Any) -> HarnessParams:
    return HarnessParams(model="scripted:m-20250101", system="sys", tools=TOOLS, **kw)


def tracing(tp: TracerProvider, mp: MeterProvider | None = None, **kw: Any) -> Tracing:
    return Tracing(tracer_provider=tp, meter_provider=mp, **kw)


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def events(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == name]


def agent_of(spans: Sequence[ReadableSpan]) -> ReadableSpan:
    (agent,) = [s for s in spans if s.name == "invoke_agent innerloop"]
    return agent


class TestSpanTree:
    def test_agent_chat_and_tool_spans(
        self,
        make_harness: Any,
        exporter: InMemorySpanExporter,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        metric_reader: InMemoryMetricReader,
    ) -> None:
        """One invoke_agent span, a chat span per model call and an execute_tool span per
        call, children of the agent span, with the GenAI attributes."""
        script: list[Reply | Fault] = [reply("", tool_call("echo", {"x": "a"})), reply("done")]
        harness = make_harness(
            params(), ScriptedProvider(script), observers=[tracing(tracer_provider, meter_provider)]
        )
        assert harness.run_sync("go").exit_reason == "model_complete"
        spans = exporter.get_finished_spans()
        names = by_name(spans)
        assert sorted(names) == ["chat m-20250101", "execute_tool echo", "invoke_agent innerloop"]
        agent = agent_of(spans)
        chats = names["chat m-20250101"]
        (tool,) = names["execute_tool echo"]
        assert len(chats) == 2
        for child in [*chats, tool]:
            assert child.parent is not None
            assert child.parent.span_id == agent.context.span_id
            assert child.context.trace_id == agent.context.trace_id
        assert agent.parent is None
        assert dict(agent.attributes or {}) == {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "innerloop",
            "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "m-20250101",
            "innerloop.machine": "innerloop",
            "innerloop.exit_reason": "model_complete",
            "innerloop.final_state": "model_complete",
            "innerloop.turns": 2,
            "gen_ai.usage.input_tokens": agent.attributes["gen_ai.usage.input_tokens"],  # type: ignore[index]
            "gen_ai.usage.output_tokens": agent.attributes["gen_ai.usage.output_tokens"],  # type: ignore[index]
            "gen_ai.usage.cache_read.input_tokens": 0,
            "gen_ai.usage.cache_creation.input_tokens": 0,
        }
        first: dict[str, Any] = dict(chats[0].attributes or {})
        assert first["gen_ai.operation.name"] == "chat"
        assert first["gen_ai.provider.name"] == "scripted"
        assert first["gen_ai.request.model"] == "m-20250101"
        assert first["gen_ai.response.model"] == "m-20250101"
        assert first["gen_ai.response.finish_reasons"] == ("tool_use",)
        assert first["gen_ai.usage.input_tokens"] > 0
        assert first["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.usage.cache_read.input_tokens" in first
        assert "gen_ai.input.messages" not in first  # content only on opt-in
        assert chats[1].attributes["gen_ai.response.finish_reasons"] == ("end_turn",)  # type: ignore[index]
        assert dict(tool.attributes or {}) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "echo",
            "gen_ai.tool.call.id": tool.attributes["gen_ai.tool.call.id"],  # type: ignore[index]
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": "Echo x.",
            "innerloop.tool.category": "search",
            "innerloop.tool.timeout": 60.0,  # the search category's default
            "innerloop.tool.outcome": "ok",
            "innerloop.tool.duration": tool.attributes["innerloop.tool.duration"],  # type: ignore[index]
        }
        # the tool ran between the two chats
        assert chats[0].end_time <= tool.start_time <= tool.end_time <= chats[1].start_time  # type: ignore[operator]
        moves = [
            (e["innerloop.transition.source"], e["innerloop.transition.target"])
            for e in events(agent, "transition")
        ]
        assert moves[:4] == [
            ("idle", "assemble"),
            ("assemble", "normalize"),
            ("normalize", "call"),
            ("call", "stream"),
        ]
        assert moves[-1] == ("check", "model_complete")
        assert events(agent, "transition")[3]["innerloop.transition.guard"] == "call_opened"
        metrics = {
            m.name: m
            for rm in metric_reader.get_metrics_data().resource_metrics  # type: ignore[union-attr]
            for sm in rm.scope_metrics
            for m in sm.metrics
        }
        assert sorted(metrics) == ["gen_ai.client.operation.duration", "gen_ai.client.token.usage"]
        usage = metrics["gen_ai.client.token.usage"].data.data_points
        assert sorted(str(p.attributes["gen_ai.token.type"]) for p in usage) == ["input", "output"]  # type: ignore[index]
        assert {p.count for p in usage} == {2}  # type: ignore[union-attr]
        (duration,) = metrics["gen_ai.client.operation.duration"].data.data_points
        assert duration.count == 2  # type: ignore[union-attr]
        assert duration.attributes["gen_ai.operation.name"] == "chat"  # type: ignore[index]

    @pytest.mark.parametrize("route", ["sdk", "wire"])
    @pytest.mark.parametrize(
        ("server_type", "model", "response_ids"),
        [
            (AnthropicServer, "anthropic:claude-x-20250101", ["msg_0001", "msg_0003"]),
            (OpenAIServer, "openai:gpt-x-2025-01-01", ["chatcmpl-0001", "chatcmpl-0003"]),
            (ResponsesServer, "openai:gpt-x-2025-01-01", ["resp_0004", "resp_0006"]),
        ],
        ids=["anthropic", "chat", "responses"],
    )
    def test_chat_spans_carry_the_response_id(
        self,
        make_harness: Any,
        exporter: InMemorySpanExporter,
        tracer_provider: TracerProvider,
        server_type: Any,
        model: str,
        response_ids: list[str],
        route: str,
    ) -> None:
        """Each provider, on the SDK route and the wire route, hands its response id to
        the chat span (gen_ai.response.id), one per model call."""
        script: list[Reply | Fault] = [reply("", tool_call("echo", {"x": "a"})), reply("done")]
        with server_type(script) as server:
            transport = AsyncioTransport() if route == "wire" else None
            kind = {AnthropicServer: AnthropicProvider, OpenAIServer: OpenAIProvider}
            provider = kind.get(server_type, OpenAIResponsesProvider)(
                KEY, base_url=server.base_url, transport=transport
            )
            harness = make_harness(
                HarnessParams(model=model, system="sys", tools=TOOLS),
                [provider],
                observers=[tracing(tracer_provider)],
            )
            assert harness.run_sync("go").exit_reason == "model_complete"
        chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
        assert [s.attributes["gen_ai.response.id"] for s in chats] == response_ids  # type: ignore[index]

    def test_host_span_is_the_parent(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """A run started inside the host's span nests under it."""
        harness = make_harness(
            params(), ScriptedProvider([reply("hi")]), observers=[tracing(tracer_provider)]
        )
        with tracer_provider.get_tracer("host").start_as_current_span("request") as host:
            harness.run_sync("go")
        agent = agent_of(exporter.get_finished_spans())
        assert agent.parent is not None
        assert agent.parent.span_id == host.get_span_context().span_id

    def test_content_on_opt_in_without_credentials(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """capture_content=True records messages and tool arguments, scrubbed of keys."""
        script: list[Reply | Fault] = [
            reply("", tool_call("echo", {"x": f"key {KEY}"})),
            reply("done"),
        ]
        harness = make_harness(
            params(),
            ScriptedProvider(script),
            observers=[tracing(tracer_provider, capture_content=True)],
        )
        harness.run_sync(f"my key is {KEY}")
        spans = exporter.get_finished_spans()
        names = by_name(spans)
        chat = names["chat m-20250101"][0]
        assert "my key is [redacted]" in str(chat.attributes["gen_ai.input.messages"])  # type: ignore[index]
        assert "gen_ai.output.messages" in (chat.attributes or {})
        (tool,) = names["execute_tool echo"]
        assert "[redacted]" in str(tool.attributes["gen_ai.tool.call.arguments"])  # type: ignore[index]
        assert "echo:key [redacted]" in str(tool.attributes["gen_ai.tool.call.result"])  # type: ignore[index]
        for span in spans:
            assert KEY not in repr(span.to_json())


class TestRecovery:
    def test_backoff_and_fallback(
        self,
        make_harness: Any,
        clock: FakeClock,
        exporter: InMemorySpanExporter,
        tracer_provider: TracerProvider,
    ) -> None:
        """Each 429 ends its chat span with error.type rate_limited; backoff and fallback
        are agent span events with their figures; the backup model's chat span follows."""
        primary = ScriptedProvider(
            [Fault.rate_limited(retry_after=3)] + [Fault.rate_limited()] * 5, name="scripted"
        )
        backup = ScriptedProvider([reply("ok")], name="backup", dialect="openai")
        harness = make_harness(
            params(fallbacks=["backup:b-20250101"]),
            {"scripted": primary, "backup": backup},
            observers=[tracing(tracer_provider)],
        )
        assert harness.run_sync("go").exit_reason == "model_complete"
        spans = exporter.get_finished_spans()
        names = by_name(spans)
        failed = names["chat m-20250101"]
        assert len(failed) == 6
        for span in failed:
            assert span.status.status_code is StatusCode.ERROR
            assert span.attributes["error.type"] == "rate_limited"  # type: ignore[index]
            assert span.attributes["http.response.status_code"] == 429  # type: ignore[index]
        (ok,) = names["chat b-20250101"]
        assert ok.attributes["gen_ai.provider.name"] == "backup"  # type: ignore[index]
        assert ok.status.status_code is StatusCode.UNSET
        agent = agent_of(spans)
        backoffs = events(agent, "backoff")
        assert [
            (b["innerloop.backoff.attempt"], b["innerloop.backoff.delay"]) for b in backoffs
        ] == [
            (1, 3.0),
            (2, 2.0),
            (3, 4.0),
            (4, 8.0),
            (5, 16.0),
        ]
        assert backoffs[0]["innerloop.backoff.retry_after"] == 3.0
        assert events(agent, "fallback") == [
            {
                "innerloop.fallback.from_provider": "scripted",
                "innerloop.fallback.from_model": "m-20250101",
                "innerloop.fallback.to_provider": "backup",
                "innerloop.fallback.to_model": "b-20250101",
                "innerloop.fallback.reason": "rate_limited",
            }
        ]

    def test_compaction(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """A max_tokens cut compacts: the agent span has the compaction's token figures."""
        script: list[Reply | Fault] = [
            reply("part one " * 50, stop_reason="max_tokens"),
            reply("the end"),
        ]
        harness = make_harness(
            params(), ScriptedProvider(script), observers=[tracing(tracer_provider)]
        )
        assert harness.run_sync("go " * 200).exit_reason == "model_complete"
        agent = agent_of(exporter.get_finished_spans())
        (compacted,) = events(agent, "compacted")
        assert compacted["innerloop.compaction.reason"] == "max_tokens"
        assert compacted["innerloop.compaction.tokens_before"] > 0
        assert "innerloop.compaction.tokens_after" in compacted
        moves = [e["innerloop.transition.target"] for e in events(agent, "transition")]
        assert moves[:6] == ["assemble", "normalize", "call", "stream", "compact", "assemble"]

    def test_fatal_error(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """A fatal error: the chat and agent spans are errors with the category, and the
        key in the error message is in no span."""
        fault = Fault("fatal", 401, None, f"invalid x-api-key: {KEY}")
        harness = make_harness(
            params(), ScriptedProvider([fault]), observers=[tracing(tracer_provider)]
        )
        assert harness.run_sync("go").exit_reason == "failed"
        spans = exporter.get_finished_spans()
        agent = agent_of(spans)
        (chat,) = by_name(spans)["chat m-20250101"]
        assert chat.attributes["error.type"] == "fatal"  # type: ignore[index]
        assert agent.status.status_code is StatusCode.ERROR
        assert agent.attributes["error.type"] == "fatal"  # type: ignore[index]
        assert events(agent, "abort")[0]["error.type"] == "fatal"
        for span in spans:
            assert KEY not in span.to_json()

    def test_abort_during_a_tool(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """An abort while a tool runs: the tool span says aborted, the agent span has the
        abort event and ends; nothing is left open."""
        script: list[Reply | Fault] = [reply("", tool_call("sleepy", {}))]
        harness = make_harness(
            params(), ScriptedProvider(script), observers=[tracing(tracer_provider)]
        )
        run = harness.start("go")

        async def drive() -> None:
            async for ev in run.events():
                if ev.type == "transition" and ev.target == "execute":
                    asyncio.get_running_loop().call_later(0.05, run.abort, "host said stop")

        asyncio.run(drive())
        assert run.state.exit_reason == "aborted"
        spans = exporter.get_finished_spans()
        (tool,) = by_name(spans)["execute_tool sleepy"]
        assert tool.attributes["innerloop.tool.outcome"] == "aborted"  # type: ignore[index]
        agent = agent_of(spans)
        assert events(agent, "abort") == [{"innerloop.abort.reason": "host said stop"}]
        assert agent.attributes["innerloop.exit_reason"] == "aborted"  # type: ignore[index]


class TestPropagation:
    def test_traceparent_reaches_an_isolated_tool(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """An isolated tool's process receives TRACEPARENT naming its execute_tool span."""
        script: list[Reply | Fault] = [reply("", tool_call("traceparent", {})), reply("done")]
        harness = make_harness(
            params(), ScriptedProvider(script), observers=[tracing(tracer_provider)]
        )
        state = harness.run_sync("go")
        (span,) = by_name(exporter.get_finished_spans())["execute_tool traceparent"]
        ctx = span.context
        received = str(state.history[2].content[0].content)
        version, trace_id, span_id, flags = received.split("-")
        assert (version, trace_id, span_id) == ("00", f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
        assert int(flags, 16) & 1  # sampled

    def test_no_tracing_no_traceparent(self, make_harness: Any) -> None:
        """Without tracing the tool's process gets no TRACEPARENT from innerloop."""
        script: list[Reply | Fault] = [reply("", tool_call("traceparent", {})), reply("done")]
        state = make_harness(params(), ScriptedProvider(script)).run_sync("go")
        assert state.history[2].content[0].content == "none"


class TestOff:
    def test_no_sdk_no_hooks(self, make_harness: Any) -> None:
        """With the API's own providers (no SDK set up, the globals here) a run is not
        watched at all: no hooks, the tool runner's plain path, and the run unchanged."""
        off = Tracing()
        noop = Tracing(
            tracer_provider=trace.NoOpTracerProvider(), meter_provider=metrics.NoOpMeterProvider()
        )
        assert off.off
        assert noop.off
        script: list[Reply | Fault] = [reply("", tool_call("echo", {"x": "a"})), reply("done")]
        run = make_harness(params(), ScriptedProvider(script), observers=[off, noop]).start("go")
        assert off.start_run(run) is None
        state = run.run_sync()
        assert state.exit_reason == "model_complete"
        assert run._hooks == ()
        assert run.deps.tools.observers == ()
        assert state.history[2].content[0].content == "echo:a"

    def test_metrics_alone_are_recorded(
        self,
        make_harness: Any,
        meter_provider: MeterProvider,
        metric_reader: InMemoryMetricReader,
    ) -> None:
        """A host that sets up only metrics still gets them: tracing is not off."""
        watcher = Tracing(tracer_provider=trace.NoOpTracerProvider(), meter_provider=meter_provider)
        assert not watcher.off
        script: list[Reply | Fault] = [reply("done")]
        harness = make_harness(params(), ScriptedProvider(script), observers=[watcher])
        assert harness.run_sync("go").exit_reason == "model_complete"
        names = {
            m.name
            for rm in metric_reader.get_metrics_data().resource_metrics  # type: ignore[union-attr]
            for sm in rm.scope_metrics
            for m in sm.metrics
        }
        assert names == {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"}

    def test_sdk_tracer_alone_is_on(self, tracer_provider: TracerProvider) -> None:
        """An SDK tracer provider with the API's meter: spans go somewhere, so not off."""
        assert not Tracing(tracer_provider=tracer_provider).off


class TestCustomMachine:
    def test_approval_run_traced(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """A run of the approval machine: its name on the agent span, its custom state's
        transitions as span events, the tool span once the call is approved on resume."""
        from innerloop.examples import with_approval

        harness = make_harness(
            params(),
            ScriptedProvider([reply(tool_call("echo", {"x": "a"}, id="e1")), reply("done")]),
            machine=with_approval(),
            observers=[tracing(tracer_provider)],
        )
        run = harness.start("go")
        assert run.run_sync().exit_reason == "suspended"
        assert harness.resume(run, answer=True).run_sync().exit_reason == "model_complete"
        agents = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent innerloop"]
        assert [a.attributes["innerloop.machine"] for a in agents] == ["approval", "approval"]  # type: ignore[index]
        moves = [
            (dict(e.attributes or {}).get("innerloop.transition.source"),
             dict(e.attributes or {}).get("innerloop.transition.target"))
            for a in agents
            for e in a.events
            if e.name == "transition"
        ]  # fmt: skip
        assert ("stream", "approve") in moves
        assert ("approve", "suspended") in moves
        assert ("approve", "execute") in moves
        (tool,) = by_name(exporter.get_finished_spans())["execute_tool echo"]
        assert tool.attributes["innerloop.tool.outcome"] == "ok"  # type: ignore[index]


class TestTransitionsOption:
    def _agent(
        self, make_harness: Any, exporter: InMemorySpanExporter, tp: TracerProvider, mode: str
    ) -> ReadableSpan:
        script: list[Reply | Fault] = [reply("", tool_call("echo", {"x": "a"})), reply("done")]
        observer = tracing(tp, transitions=mode)
        harness = make_harness(params(), ScriptedProvider(script), observers=[observer])
        assert harness.run_sync("go").exit_reason == "model_complete"
        return agent_of(exporter.get_finished_spans())

    def test_summary_is_one_turn_event_per_turn(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """transitions="summary": no transition events; a turn event per turn listing its
        states and the guards that chose them, the first one from idle, the last one
        ending at the final state."""
        agent = self._agent(make_harness, exporter, tracer_provider, "summary")
        assert events(agent, "transition") == []
        assert events(agent, "turn") == [
            {
                "innerloop.turn.states": (
                    "idle",
                    "assemble",
                    "normalize",
                    "call",
                    "stream",
                    "execute",
                    "check",
                    "assemble",
                ),
                "innerloop.turn.guards": ("", "", "", "call_opened", "has_tool_calls", "", ""),
            },
            {
                "innerloop.turn.states": (
                    "assemble",
                    "normalize",
                    "call",
                    "stream",
                    "check",
                    "model_complete",
                ),
                "innerloop.turn.guards": ("", "", "call_opened", "", "model_finished"),
            },
        ]
        assert len(by_name(exporter.get_finished_spans())["chat m-20250101"]) == 2

    def test_off_records_no_transition(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        agent = self._agent(make_harness, exporter, tracer_provider, "off")
        assert [e.name for e in agent.events] == []
        assert len(by_name(exporter.get_finished_spans())["execute_tool echo"]) == 1

    def test_an_unknown_mode_is_refused(self, tracer_provider: TracerProvider) -> None:
        with pytest.raises(ValueError, match="transitions must be 'events', 'summary' or 'off'"):
            tracing(tracer_provider, transitions="some")
