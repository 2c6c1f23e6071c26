"""OpenTelemetry of machines inside machines: a child run's ``invoke_agent`` span nests under
the parent's span of the state (child state, fan-out, handoff) or of the tool call (an
agent tool) that ran it, read back from the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from innerloop import Child, HarnessParams, agent_tool, tool
from innerloop.fsm import (
    DEFAULT_SPEC,
    MachineSpec,
    Run,
    StateSpec,
    child_handler,
    fan_out_handler,
    handoff_handler,
    with_child_state,
)
from innerloop.fsm._spec import Handler
from innerloop.observe import Tracing
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.testing import AnthropicServer, OpenAIServer, ScriptedProvider, reply, tool_call

Tree = tuple[str, tuple[Any, ...]]


def tree(spans: Sequence[ReadableSpan]) -> tuple[Tree, ...]:
    """The spans as (name, children) from the roots down, each level in start order (a
    fan-out's branches by their path)."""
    below: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        below.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def level(parent: int | None) -> tuple[Tree, ...]:
        spans = sorted(
            below.get(parent, []),
            key=lambda s: (s.start_time, str((s.attributes or {}).get("innerloop.child.path"))),
        )
        return tuple((s.name, level(s.context.span_id)) for s in spans)

    return level(None)


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def attributes(span: ReadableSpan, *prefixes: str) -> dict[str, Any]:
    return {k: v for k, v in (span.attributes or {}).items() if k.startswith(prefixes)}


@tool
async def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: 545,000 people"


def kid(name: str, *answers: Any, tools: Sequence[Any] = ()) -> Child[Any]:
    provider = ScriptedProvider(list(answers), name="kid")
    return Child(name, HarnessParams(model="kid:k", tools=tools), providers={"kid": provider})


def machine(
    state: str, handler: Handler, *, source: str = "idle", target: str = "assemble"
) -> MachineSpec:
    return with_child_state(
        DEFAULT_SPEC, StateSpec(state), handler, source=source, target=target, on_failure="failed"
    ).renamed(f"with-{state}")


class TestChildState:
    def test_child_under_the_state_span(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """A child state is a span under the run's; the child's invoke_agent span is under
        it, with the child's own chat and tool spans beneath it."""
        research = kid(
            "research",
            reply(tool_call("lookup", {"city": "Lisbon"}, id="k1")),
            reply("Lisbon: 545,000."),
            tools=[lookup],
        )
        harness = make_harness(
            HarnessParams(model="scripted:m"),
            ScriptedProvider([reply("About 545,000.")]),
            machine=machine("research", child_handler(research)),
            observers=[Tracing(tracer_provider=tracer_provider)],
        )
        assert harness.run_sync("Lisbon?").exit_reason == "model_complete"
        spans = exporter.get_finished_spans()
        assert tree(spans) == (
            (
                "invoke_agent innerloop",
                (
                    (
                        "state research",
                        (
                            (
                                "invoke_agent research",
                                (("chat k", ()), ("execute_tool lookup", ()), ("chat k", ())),
                            ),
                        ),
                    ),
                    ("chat m", ()),
                ),
            ),
        )
        (state,) = named(spans, "state research")
        assert dict(state.attributes or {}) == {
            "innerloop.state": "research",
            "innerloop.state.kind": "child",
            "innerloop.child.name": "research",
            "innerloop.state.outcome": "child_succeeded",
            "innerloop.transition.target": "assemble",
        }
        (child,) = named(spans, "invoke_agent research")
        assert attributes(child, "gen_ai.agent", "innerloop.child", "innerloop.exit") == {
            "gen_ai.agent.name": "research",
            "innerloop.child.path": "research",
            "innerloop.exit_reason": "model_complete",
        }
        assert {s.context.trace_id for s in spans} == {state.context.trace_id}

    def test_handoff(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """A handoff's state span holds the agent that took the conversation over."""
        writer = kid("writer", reply("Dear customer, done."))
        harness = make_harness(
            HarnessParams(model="scripted:m"),
            ScriptedProvider([reply("Notes.")]),
            machine=machine(
                "writer", handoff_handler(writer), source="check", target="model_complete"
            ),
            observers=[Tracing(tracer_provider=tracer_provider)],
        )
        assert harness.run_sync("Refund?").exit_reason == "model_complete"
        spans = exporter.get_finished_spans()
        assert tree(spans) == (
            (
                "invoke_agent innerloop",
                (
                    ("chat m", ()),
                    ("state writer", (("invoke_agent writer", (("chat k", ()),)),)),
                ),
            ),
        )
        (state,) = named(spans, "state writer")
        assert attributes(state, "innerloop.state.kind", "innerloop.transition") == {
            "innerloop.state.kind": "handoff",
            "innerloop.transition.target": "model_complete",
        }

    def test_an_abort_ends_the_state_span_at_abort(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """The parent is aborted while its child runs a tool: the child's spans end (its
        tool call aborted, its run in ``aborted``), then the state span, leaving for
        ``abort``."""
        runs: list[Run[Any]] = []

        @tool
        async def sleepy() -> str:
            """Sleeps (after asking the parent run to stop)."""
            runs[0].abort("the host stops it")
            await asyncio.sleep(30)
            return "woke up"

        research = kid("research", reply(tool_call("sleepy", {}, id="k1")), tools=[sleepy])
        harness = make_harness(
            HarnessParams(model="scripted:m"),
            ScriptedProvider([]),
            machine=machine("research", child_handler(research)),
            observers=[Tracing(tracer_provider=tracer_provider)],
        )

        async def main() -> str | None:
            runs.append(harness.start("go"))
            async for _ in runs[0].events():
                pass
            return runs[0].state.exit_reason

        assert asyncio.run(main()) == "aborted"
        spans = exporter.get_finished_spans()
        assert tree(spans) == (
            (
                "invoke_agent innerloop",
                (
                    (
                        "state research",
                        (
                            (
                                "invoke_agent research",
                                (("chat k", ()), ("execute_tool sleepy", ())),
                            ),
                        ),
                    ),
                ),
            ),
        )
        (state,) = named(spans, "state research")
        assert attributes(state, "innerloop.transition") == {"innerloop.transition.target": "abort"}
        (child,) = named(spans, "invoke_agent research")
        assert attributes(child, "innerloop.exit") == {"innerloop.exit_reason": "aborted"}
        (call,) = named(spans, "execute_tool sleepy")
        assert attributes(call, "innerloop.tool.outcome") == {"innerloop.tool.outcome": "aborted"}


class TestFanOut:
    def test_branches_are_sibling_spans(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """A fan-out of two: one state span, the two branches' invoke_agent spans side by
        side under it, each with its path and its own chat span."""
        web = kid("web", reply("Lisbon: sunny"), reply("Porto: sunny"))
        harness = make_harness(
            HarnessParams(model="scripted:m"),
            ScriptedProvider([reply("Both sunny.")]),
            machine=machine("survey", fan_out_handler(web, lambda s: ["Lisbon", "Porto"])),
            observers=[Tracing(tracer_provider=tracer_provider)],
        )
        assert harness.run_sync("Weather?").exit_reason == "model_complete"
        spans = exporter.get_finished_spans()
        branch = ("invoke_agent web", (("chat k", ()),))
        assert tree(spans) == (
            (
                "invoke_agent innerloop",
                (("state survey", (branch, branch)), ("chat m", ())),
            ),
        )
        (state,) = named(spans, "state survey")
        assert attributes(state, "innerloop.state.kind", "innerloop.child") == {
            "innerloop.state.kind": "fan_out",
            "innerloop.child.name": "web",
        }
        branches = named(spans, "invoke_agent web")
        assert sorted(str((b.attributes or {})["innerloop.child.path"]) for b in branches) == [
            "web#1",
            "web#2",
        ]
        assert {b.parent.span_id for b in branches} == {state.context.span_id}  # type: ignore[union-attr]

    def test_different_children_are_sibling_spans_named_on_the_state(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """A fan-out over two different children: the state span names both, and each
        child's invoke_agent span sits under it with its own path."""
        web, code = kid("web", reply("sunny")), kid("code", reply("main.py"))
        harness = make_harness(
            HarnessParams(model="scripted:m"),
            ScriptedProvider([reply("Done.")]),
            machine=machine("survey", fan_out_handler([web, code])),
            observers=[Tracing(tracer_provider=tracer_provider)],
        )
        assert harness.run_sync("Go").exit_reason == "model_complete"
        spans = exporter.get_finished_spans()
        (state,) = named(spans, "state survey")
        assert attributes(state, "innerloop.child") == {"innerloop.child.name": "web,code"}
        paths = {
            str((s.attributes or {})["innerloop.child.path"]): s.parent.span_id  # type: ignore[union-attr]
            for s in [*named(spans, "invoke_agent web"), *named(spans, "invoke_agent code")]
        }
        assert paths == {"web": state.context.span_id, "code": state.context.span_id}


class TestAgentTool:
    def test_child_under_the_tool_call(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """An agent tool's child (the OpenAI SDK) nests under the execute_tool span of the
        call that ran it (the parent on the Anthropic SDK), path ``name[call id]``."""
        parent_script = [
            reply(tool_call("forecaster", {"task": "Lisbon tomorrow?"}, id="toolu_01")),
            reply("Sunny."),
        ]
        with AnthropicServer(parent_script) as claude, OpenAIServer([reply("Sunny.")]) as gpt:
            forecaster = Child(
                "forecaster",
                HarnessParams(model="openai:gpt-4o-2024-08-06"),
                providers={"openai": OpenAIProvider("sk-test", base_url=gpt.base_url)},
            )
            harness = make_harness(
                HarnessParams(
                    model="anthropic:claude-sonnet-4-5-20250929",
                    tools=[agent_tool(forecaster, "Ask the forecaster.")],
                ),
                [AnthropicProvider("sk-ant-test", base_url=claude.base_url)],
                observers=[Tracing(tracer_provider=tracer_provider)],
            )
            assert harness.run_sync("Rain?").exit_reason == "model_complete"
        spans = exporter.get_finished_spans()
        assert tree(spans) == (
            (
                "invoke_agent innerloop",
                (
                    ("chat claude-sonnet-4-5-20250929", ()),
                    (
                        "execute_tool forecaster",
                        (("invoke_agent forecaster", (("chat gpt-4o-2024-08-06", ()),)),),
                    ),
                    ("chat claude-sonnet-4-5-20250929", ()),
                ),
            ),
        )
        (child,) = named(spans, "invoke_agent forecaster")
        assert attributes(child, "innerloop.child", "gen_ai.provider") == {
            "innerloop.child.path": "forecaster[toolu_01]",
            "gen_ai.provider.name": "openai",
        }

    def test_two_calls_in_parallel_and_a_grandchild(
        self, make_harness: Any, exporter: InMemorySpanExporter, tracer_provider: TracerProvider
    ) -> None:
        """Two agent-tool calls in one turn each hold their own child; a child state
        whose child calls an agent tool gives the grandchild its whole path."""
        helper = kid("helper", reply("a"), reply("b"), reply("c"))
        inner = kid(
            "inner",
            reply(tool_call("helper", {"task": "x"}, id="h1")),
            reply("inner done"),
            tools=[agent_tool(helper, "Help.")],
        )
        harness = make_harness(
            HarnessParams(model="scripted:m", tools=[agent_tool(helper, "Help.")]),
            ScriptedProvider(
                [
                    reply(
                        tool_call("helper", {"task": "1"}, id="c1"),
                        tool_call("helper", {"task": "2"}, id="c2"),
                    ),
                    reply("done"),
                ]
            ),
            machine=machine("inner", child_handler(inner)),
            observers=[Tracing(tracer_provider=tracer_provider)],
        )
        assert harness.run_sync("go").exit_reason == "model_complete"
        spans = exporter.get_finished_spans()
        helper_span = ("invoke_agent helper", (("chat k", ()),))
        call = ("execute_tool helper", (helper_span,))
        assert tree(spans) == (
            (
                "invoke_agent innerloop",
                (
                    (
                        "state inner",
                        (("invoke_agent inner", (("chat k", ()), call, ("chat k", ()))),),
                    ),
                    ("chat m", ()),
                    call,
                    call,
                    ("chat m", ()),
                ),
            ),
        )
        paths = sorted(
            str((s.attributes or {})["innerloop.child.path"])
            for s in named(spans, "invoke_agent helper")
        )
        assert paths == ["helper[c1]", "helper[c2]", "inner/helper[h1]"]
        for span in named(spans, "invoke_agent helper"):
            (tool_span,) = [s for s in spans if s.context.span_id == span.parent.span_id]  # type: ignore[union-attr]
            call_id = str((span.attributes or {})["innerloop.child.path"])[-3:-1]
            assert (tool_span.attributes or {})["gen_ai.tool.call.id"] == call_id
