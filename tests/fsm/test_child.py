"""Machines inside machines: child runs, agent tools, child states, fan-out, handoffs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from innerloop import Child, HarnessParams, SpendBudget, agent_tool, tool
from innerloop.events import (
    ChildEvent,
    Event,
    Finished,
    ModelResponseEvent,
    ToolExecuted,
    ToolUseComplete,
    Transition,
)
from innerloop.fsm import (
    DEFAULT_SPEC,
    Handler,
    HarnessState,
    MachineSpec,
    StateSpec,
    child_handler,
    compile_spec,
    fan_out_handler,
    handoff_handler,
    with_child_state,
)
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.providers._normalize import WireRequest
from innerloop.testing import (
    AnthropicServer,
    FakeProvider,
    OpenAIServer,
    Reply,
    ScriptedProvider,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext

ANTHROPIC_KEY = "sk-ant-api03-nested-0123456789abcdef"
OPENAI_KEY = "sk-proj-nested-0123456789abcdef"
CLAUDE = "anthropic:claude-sonnet-4-5-20250929"
GPT = "openai:gpt-4o-2024-08-06"


def _last_user_text(request: WireRequest) -> str:
    """The text of the last user message of an Anthropic-dialect request."""
    content = request.payload["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def echo_provider(name: str) -> FakeProvider:
    """Answers each request with ``answer: <its last user text>`` (order-independent)."""
    return FakeProvider(lambda r: reply(f"answer: {_last_user_text(r)}"), name=name)


async def _collect(run: Any) -> list[Event]:
    return [e async for e in run.events()]


def _paths(events: Sequence[Event]) -> list[str]:
    return list(dict.fromkeys(e.path for e in events if isinstance(e, ChildEvent)))


def _child_finals(events: Sequence[Event]) -> dict[str, str]:
    return {
        e.path: e.event.exit_reason
        for e in events
        if isinstance(e, ChildEvent) and isinstance(e.event, Finished)
    }


@tool
async def block() -> str:
    """Blocks until cancelled."""
    await asyncio.Event().wait()
    return "never"


async def _abort_once_the_child_calls(run: Any) -> list[Event]:
    """Read the run's events, aborting it when a child's tool call is complete."""
    seen: list[Event] = []
    async for event in run.events():
        seen.append(event)
        if isinstance(event, ChildEvent) and isinstance(event.event, ToolUseComplete):
            run.abort("host stop")
    return seen


def _parent(make_harness: Any, spec: MachineSpec, *answers: Any) -> Any:
    """A harness on ``spec`` whose own model gives ``answers``."""
    return make_harness(
        HarnessParams(model="scripted:m"), ScriptedProvider(list(answers)), machine=spec
    )


# -- an agent as a tool --------------------------------------------------------------------


def test_agent_tool_over_loopback_streams_child_and_rolls_up_usage(make_harness: Any) -> None:
    """A parent on the Anthropic SDK calls an agent tool whose child runs on the OpenAI
    SDK (two loopback servers): the child's events come through the parent's stream
    under its path, its answer is the tool result, its usage is added to the parent's."""
    parent_script = [
        reply(tool_call("forecaster", {"task": "Weather in Lisbon?"}, id="toolu_01")),
        reply("It is sunny in Lisbon."),
    ]
    with AnthropicServer(parent_script) as a, OpenAIServer([reply("Sunny, 24 C.")]) as o:
        child = Child(
            "forecaster",
            HarnessParams(model=GPT),
            providers={"openai": OpenAIProvider(OPENAI_KEY, base_url=o.base_url)},
        )
        params = HarnessParams(model=CLAUDE, tools=[agent_tool(child, "Ask the forecaster.")])
        harness = make_harness(params, [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)])
        run = harness.start("Weather?")
        events = asyncio.run(_collect(run))
        sent_to_child = o.requests[0].body["messages"]
        second_parent_call = a.requests[1].body["messages"]
    state = run.state
    assert state.exit_reason == "model_complete"
    assert _paths(events) == ["forecaster[toolu_01]"]
    assert _child_finals(events) == {"forecaster[toolu_01]": "model_complete"}
    assert sent_to_child[-1]["content"] == "Weather in Lisbon?"
    result = second_parent_call[-1]["content"][0]
    assert (result["type"], result["content"]) == ("tool_result", "Sunny, 24 C.")
    child_usage = next(
        e.event.usage for e in events if isinstance(e, ChildEvent) and isinstance(e.event, Finished)
    )
    own = [e for e in events if isinstance(e, Finished)][-1]
    assert child_usage.total_tokens > 0
    # the parent's totals: its two answers plus the child's
    answers = [e.response.usage.total_tokens for e in events if isinstance(e, ModelResponseEvent)]
    assert len(answers) == 2
    assert own.usage.total_tokens == child_usage.total_tokens + sum(answers)
    assert_valid_history(state.history)


