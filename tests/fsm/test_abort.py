"""Aborts from every place one can come from end the run in ``aborted`` (or ``failed`` for a
counter that gives up), with a valid history, and never raise out of the run.

Places: another thread, the event consumer, a phase handler, a tool (through its
``ToolContext``), an approval callback (sync and async), and a failure counter whose guard
leads to ``abort``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from innerloop import Harness, HarnessParams, HarnessState, Message, ToolResultBlock, ToolSpec
from innerloop._messages import ToolUseBlock
from innerloop.examples import with_approval
from innerloop.fsm import DEFAULT_SPEC, PhaseContext, StateSpec, TransitionSpec
from innerloop.testing import Fault, ScriptedProvider, assert_valid_history, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

OBJ: dict[str, Any] = {"type": "object", "properties": {}}
ABORTED = "not run: the run was aborted before this tool call completed"


async def _fast(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("fast result")


async def _slow(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    await asyncio.sleep(30)
    return ToolOutput("slow result")


async def _quitter(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    ctx.abort("the tool gave up")
    await asyncio.sleep(30)  # cancelled here by the abort
    return ToolOutput("never")


TOOLS = (
    ToolSpec("fast", "Answers at once.", OBJ, _fast),
    ToolSpec("slow", "Sleeps 30 s.", OBJ, _slow),
    ToolSpec("quitter", "Aborts the run.", OBJ, _quitter),
)
PARAMS = HarnessParams(model="scripted:m-20250101", tools=TOOLS)


def _two_calls() -> ScriptedProvider:
    return ScriptedProvider(
        [reply(tool_call("fast", id="f1"), tool_call("slow", id="s1")), reply("never")]
    )


async def _run_to_end(harness: Harness, **kw: Any) -> tuple[HarnessState, int]:
    """Run in a task; return the state and the task's pending cancellation count."""
    task = asyncio.current_task()
    assert task is not None
    state = await asyncio.wait_for(harness.run("go", **kw), 10)
    return state, task.cancelling()


def _aborted(state: HarnessState, reason: str) -> None:
    assert state.exit_reason == "aborted"
    assert state.abort is not None
    assert state.abort.reason == reason
    assert_valid_history(state.history)


def test_abort_from_a_tool_through_its_context(make_harness: Any) -> None:
    """An async tool that calls ``ctx.abort()`` ends the run in ``aborted``; nothing is
    raised out of ``run_sync``, and the call gets the aborted result."""
    provider = ScriptedProvider([reply(tool_call("quitter", id="q1")), reply("never")])
    state = make_harness(PARAMS, provider).run_sync("go")
    _aborted(state, "the tool gave up")
    assert state.history[-1] == Message("user", (ToolResultBlock("q1", ABORTED, True),))


def test_abort_from_a_tool_keeps_the_results_of_finished_calls(make_harness: Any) -> None:
    """Another call that had finished keeps its real result."""
    provider = ScriptedProvider(
        [reply(tool_call("fast", id="f1"), tool_call("quitter", id="q1")), reply("never")]
    )
    state, cancelling = asyncio.run(_run_to_end(make_harness(PARAMS, provider)))
    _aborted(state, "the tool gave up")
    assert cancelling == 0
    assert state.history[-1] == Message(
        "user", (ToolResultBlock("f1", "fast result"), ToolResultBlock("q1", ABORTED, True))
    )


def test_sync_approval_callback_that_aborts_through_the_run(make_harness: Any) -> None:
    """A plain approval callback that calls ``run.abort()`` (which wakes the run) ends it
    in ``aborted``; no tool runs."""
    runs: list[Any] = []

    def ask(call: ToolUseBlock, state: HarnessState) -> bool:
        runs[0].abort("the reviewer left")
        return True

    harness = make_harness(PARAMS, _two_calls(), machine=with_approval(ask))
    run = harness.start("go")
    runs.append(run)
    events = list(run.iter_sync())
    _aborted(run.state, "the reviewer left")
    assert events[-1].type == "finished"
    assert run.state.history[-1] == Message(
        "user", (ToolResultBlock("f1", ABORTED, True), ToolResultBlock("s1", ABORTED, True))
    )


def test_sync_approval_callback_that_records_an_abort(make_harness: Any) -> None:
    """A callback that only records the request on the state is seen at the next
    transition."""

    def ask(call: ToolUseBlock, state: HarnessState) -> bool:
        state.request_abort("declined everything")
        return False

    harness = make_harness(PARAMS, _two_calls(), machine=with_approval(ask))
    state = harness.run_sync("go")
    _aborted(state, "declined everything")


