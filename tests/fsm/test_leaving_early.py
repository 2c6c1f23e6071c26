"""Leaving ``run.events()`` early has one meaning: the run pauses where it was (nothing
lost), says so, and ``harness.resume(run)`` continues it; its events cannot be read twice.
Both ways a host leaves are tested: ``break`` and an exception in the loop's body."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, Message, ResumeError, ToolSpec
from innerloop._events import TextDelta, Transition
from innerloop.testing import ScriptedProvider, assert_valid_history, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

OBJ: dict[str, Any] = {"type": "object", "properties": {"x": {"type": "string"}}}


def echo(ran: list[str]) -> ToolSpec:
    async def run(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        ran.append(args["x"])
        return ToolOutput("echo:" + args["x"])

    return ToolSpec("echo", "Echo x", OBJ, run)


async def settle(condition: Any, rounds: int = 200) -> None:
    """Let the loop run its callbacks (a dropped generator is closed by a task the loop
    schedules) until ``condition()`` holds; counted in loop turns, not in seconds."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_break_pauses_and_resume_goes_on(
    make_harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``break`` at the transition into ``execute``: the tool has not run, the run waits in
    ``execute`` (logged), reading again raises, and resume runs the tool once and ends."""
    ran: list[str] = []
    params = HarnessParams(model="scripted:m-20250101", tools=[echo(ran)])
    model = ScriptedProvider([reply(tool_call("echo", {"x": "a"}, id="c1")), reply("done")])
    harness: Harness = make_harness(params, model)
    run = harness.start("go")
    with caplog.at_level(logging.WARNING, logger="innerloop.fsm"):
        async with contextlib.aclosing(run.events()) as events:
            async for event in events:
                if isinstance(event, Transition) and event.target == "execute":
                    break
    assert (run.stopped_at, run.state.final_state, ran) == ("execute", None, [])
    assert caplog.messages == [
        "run left in state 'execute' before it ended: its events stopped being read; "
        "harness.resume(run) continues it"
    ]
    with pytest.raises(RuntimeError) as err:
        async for _ in run.events():
            pass
    assert str(err.value) == (
        "this run's events were already read, and its reader left it in state 'execute' "
        "before it ended; continue it with harness.resume(run) (a new Run from where it "
        "stopped)"
    )
    with pytest.raises(ResumeError, match="it is not suspended"):
        harness.resume(run, answer=True)
    state = await harness.resume(run).run()
    assert (state.exit_reason, ran) == ("model_complete", ["a"])
    assert [m.role for m in state.history] == ["user", "assistant", "user", "assistant"]
    assert state.history[2].tool_results[0].content == "echo:a"
    assert_valid_history(state.history)
    with pytest.raises(RuntimeError, match=r"^this run has ended \(model_complete\)"):
        async for _ in run.events():  # the first Run object stays spent
            pass


async def test_exception_in_the_body_pauses_mid_stream(make_harness: Any) -> None:
    """An exception while the answer streams, with a plain ``async for`` (the generator
    is closed by the loop once dropped): the stream is closed, the run waits in
    ``stream``, and resume asks the model again."""
    params = HarnessParams(model="scripted:m-20250101")
    model = ScriptedProvider([reply("cut short"), reply("hello")])
    harness: Harness = make_harness(params, model)
    run = harness.start("go")

    class HostError(Exception):
        pass

    async def host() -> None:
        async for event in run.events():
            if isinstance(event, TextDelta):
                raise HostError

    with pytest.raises(HostError):
        await host()
    await settle(lambda: run.stopped_at is not None)
    assert run.stopped_at == "stream"
    assert run.state.history == [Message.user("go")]
    state = await harness.resume(run).run()
    assert state.exit_reason == "model_complete"
    assert state.history[-1].text == "hello"
    assert len(model.requests) == 2
    assert_valid_history(state.history)


def test_sync_iteration_left_early(make_harness: Any) -> None:
    """``iter_sync`` left with ``break``: closed at once, the run paused in ``call``."""
    harness: Harness = make_harness(
        HarnessParams(model="scripted:m-20250101"), ScriptedProvider([reply("hi")])
    )
    run = harness.start("go")
    for event in run.iter_sync():
        if isinstance(event, Transition) and event.target == "call":
            break
    assert run.stopped_at == "call"
    assert harness.resume(run).run_sync().exit_reason == "model_complete"