def test_agent_tools_in_parallel_beside_a_plain_tool_with_eager_dispatch(
    make_harness: Any,
) -> None:
    """Two agent calls and a plain call in one turn, dispatched eagerly: each child runs
    under its own path and the results come back in call order."""

    @tool
    async def clock_time() -> str:
        """The time."""
        return "noon"

    north = Child("north", HarnessParams(model="n:m"), providers={"n": echo_provider("n")})
    south = Child("south", HarnessParams(model="s:m"), providers={"s": echo_provider("s")})
    model = ScriptedProvider(
        [
            reply(
                tool_call("north", {"task": "rain?"}, id="c1"),
                tool_call("clock_time", {}, id="c2"),
                tool_call("south", {"task": "wind?"}, id="c3"),
            ),
            reply("Done."),
        ]
    )
    params = HarnessParams(
        model="scripted:m",
        tools=[agent_tool(north, "North."), clock_time, agent_tool(south, "South.")],
        eager_tools=True,
    )
    run = make_harness(params, model).start("Report.")
    events = asyncio.run(_collect(run))
    assert run.state.exit_reason == "model_complete"
    assert sorted(_paths(events)) == ["north[c1]", "south[c3]"]
    results = run.state.history[2].tool_results
    assert [(r.tool_use_id, r.content) for r in results] == [
        ("c1", "answer: rain?"),
        ("c2", "noon"),
        ("c3", "answer: wind?"),
    ]