def test_async_approval_callback_aborted_while_it_waits(make_harness: Any) -> None:
    """An async callback still waiting for a person is cancelled by ``run.abort()``."""

    async def ask(call: ToolUseBlock, state: HarnessState) -> bool:
        await asyncio.sleep(30)
        return True

    harness = make_harness(PARAMS, _two_calls(), machine=with_approval(ask))

    async def main() -> HarnessState:
        run = harness.start("go")
        asyncio.get_running_loop().call_later(0.05, run.abort, "no answer")
        return await asyncio.wait_for(run.run(), 10)

    _aborted(asyncio.run(main()), "no answer")


def test_approval_abort_keeps_the_fast_tool_result(make_harness: Any) -> None:
    """With approval, aborting while one fast and one slow tool run keeps the fast tool's
    real result (it used to be replaced by the aborted text)."""
    harness = make_harness(PARAMS, _two_calls(), machine=with_approval(lambda c, s: True))

    async def main() -> HarnessState:
        run = harness.start("go")
        asyncio.get_running_loop().call_later(0.2, run.abort, "stop")
        return await asyncio.wait_for(run.run(), 10)

    state = asyncio.run(main())
    _aborted(state, "stop")
    assert state.history[-1] == Message(
        "user", (ToolResultBlock("f1", "fast result"), ToolResultBlock("s1", ABORTED, True))
    )


def test_abort_from_a_custom_handler(make_harness: Any) -> None:
    """A custom state's handler that calls ``ctx.abort()`` and then waits is cancelled at
    that await and the run ends in ``aborted``."""

    async def gate(ctx: PhaseContext) -> None:
        ctx.abort("the gate closed")
        await asyncio.sleep(30)

    spec = DEFAULT_SPEC.insert_between(
        "check",
        "assemble",
        StateSpec("gate"),
        gate,
        transitions=(
            TransitionSpec("gate", "abort", "abort_requested", "recovery"),
            TransitionSpec("gate", "assemble"),
        ),
    ).renamed("gated")
    provider = ScriptedProvider([reply(tool_call("fast", id="f1")), reply("never")])
    state, cancelling = asyncio.run(_run_to_end(make_harness(PARAMS, provider, machine=spec)))
    _aborted(state, "the gate closed")
    assert cancelling == 0
    assert state.history[-1] == Message("user", (ToolResultBlock("f1", "fast result"),))


def test_abort_from_another_thread_during_a_call(make_harness: Any) -> None:
    """From another thread, while the model call hangs."""
    harness = make_harness(PARAMS, ScriptedProvider([Fault.hang()]))
    run = harness.start("go")
    threading.Timer(0.1, run.abort, args=("from a thread",)).start()
    list(run.iter_sync())
    _aborted(run.state, "from a thread")
    assert run.state.history == [Message.user("go")]


def test_abort_from_the_event_consumer_between_phases(make_harness: Any) -> None:
    """The host asks while reading a transition event: no later handler runs, and the run
    leaves by the first ``abort_requested`` edge (``normalize`` has none, ``call`` has)."""
    harness = make_harness(PARAMS, ScriptedProvider([reply("hello")]))

    async def main() -> tuple[HarnessState, list[str]]:
        run = harness.start("go")
        targets = []
        async for event in run.events():
            if event.type == "transition":
                targets.append(event.target)
                if event.target == "normalize":
                    run.abort("seen enough")
        return run.state, targets

    state, targets = asyncio.run(main())
    _aborted(state, "seen enough")
    assert targets == ["assemble", "normalize", "call", "abort", "aborted"]
    assert state.turns == 0
    assert state.history == [Message.user("go")]


def test_failure_counter_leads_to_abort_and_failed(make_harness: Any) -> None:
    """A counter that runs out (two transient failures) takes the abort edge by its guard:
    the run ends in ``failed`` with a diagnostic, not ``aborted``."""
    harness = make_harness(PARAMS, ScriptedProvider([Fault.server_error(), Fault.server_error()]))
    state = harness.run_sync("go")
    assert state.exit_reason == "failed"
    assert state.abort is None
    assert state.diagnostic is not None
    assert state.diagnostic["error"]["category"] == "transient"
    assert_valid_history(state.history)
