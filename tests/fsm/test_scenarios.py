"""End-to-end recovery scenarios: the whole machine, a ScriptedProvider and a fake clock."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from innerloop import (
    HarnessParams,
    Message,
    SpendBudget,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from innerloop._events import (
    Abort,
    Alert,
    Backoff,
    Compacted,
    Event,
    Fallback,
    Finished,
    ModelResponseEvent,
    Transition,
)
from innerloop.recovery import ApproxTokenCounter, RecoveryPolicy
from innerloop.testing import FakeClock, Fault, Reply, ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

SYSTEM = "You are a test agent."


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(f"echo:{args.get('x', '')}")


async def _broken(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    raise RuntimeError("disk on fire")


async def _sleepy(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    await asyncio.sleep(30)
    return ToolOutput("woke up")


OBJ = {"type": "object", "properties": {"x": {"type": "string"}}}
TOOLS = (
    ToolSpec("echo", "Echo x.", OBJ, _echo),
    ToolSpec("broken", "Always fails.", OBJ, _broken),
    ToolSpec("sleepy", "Sleeps 30 s.", OBJ, _sleepy),
)


def params(**kw: Any) -> HarnessParams:
    base: dict[str, Any] = {"model": "scripted:m-20250101", "system": SYSTEM, "tools": TOOLS}
    base.update(kw)
    return HarnessParams(**base)


def collect(harness: Any, prompt: str = "go", **kw: Any) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    state = harness.run_sync(prompt, on_event=events.append, **kw)
    return state, events


def path(events: list[Event]) -> list[str]:
    return [e.target for e in events if e.type == "transition"]  # type: ignore[attr-defined]


def test_plain_answer_completes(make_harness: Any) -> None:
    """One answer, no tools: model_complete with the exact history."""
    state, events = collect(make_harness(params(), ScriptedProvider([reply("Hello!")])))
    assert state.exit_reason == "model_complete"
    assert state.history == [Message.user("go"), Message.assistant("Hello!")]
    assert path(events) == ["assemble", "normalize", "call", "stream", "check", "model_complete"]
    assert isinstance(events[-1], Finished)
    assert events[-1].turns == 1


def test_tool_results_reach_the_model_before_exit(make_harness: Any) -> None:
    """The exit is decided after tool results are sent back: the model sees them."""
    provider = ScriptedProvider(
        [reply("calling", tool_call("echo", {"x": "a"}, id="t1")), reply("got echo:a")]
    )
    state, _ = collect(make_harness(params(), provider))
    assert state.exit_reason == "model_complete"
    assert state.history == [
        Message.user("go"),
        Message("assistant", (TextBlock("calling"), ToolUseBlock("t1", "echo", {"x": "a"}))),
        Message("user", (ToolResultBlock("t1", "echo:a"),)),
        Message.assistant("got echo:a"),
    ]
    second = provider.requests[1].payload["messages"]
    assert second[-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "echo:a"}],
    }


def test_backoff_doubles_and_retry_after_overrides(make_harness: Any, clock: FakeClock) -> None:
    """429s back off 1, 2, 4 s; a Retry-After of 7 s overrides the schedule."""
    script: list[Reply | Fault] = [
        Fault.rate_limited(),
        Fault.rate_limited(),
        Fault.overloaded(),
        Fault.rate_limited(retry_after=7),
        reply("ok"),
    ]
    state, events = collect(make_harness(params(), ScriptedProvider(script)))
    assert state.exit_reason == "model_complete"
    assert clock.sleeps == [1.0, 2.0, 4.0, 7.0]
    assert state.total_wait == 14.0
    assert [e.attempt for e in events if isinstance(e, Backoff)] == [1, 2, 3, 4]


def test_backoff_caps_at_64_seconds(make_harness: Any, clock: FakeClock) -> None:
    """The exponential schedule stops growing at backoff_max."""
    policy = RecoveryPolicy(max_rate_limit_retries=8)
    script = [Fault.rate_limited()] * 8 + [reply("ok")]
    state, _ = collect(make_harness(params(recovery=policy), ScriptedProvider(script)))
    assert state.exit_reason == "model_complete"
    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 64.0]


def test_fallback_after_five_retries(make_harness: Any, clock: FakeClock) -> None:
    """Six 429s (first try + 5 retries) switch to the next model, which finishes the run."""
    primary = ScriptedProvider([Fault.rate_limited()] * 6, name="scripted")
    backup = ScriptedProvider([reply("from backup")], name="backup", dialect="openai")
    p = params(fallbacks=["backup:b-20250101"])
    harness = make_harness(p, {"scripted": primary, "backup": backup})
    state, events = collect(harness)
    assert state.exit_reason == "model_complete"
    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]
    fallbacks = [e for e in events if isinstance(e, Fallback)]
    assert fallbacks == [Fallback("scripted", "m-20250101", "backup", "b-20250101", "rate_limited")]
    assert state.degraded
    assert state.active == 1
    assert backup.requests[0].dialect == "openai"
    assert backup.requests[0].payload["messages"][0] == {"role": "system", "content": SYSTEM}
    assert state.history[-1] == Message.assistant("from backup")


def test_rate_limited_with_no_fallback_fails(make_harness: Any) -> None:
    """Retries exhausted and no fallback model: the run fails with a diagnostic."""
    state, _ = collect(make_harness(params(), ScriptedProvider([Fault.rate_limited()] * 6)))
    assert state.exit_reason == "failed"
    assert state.diagnostic["error"]["category"] == "rate_limited"


def test_transient_failure_retried_once(make_harness: Any, clock: FakeClock) -> None:
    """A 5xx is retried immediately, without waiting."""
    script: list[Reply | Fault] = [Fault.server_error(502), reply("fine")]
    state, events = collect(make_harness(params(), ScriptedProvider(script)))
    assert state.exit_reason == "model_complete"
    assert clock.sleeps == []
    assert path(events)[:5] == ["assemble", "normalize", "call", "call", "stream"]


@pytest.mark.parametrize("second", [Fault.malformed(), Fault.empty(), Fault.dropped()])
def test_second_transient_failure_aborts_with_hashed_diagnostic(
    make_harness: Any, second: Fault
) -> None:
    """Two transient failures in a row abort; the diagnostic hashes content, leaks no key."""
    script = [Fault.server_error(500), second]
    prompt = "secret plan sk-ant-api03-abcdefghijklmnop"
    state, events = collect(make_harness(params(), ScriptedProvider(script)), prompt)
    assert state.exit_reason == "failed"
    diag = state.diagnostic
    assert diag["error"]["category"] == "transient"
    assert diag["request"]["messages"][0]["content"][0]["text"].startswith("sha256:")
    assert diag["request"]["system"].startswith("sha256:")
    assert "sk-ant" not in repr(diag)
    assert "secret plan" not in repr(diag)
    assert next(e for e in events if isinstance(e, Abort)).diagnostic == diag
    assert state.history == [Message.user(prompt)]


def test_fatal_error_fails_at_once(make_harness: Any) -> None:
    """A 401 is fatal: no retry, the run fails."""
    provider = ScriptedProvider([Fault.fatal(401), reply("never")])
    state, _ = collect(make_harness(params(), provider))
    assert state.exit_reason == "failed"
    assert provider.played == 1
    assert state.diagnostic["error"]["status"] == 401


def test_three_tool_failures_inject_notice(make_harness: Any) -> None:
    """After 3 consecutive failures of one tool a notice follows the results, as a message."""
    script = [reply(tool_call("broken", id=f"b{i}")) for i in range(3)] + [reply("giving up")]
    state, _ = collect(make_harness(params(), ScriptedProvider(script)))
    assert state.exit_reason == "model_complete"
    results = [m for m in state.history if m.role == "user"][1:]
    assert [len(m.content) for m in results] == [1, 1, 2]
    notice = results[2].content[1]
    assert notice == TextBlock(
        "Tool broken has failed 3 consecutive times. "
        "Proceed without it or use an alternative approach."
    )
    assert results[0].content[0] == ToolResultBlock(
        "b0", "tool 'broken' raised RuntimeError: disk on fire", True
    )


def test_tool_success_resets_failure_count(make_harness: Any) -> None:
    """A success of the same tool between failures resets its count: no notice."""

    async def flaky(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("bad input", is_error=True) if args["x"] == "bad" else ToolOutput("ok")

    p = params(tools=(ToolSpec("flaky", "Fails on bad.", OBJ, flaky),))
    script = [
        reply(tool_call("flaky", {"x": "bad"}, id="f1")),
        reply(tool_call("flaky", {"x": "bad"}, id="f2")),
        reply(tool_call("flaky", {"x": "good"}, id="f3")),
        reply(tool_call("flaky", {"x": "bad"}, id="f4")),
        reply(tool_call("flaky", {"x": "bad"}, id="f5")),
        reply("done"),
    ]
    state, _ = collect(make_harness(p, ScriptedProvider(script)))
    assert all(len(m.content) == 1 for m in state.history[2::2])
    assert state.tool_failures == {"flaky": 2}


def test_max_tokens_without_pressure_keeps_the_history_and_continues(make_harness: Any) -> None:
    """max_tokens four times in a row, no context budget: the cut-off tool call is dropped
    and the continuation asked each time, and nothing else is dropped (the task first)."""
    script = [
        reply("a" * 400, tool_call("echo", {"x": "1"}, id="t1")),
        reply("b" * 400, tool_call("echo", {"x": "2"}, id="t2")),
        *(reply(f"partial {i}", stop_reason="max_tokens") for i in range(3)),
        reply("partial 3", stop_reason="max_tokens", incomplete_tool=("echo", '{"x": "')),
        reply("continued"),
    ]
    provider = ScriptedProvider(script)
    state, events = collect(
        make_harness(params(recovery=RecoveryPolicy(keep_recent_messages=3)), provider)
    )
    assert state.exit_reason == "model_complete"
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert [(e.reason, e.removed_messages) for e in compacted] == [("max_tokens", 0)] * 4
    assert all(e.tokens_after > e.tokens_before for e in compacted)
    asked = Message.user("Your previous response was truncated. Continue from where you left off.")
    assert state.history[0] == Message.user("go")
    assert state.history[5:] == [
        *(m for i in range(4) for m in (Message.assistant(f"partial {i}"), asked)),
        Message.assistant("continued"),
    ]
    executed = [e for e in events if e.type == "tool_executed"]
    assert [e.tool_use_id for e in executed] == ["t1", "t2"]  # type: ignore[attr-defined]


def test_context_overflow_alerts_and_compacts(make_harness: Any) -> None:
    """Prompt too long: an alert, emergency compaction, then the same turn is replayed."""
    script: list[Reply | Fault] = [
        reply("x" * 2000, tool_call("echo", id="t1")),
        reply("y" * 2000, tool_call("echo", id="t2")),
        reply("z" * 2000, tool_call("echo", id="t3")),
        Fault.context_overflow(),
        reply("fits now"),
    ]
    p = params(context_budget=100_000, max_output_tokens=1000)
    state, events = collect(make_harness(p, ScriptedProvider(script)))
    assert state.exit_reason == "model_complete"
    alerts = [e for e in events if isinstance(e, Alert)]
    assert len(alerts) == 1
    assert alerts[0].kind == "context_overflow"
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert [c.reason for c in compacted] == ["overflow"]
    assert compacted[0].removed_messages > 0


def test_over_context_budget_compacts_before_the_call(make_harness: Any) -> None:
    """Over the context budget, history shrinks before the request is sent."""
    script = [reply("w" * 4000, tool_call("echo", id=f"t{i}")) for i in range(4)]
    script.append(reply("done"))
    p = params(context_budget=3000, max_output_tokens=500)
    provider = ScriptedProvider(script)
    state, events = collect(make_harness(p, provider, token_counter=ApproxTokenCounter()))
    assert state.exit_reason == "model_complete"
    assert [c.reason for c in events if isinstance(c, Compacted)]
    assert all(c.reason == "budget" for c in events if isinstance(c, Compacted))


def test_cannot_shrink_fails(make_harness: Any) -> None:
    """A single message over the budget cannot be compacted: the run fails, clearly."""
    p = params(context_budget=2000, max_output_tokens=500)
    state, _ = collect(make_harness(p, ScriptedProvider([reply("never")])), "q" * 20000)
    assert state.exit_reason == "failed"
    assert state.diagnostic["reason"] == "compaction could not shrink the history"


def test_turn_limit(make_harness: Any) -> None:
    """A model that keeps calling tools stops at max_turns, results appended."""
    script = [reply(tool_call("echo", id=f"t{i}")) for i in range(5)]
    state, _ = collect(make_harness(params(max_turns=2), ScriptedProvider(script)))
    assert state.exit_reason == "max_turns_exceeded"
    assert state.turns == 2
    assert state.history[-1].role == "user"
    assert state.history[-1].tool_results


def test_spend_budget(make_harness: Any) -> None:
    """The token spend budget ends the run with budget_exceeded."""
    script = [reply(tool_call("echo", id=f"t{i}"), usage=Usage(300, 50)) for i in range(5)]
    p = params(spend_budget=SpendBudget(max_tokens=700))
    state, _ = collect(make_harness(p, ScriptedProvider(script)))
    assert state.exit_reason == "budget_exceeded"
    assert state.usage == Usage(600, 100)  # 2 turns: 700 tokens reach the budget


def test_tasks_complete(make_harness: Any) -> None:
    """All seeded tasks done after a tool turn: tasks_complete."""

    async def finish(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        for task in ctx.state.tasks:
            task.done = True
        return ToolOutput("all done")

    tool = ToolSpec("finish", "Complete all tasks.", {"type": "object"}, finish)
    p = params(tools=(tool,))
    provider = ScriptedProvider([reply(tool_call("finish", id="f1")), reply("unused")])
    state, _ = collect(make_harness(p, provider), tasks=["write report"])
    assert state.exit_reason == "tasks_complete"
    assert provider.played == 1


def test_abort_from_another_thread_while_tool_blocks(make_harness: Any) -> None:
    """An abort from another thread cancels a blocking tool; the history stays valid."""
    provider = ScriptedProvider([reply(tool_call("sleepy", id="s1")), reply("never")])
    harness = make_harness(params(), provider)
    run = harness.start("go")
    timer = threading.Timer(0.2, run.abort, args=("operator pressed stop",))
    started = time.monotonic()
    timer.start()
    events = list(run.iter_sync())
    assert time.monotonic() - started < 5
    assert run.state.exit_reason == "aborted"
    assert next(e for e in events if isinstance(e, Abort)).reason == "operator pressed stop"
    assert run.state.history[-1] == Message(
        "user",
        (
            ToolResultBlock(
                "s1", "not run: the run was aborted before this tool call completed", True
            ),
        ),
    )


def test_abort_cancels_a_hanging_call(make_harness: Any) -> None:
    """A call that never answers is cancelled by abort()."""
    harness = make_harness(params(), ScriptedProvider([Fault.hang()]))

    async def main() -> Any:
        run = harness.start("go")
        asyncio.get_running_loop().call_later(0.05, run.abort)
        return await asyncio.wait_for(run.run(), 5)

    state = asyncio.run(main())
    assert state.exit_reason == "aborted"
    assert state.history == [Message.user("go")]


def test_abort_from_the_event_consumer_stops_the_stream(make_harness: Any) -> None:
    """An abort asked for by the host between two stream events (the stop button while it
    shows the deltas) ends the stream there: no more deltas, no partial message kept."""
    harness = make_harness(params(), ScriptedProvider([reply("x" * 400)], chunk_size=4))

    async def main() -> tuple[Any, list[str]]:
        run = harness.start("go")
        seen = []
        async for event in run.events():
            seen.append(event.type)
            if seen.count("text_delta") == 2:
                run.abort("operator pressed stop")
        return run.state, seen

    state, seen = asyncio.run(main())
    assert state.exit_reason == "aborted"
    assert seen.count("text_delta") == 2
    assert "message_complete" not in seen
    assert state.history == [Message.user("go")]


def test_run_makes_no_stream_events_and_ends_the_same(make_harness: Any) -> None:
    """``Run.run()`` passes no deltas up (nobody reads them) and reaches the same end as
    iterating the events; ``quiet`` holds only while it runs."""
    script = [reply("x" * 64, tool_call("echo", {"x": "a"}, id="t1")), reply("done")]
    loud = make_harness(params(), ScriptedProvider(list(script), chunk_size=4)).start("go")
    seen = asyncio.run(_collect(loud))
    made = _Made()
    quiet = make_harness(
        params(), ScriptedProvider(list(script), chunk_size=4), observers=[made]
    ).start("go")
    state = asyncio.run(quiet.run())
    yielded = made.types
    assert "text_delta" in seen
    assert "text_delta" not in yielded
    assert "model_response" in yielded
    assert yielded[-1] == "finished"
    assert (state.exit_reason, state.history) == (loud.state.exit_reason, loud.state.history)
    assert (state.usage, state.turns) == (loud.state.usage, loud.state.turns)
    assert quiet.scope.quiet is False


class _Made:
    """A run observer noting the type of every event a run makes (it watches them all)."""

    def __init__(self) -> None:
        self.types: list[str] = []

    def start_run(self, run: Any) -> _Made:
        return self

    def on_event(self, event: Any) -> None:
        self.types.append(event.type)

    def on_finish(self, error: BaseException | None) -> None:
        pass

    def tool_started(self, call: Any, spec: Any, timeout: float | None) -> None:
        pass

    def tool_finished(self, handle: Any, result: Any) -> None:
        pass


class _Picky(_Made):
    """A run observer that watches two event types, each through its own function."""

    def __init__(self) -> None:
        super().__init__()
        self.watches = {
            Transition: lambda ev: self.types.append(f"{ev.source}->{ev.target}"),
            ModelResponseEvent: lambda ev: self.types.append(ev.type),
        }

    def on_event(self, event: Any) -> None:
        raise AssertionError(f"on_event called with {event.type} though the hooks watch")


@pytest.mark.parametrize("read", ["run", "events"])
def test_hooks_that_watch_get_only_their_types(make_harness: Any, read: str) -> None:
    """Hooks with ``watches`` get each event of those types through its function and no
    other event, whichever way the run is read; hooks without it beside them still see
    every type; the run ends the same."""
    script = [reply("x", tool_call("echo", {"x": "a"}, id="t1")), reply("done")]
    picky, made = _Picky(), _Made()
    run = make_harness(params(), ScriptedProvider(list(script)), observers=[picky]).start("go")
    if read == "run":
        asyncio.run(run.run())
    else:
        asyncio.run(_collect(run))
    assert picky.types == [
        "idle->assemble",
        "assemble->normalize",
        "normalize->call",
        "call->stream",
        "model_response",
        "stream->execute",
        "execute->check",
        "check->assemble",
        "assemble->normalize",
        "normalize->call",
        "call->stream",
        "model_response",
        "stream->check",
        "check->model_complete",
    ]
    beside = _Picky()
    harness = make_harness(params(), ScriptedProvider(list(script)), observers=[beside, made])
    state = asyncio.run(harness.start("go").run())
    assert beside.types == picky.types
    assert {"run_started", "message_complete", "tool_executed", "finished"} <= set(made.types)
    assert state.history == run.state.history


async def _collect(run: Any) -> list[str]:
    return [event.type async for event in run.events()]


def test_abort_during_backoff(make_harness: Any) -> None:
    """A long backoff sleep is abortable."""
    from innerloop.recovery import SystemClock

    harness = make_harness(
        params(), ScriptedProvider([Fault.rate_limited(retry_after=60)]), clock=SystemClock()
    )

    async def main() -> Any:
        run = harness.start("go")
        asyncio.get_running_loop().call_later(0.05, run.abort)
        return await asyncio.wait_for(run.run(), 5)

    assert asyncio.run(main()).exit_reason == "aborted"


def test_sync_facade_equals_async(make_harness: Any) -> None:
    """run_sync and the async run produce the same events and history."""
    script = [reply("t", tool_call("echo", {"x": "q"}, id="t1")), reply("end")]
    sync_events: list[Event] = []
    s1 = make_harness(params(), ScriptedProvider(script)).run_sync(
        "go", on_event=sync_events.append
    )

    async def main() -> tuple[Any, list[Event]]:
        run = make_harness(params(), ScriptedProvider(script)).start("go")
        return run.state, [e async for e in run.events()]

    s2, async_events = asyncio.run(main())
    assert s1.history == s2.history

    def strip(es: list[Event]) -> list[dict[str, Any]]:
        out = []
        for e in es:
            d = e.to_dict()
            d.pop("duration", None)
            out.append(d)
        return out

    assert strip(sync_events) == strip(async_events)


def test_statemachine_engine_matches_table_engine(make_harness: Any) -> None:
    """Driving python-statemachine's send('step') takes the same path as the lean table."""
    script: list[Reply | Fault] = [
        Fault.rate_limited(),
        reply(tool_call("echo", id="t1")),
        reply("done"),
    ]
    _, fast = collect(make_harness(params(), ScriptedProvider(script)))
    _, ref = collect(make_harness(params(), ScriptedProvider(script), engine="statemachine"))
    assert path(fast) == path(ref)