def test_agent_tool_timeout_aborts_the_child_validly(make_harness: Any) -> None:
    """An agent tool past its timeout: the child is aborted (its blocked tool cancelled,
    its run ended in ``aborted``), and the parent gets a timed-out tool result."""
    cancelled: list[bool] = []

    @tool
    async def wait_forever() -> str:
        """Never returns."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    kid = ScriptedProvider([reply(tool_call("wait_forever", {}, id="k1"))], name="kid")
    child = Child(
        "slow", HarnessParams(model="kid:m", tools=[wait_forever]), providers={"kid": kid}
    )
    model = ScriptedProvider(
        [reply(tool_call("slow", {"task": "go"}, id="p1")), reply("Gave up on it.")]
    )
    params = HarnessParams(
        model="scripted:m", tools=[agent_tool(child, "Slow agent.", timeout=0.05)]
    )
    run = make_harness(params, model).start("Try.")
    events = asyncio.run(_collect(run))
    assert run.state.exit_reason == "model_complete"
    assert cancelled == [True]
    assert _child_finals(events) == {"slow[p1]": "aborted"}
    result = run.state.history[2].tool_results[0]
    assert result.is_error
    assert "timed out" in result.content
    assert_valid_history(run.state.history)


def test_parent_abort_cancels_the_child_in_an_agent_tool(make_harness: Any) -> None:
    """The host aborts the parent while the child's tool runs: the child ends in
    ``aborted`` (its last events still come through), then the parent does; both
    histories stay valid."""
    kid = ScriptedProvider([reply(tool_call("block", {}, id="k1"))], name="kid")
    child = Child("worker", HarnessParams(model="kid:m", tools=[block]), providers={"kid": kid})
    model = ScriptedProvider([reply(tool_call("worker", {"task": "go"}, id="p1"))])
    params = HarnessParams(model="scripted:m", tools=[agent_tool(child, "Worker.")])
    run = make_harness(params, model).start("Go.")

    events = asyncio.run(_abort_once_the_child_calls(run))
    assert run.state.exit_reason == "aborted"
    child_moves = [
        (e.event.source, e.event.target)
        for e in events
        if isinstance(e, ChildEvent) and isinstance(e.event, Transition)
    ]
    assert child_moves[-1] == ("abort", "aborted")
    assert child_moves[-2][1] == "abort"  # from wherever the abort found it
    assert _child_finals(events) == {"worker[p1]": "aborted"}
    assert_valid_history(run.state.history)


def test_agent_tool_outside_a_machine_says_so() -> None:
    """Called by hand (no run), the agent tool says what it needs."""
    child = Child("x", HarnessParams(model="kid:m"))
    spec = agent_tool(child, "X.")
    ctx = ToolContext(HarnessParams(model="a:m"), HarnessState(), "t1")
    with pytest.raises(Exception, match="runs its child inside a machine's run"):
        asyncio.run(spec.handler({"task": "hi"}, ctx))  # type: ignore[arg-type]


def test_child_spend_budget_counts_against_the_parent(make_harness: Any) -> None:
    """The parent's spend budget caps its child: a child whose answer takes the parent
    past its budget is aborted, and the parent ends ``budget_exceeded``."""
    kid = ScriptedProvider(
        [reply(tool_call("noop", {}, id="k1")), reply("never reached")], name="kid"
    )

    @tool
    async def noop() -> str:
        """Nothing."""
        return "ok"

    child = Child("spender", HarnessParams(model="kid:m", tools=[noop]), providers={"kid": kid})
    model = ScriptedProvider([reply(tool_call("spender", {"task": "spend"}, id="p1"))])
    params = HarnessParams(
        model="scripted:m",
        tools=[agent_tool(child, "Spends.")],
        spend_budget=SpendBudget(max_tokens=20),
    )
    run = make_harness(params, model).start("Go.")
    events = asyncio.run(_collect(run))
    # the parent's answer (15 tokens) leaves 5; the child's first answer (15) spends them
    assert _child_finals(events) == {"spender[p1]": "budget_exceeded"}
    assert run.state.exit_reason == "budget_exceeded"
    assert run.state.usage.total_tokens == 30
    assert len(kid.requests) == 1  # the child's second answer was never asked for


# -- a machine as a state --------------------------------------------------------------------


def _nested(
    state: str, handler: Handler, *, source: str = "idle", target: str = "assemble"
) -> MachineSpec:
    """The default machine with ``state`` (running ``handler``) on ``source -> target``,
    its failures going to ``failed``."""
    return with_child_state(
        DEFAULT_SPEC,
        StateSpec(state, doc=f"runs {state}"),
        handler,
        source=source,
        target=target,
        on_failure="failed",
    ).renamed(f"nested_{state}")


def _research_spec(child: Child[Any]) -> MachineSpec:
    return _nested("research", child_handler(child))


def test_child_state_success_goes_on_to_the_next_state(make_harness: Any) -> None:
    """``research -> assemble [child_succeeded]``: the child's answer is in the parent's
    history (and notes) before the parent's model is called."""
    child = Child("research", HarnessParams(model="kid:m"), providers={"kid": echo_provider("kid")})
    model = ScriptedProvider([reply("Final report.")])
    harness = make_harness(HarnessParams(model="scripted:m"), model, machine=_research_spec(child))
    run = harness.start("Lisbon facts")
    events = asyncio.run(_collect(run))
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert moves[:2] == [("idle", "research", None), ("research", "assemble", "child_succeeded")]
    assert run.state.exit_reason == "model_complete"
    assert run.state.history[0].content[-1].text == "[research] answer: Lisbon facts"
    assert run.state.notes["children"]["research"]["output"] == "answer: Lisbon facts"
    sent = model.requests[0].payload["messages"]
    assert "[research] answer: Lisbon facts" in str(sent)
    assert_valid_history(run.state.history)


def test_child_state_failure_takes_the_recovery_edge(make_harness: Any) -> None:
    """A child that ends in ``max_turns_exceeded`` takes ``research -> failed``."""

    @tool
    async def look() -> str:
        """Look."""
        return "more"

    kid = ScriptedProvider([reply(tool_call("look", {}, id="k1"))], name="kid")
    child = Child(
        "research",
        HarnessParams(model="kid:m", tools=[look], max_turns=1),
        providers={"kid": kid},
    )
    harness = _parent(make_harness, _research_spec(child))
    run = harness.start("Lisbon facts")
    events = asyncio.run(_collect(run))
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert moves == [("idle", "research", None), ("research", "failed", None)]
    assert run.state.notes["children"]["research"]["exit_reason"] == "max_turns_exceeded"
    assert len(run.state.history) == 1


@pytest.mark.parametrize("kind", ["state", "handoff"])
def test_child_state_parent_abort_aborts_the_child(make_harness: Any, kind: str) -> None:
    """An abort of the parent while its child state (or a handoff) runs: the child ends
    ``aborted`` and the parent takes ``research -> abort [abort_requested]`` (``writer
    -> abort [abort_requested]``)."""
    kid = ScriptedProvider([reply(tool_call("block", {}, id="k1"))], name="kid")
    name = "research" if kind == "state" else "writer"
    child = Child(name, HarnessParams(model="kid:m", tools=[block]), providers={"kid": kid})
    spec = _research_spec(child) if kind == "state" else _handoff_spec(child)
    parent = ScriptedProvider([] if kind == "state" else [reply("Notes.")])
    harness = make_harness(HarnessParams(model="scripted:m"), parent, machine=spec)
    run = harness.start("Lisbon facts")

    events = asyncio.run(_abort_once_the_child_calls(run))
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert moves[-3:] == [
        (
            "check" if kind == "handoff" else "idle",
            name,
            "model_finished" if kind == "handoff" else None,
        ),
        (name, "abort", "abort_requested"),
        ("abort", "aborted", "abort_requested"),
    ]
    assert _child_finals(events) == {name: "aborted"}
    assert_valid_history(run.state.history)


def test_child_state_edges_are_drawn_and_checked() -> None:
    """The child state's edges are ordinary edges: compiled, listed, drawn."""
    from innerloop.diagrams import build_diagram, to_mermaid

    child = Child("research", HarnessParams(model="kid:m"))
    spec = _research_spec(child)
    machine = compile_spec(spec)
    assert [str(t) for t in spec.transitions_from("research")] == [
        "research -> abort [abort_requested]",
        "research -> suspended [interrupted]",
        "research -> assemble [child_succeeded]",
        "research -> failed",
    ]
    text = to_mermaid(build_diagram(machine))
    assert "research --> assemble" in text
    assert "research --> failed" in text


def test_child_rejects_unknown_success_state() -> None:
    """A success state the child's machine lacks is refused at once."""
    with pytest.raises(ValueError, match="not final states of machine 'innerloop'"):
        Child("x", HarnessParams(model="kid:m"), success=("model_done",))


# -- fan-out -----------------------------------------------------------------------------------


def _fan_out_spec(child: Child[Any], limit: int) -> MachineSpec:
    """One child per line of the request."""
    lines = fan_out_handler(child, lambda s: s.history[-1].text.splitlines(), limit=limit)
    return _nested("survey", lines)


def test_fan_out_runs_children_concurrently_and_joins_in_order(make_harness: Any) -> None:
    """Three children, at most two at a time: the answers join in input order."""
    running = 0
    peak = 0
    release = asyncio.Event()

    async def answer(request: WireRequest) -> Reply:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if peak >= 2:
            release.set()
        await release.wait()
        running -= 1
        return reply(f"answer: {_last_user_text(request)}")

    child = Child(
        "web", HarnessParams(model="kid:m"), providers={"kid": FakeProvider(answer, name="kid")}
    )
    model = ScriptedProvider([reply("Summary.")])
    harness = make_harness(
        HarnessParams(model="scripted:m"), model, machine=_fan_out_spec(child, limit=2)
    )
    run = harness.start("alpha\nbeta\ngamma")
    events = asyncio.run(_collect(run))
    assert peak == 2
    assert sorted(_paths(events)) == ["web#1", "web#2", "web#3"]
    assert run.state.history[0].content[-1].text == (
        "[web#1] answer: alpha\n[web#2] answer: beta\n[web#3] answer: gamma"
    )
    outputs = [c["output"] for c in run.state.notes["children"]["web"]]
    assert outputs == ["answer: alpha", "answer: beta", "answer: gamma"]
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert ("survey", "assemble", "child_succeeded") in moves
    assert run.state.exit_reason == "model_complete"


def test_fan_out_one_failure_takes_the_failure_edge(make_harness: Any) -> None:
    """One child that fails (a fatal provider error) sends the fan-out to ``failed``;
    the others still ran to their end."""
    from innerloop.testing import Fault

    def answer(request: WireRequest) -> Any:
        text = _last_user_text(request)
        return Fault.fatal() if text == "bad" else reply(f"answer: {text}")

    child = Child(
        "web", HarnessParams(model="kid:m"), providers={"kid": FakeProvider(answer, name="kid")}
    )
    harness = _parent(make_harness, _fan_out_spec(child, 3))
    run = harness.start("good\nbad")
    events = asyncio.run(_collect(run))
    assert _child_finals(events) == {"web#1": "model_complete", "web#2": "failed"}
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert moves == [("idle", "survey", None), ("survey", "failed", None)]


def test_fan_out_parent_abort_aborts_every_child(make_harness: Any) -> None:
    """An abort during a fan-out aborts every running child; the parent takes
    ``survey -> abort [abort_requested]``."""
    gate = asyncio.Event()

    async def answer(request: WireRequest) -> Reply:
        await gate.wait()
        return reply("never")

    child = Child(
        "web", HarnessParams(model="kid:m"), providers={"kid": FakeProvider(answer, name="kid")}
    )
    harness = _parent(make_harness, _fan_out_spec(child, 2))
    run = harness.start("a\nb")

    async def drive() -> list[Event]:
        seen: list[Event] = []
        started = 0
        async for event in run.events():
            seen.append(event)
            if (
                isinstance(event, ChildEvent)
                and isinstance(event.event, Transition)
                and event.event.target == "call"
            ):
                started += 1
                if started == 2:
                    run.abort("host stop")
        return seen

    events = asyncio.run(drive())
    assert _child_finals(events) == {"web#1": "aborted", "web#2": "aborted"}
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert moves[1] == ("survey", "abort", "abort_requested")
    assert run.state.exit_reason == "aborted"


# -- handoffs ---------------------------------------------------------------------------------


def _handoff_spec(writer: Child[Any]) -> MachineSpec:
    """When the first agent answers, the writer takes over the conversation."""
    return _nested("writer", handoff_handler(writer), source="check", target="model_complete")


def test_handoff_keeps_one_valid_history_across_providers(make_harness: Any) -> None:
    """An Anthropic agent researches with a tool, then hands the conversation to a
    writer on OpenAI (other params): the writer is sent the whole history in its
    dialect, and its answer ends the run, in one valid history."""

    @tool
    async def search(q: str) -> str:
        """Search."""
        return f"found {q}"

    with (
        AnthropicServer(
            [reply(tool_call("search", {"q": "lisbon"}, id="toolu_01")), reply("Notes: sunny.")]
        ) as a,
        OpenAIServer([reply("Lisbon is sunny today.")]) as o,
    ):
        writer = Child(
            "writer",
            HarnessParams(model=GPT, system="You write the final text."),
            providers={"openai": OpenAIProvider(OPENAI_KEY, base_url=o.base_url)},
        )
        params = HarnessParams(model=CLAUDE, tools=[search])
        harness = make_harness(
            params,
            [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)],
            machine=_handoff_spec(writer),
        )
        run = harness.start("Write about Lisbon.")
        events = asyncio.run(_collect(run))
        sent = o.requests[0].body["messages"]
    state = run.state
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert moves[-2:] == [
        ("check", "writer", "model_finished"),
        ("writer", "model_complete", "child_succeeded"),
    ]
    roles = [m["role"] for m in sent]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert state.history[-1].text == "Lisbon is sunny today."
    assert state.notes["children"]["writer"]["exit_reason"] == "model_complete"
    assert_valid_history(state.history)


def test_handoff_failure_takes_the_failure_edge(make_harness: Any) -> None:
    """A writer that fails sends the run to ``failed``."""
    from innerloop.testing import Fault

    writer = Child(
        "writer",
        HarnessParams(model="w:m"),
        providers={"w": FakeProvider(lambda r: Fault.fatal(), name="w")},
    )
    harness = _parent(make_harness, _handoff_spec(writer), reply("Notes."))
    run = harness.start("Write.")
    events = asyncio.run(_collect(run))
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert moves[-1] == ("writer", "failed", None)
    assert_valid_history(run.state.history)


def test_child_events_round_trip_through_the_event_log_form() -> None:
    """A nested child event keeps its path and inner event through ``to_dict``."""
    event = ChildEvent("research/web#2", Transition("call", "stream", "call_opened"))
    assert Event.from_dict(event.to_dict()) == event
    assert event.to_dict()["event"]["type"] == "transition"


# -- interrupts inside children --------------------------------------------------------------


ROOT = Path(__file__).resolve().parents[2]


def _process(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.fsm.nested_process", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_an_approval_inside_a_child_suspends_the_parent_and_resumes_in_a_new_process(
    tmp_path: Path,
) -> None:
    """The child (on the approval machine) asks to approve a call: the whole run
    suspends (``clean -> suspended [interrupted]``), stored in SQLite; a new process
    resumes the parent with the answer, which lands in the child: the call runs, the
    child answers, and the parent goes on ``clean -> assemble`` to its own answer."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    asked = _process("start", url)
    assert asked == {
        "exit_reason": "suspended",
        "kind": "approval",
        "state": "clean",
        "payload": {"calls": [{"id": "k1", "name": "delete_file", "input": {"path": "build.log"}}]},
    }
    ended = _process("resume", url)
    assert ended["exit_reason"] == "model_complete"
    assert ended["history"] == [
        "Remove build.log[cleaner] Deleted build.log.",
        "build.log is gone.",
    ]
    assert ended["child"]["exit_reason"] == "model_complete"
    assert ended["suspended_left"] is None


def test_a_question_inside_a_handoff_suspends_and_resumes_in_memory(make_harness: Any) -> None:
    """A tool of the writer (a handoff) asks a question: the parent suspends
    (``writer -> suspended [interrupted]``); ``resume(run, answer)`` makes the answer
    that call's result in the writer's run, whose history becomes the parent's."""

    @tool
    async def ask_tone(ctx: ToolContext) -> str:
        """Ask the person which tone to write in."""
        ctx.interrupt("Formal or casual?")

    writer = Child(
        "writer",
        HarnessParams(model="w:m", tools=[ask_tone]),
        providers={
            "w": ScriptedProvider(
                [reply(tool_call("ask_tone", {}, id="w1")), reply("Dear Sir, done.")], name="w"
            )
        },
    )
    harness = _parent(make_harness, _handoff_spec(writer), reply("Notes."))
    run = harness.start("Write.")
    state = run.run_sync()
    assert state.exit_reason == "suspended"
    assert state.interrupt is not None
    assert (state.interrupt.kind, state.interrupt.state) == ("question", "writer")
    assert state.interrupt.payload == {
        "questions": [{"tool_use_id": "w1", "tool": "ask_tone", "question": "Formal or casual?"}]
    }
    resumed = harness.resume(run, answer="formal")
    events = asyncio.run(_collect(resumed))
    moves = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert moves == [("writer", "model_complete", "child_succeeded")]
    state = resumed.state
    assert state.history[-2].tool_results[0].content == "formal"
    assert state.history[-1].text == "Dear Sir, done."
    assert_valid_history(state.history)


def test_a_denied_approval_inside_a_child_state_lands_in_the_child(make_harness: Any) -> None:
    """``research -> suspended [interrupted]``, then ``resume(run, False)``: the child's
    call is denied in the child's history, the child answers, the parent goes on."""
    from innerloop.examples import with_approval

    kid = ScriptedProvider(
        [reply(tool_call("block", {}, id="k1")), reply("Could not look it up.")], name="kid"
    )
    child = Child(
        "research",
        HarnessParams(model="kid:m", tools=[block]),
        machine=with_approval(),
        providers={"kid": kid},
    )
    harness = _parent(make_harness, _research_spec(child), reply("No facts today."))
    run = harness.start("Lisbon facts")
    first = asyncio.run(_collect(run))
    moves = [(e.source, e.target, e.guard) for e in first if isinstance(e, Transition)]
    assert moves == [("idle", "research", None), ("research", "suspended", "interrupted")]
    assert run.state.interrupt is not None
    assert run.state.interrupt.path == "research"
    saved = run.state.notes["children.runs"]["research"]
    assert (saved["at"], saved["state"]["final_state"]) == ("suspended", "suspended")
    resumed = harness.resume(run, answer=False)
    events = asyncio.run(_collect(resumed))
    child_results = [
        e.event.output
        for e in events
        if isinstance(e, ChildEvent) and isinstance(e.event, ToolExecuted)
    ]
    assert child_results == ["denied by the user"]
    assert resumed.state.exit_reason == "model_complete"
    assert resumed.state.history[0].content[-1].text == "[research] Could not look it up."


# -- diagrams ----------------------------------------------------------------------------------


def test_a_child_state_is_drawn_as_a_cluster_with_its_run(make_harness: Any) -> None:
    """The child machine is drawn inside its state (Mermaid: a composite state; DOT and
    SVG: a cluster), and a run's event log lays its trace on both levels."""
    from innerloop.diagrams import build_diagram, render, to_dot, to_mermaid

    child = Child("research", HarnessParams(model="kid:m"), providers={"kid": echo_provider("kid")})
    spec = _research_spec(child)
    run = _parent(make_harness, spec, reply("ok")).start("facts")
    events = [e.to_dict() for e in asyncio.run(_collect(run))]
    diagram = build_diagram(spec, trace=events)
    child_diagram = diagram.state("research").child
    assert child_diagram is not None
    assert child_diagram.trace is not None
    assert child_diagram.trace.final_state == "model_complete"
    text = to_mermaid(diagram)
    assert "    state research {" in text
    assert (
        "        research__stream --> research__check : ★ 10. else \N{MULTIPLICATION SIGN}1" in text
    )
    assert "    class research__model_complete ended" in text
    dot = to_dot(diagram)
    assert "subgraph cluster_child_research__ {" in dot
    assert "research -> research__idle [label=runs arrowhead=none style=dotted]" in dot
    assert render(diagram).startswith(b"<?xml")
    # a machine without children draws as before: no cluster, no composite state
    plain = to_mermaid(build_diagram(DEFAULT_SPEC))
    assert "state " not in plain


def test_an_agent_tool_runs_on_a_run_that_chooses_its_tools_per_turn(make_harness: Any) -> None:
    """With ``prepare_tools`` the runner is given a view of this turn's tools; an agent
    tool still runs its child inside the calling run."""

    @tool
    async def clock_time() -> str:
        """The time."""
        return "noon"

    north = Child("north", HarnessParams(model="n:m"), providers={"n": echo_provider("n")})
    model = ScriptedProvider(
        [reply(tool_call("north", {"task": "rain?"}, id="c1")), reply("Done.")]
    )
    params = HarnessParams(
        model="scripted:m",
        tools=[agent_tool(north, "North."), clock_time],
        prepare_tools=lambda state, tools: ["north"],
    )
    run = make_harness(params, model).start("Report.")
    events = asyncio.run(_collect(run))
    assert run.state.exit_reason == "model_complete"
    assert _paths(events) == ["north[c1]"]
    [result] = run.state.history[2].tool_results
    assert (result.tool_use_id, result.content, result.is_error) == ("c1", "answer: rain?", False)


@pytest.mark.parametrize(
    ("items", "wrong"),
    [
        (lambda s: [{"task": "x"}], "input 1 is dict {'task': 'x'}"),
        (lambda s: ["fine", 7], "input 2 is int 7"),
        (lambda s: ["fine", None], "input 2 is NoneType None"),
        (lambda s: "abc", "got str 'abc'"),
        (lambda s: None, "got NoneType None"),
    ],
)
def test_fan_out_items_of_the_wrong_type_are_named(
    make_harness: Any, items: Any, wrong: str
) -> None:
    """items(state) returning something else than a list of str or Message inputs raises a
    TypeError naming the expected type and the first wrong input (was AttributeError:
    'str' object has no attribute 'tool_use_id'), before any branch starts."""
    model = ScriptedProvider([reply("never")])
    child = Child("web", HarnessParams(model="kid:m"), providers={"kid": model})
    harness = make_harness(
        HarnessParams(model="scripted:m"),
        ScriptedProvider([reply("x")]),
        machine=_nested("survey", fan_out_handler(child, items)),
    )
    with pytest.raises(TypeError) as caught:
        harness.run_sync("go")
    assert str(caught.value) == (
        "fan_out_handler('web'): items(state) must return a list of inputs, each a str (the "
        f"task) or a Message; {wrong}"
    )
    assert model.played == 0
