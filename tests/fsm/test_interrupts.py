"""A tool asks a question (ToolContext.interrupt): the run suspends; the answer becomes
that call's tool result on resume, and the calls that had finished never run again."""

from __future__ import annotations

from typing import Any

import pytest

from innerloop import HarnessParams, Message, ResumeError, ToolResultBlock
from innerloop.fsm import Interrupt
from innerloop.testing import ScriptedProvider, assert_valid_history, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

OBJ = {"type": "object"}


def tools(ran: list[str]) -> list[ToolSpec]:
    async def ask(args: Any, ctx: ToolContext) -> ToolOutput:
        ran.append("ask:" + args["q"])
        ctx.interrupt({"question": args["q"]})

    async def echo(args: Any, ctx: ToolContext) -> ToolOutput:
        ran.append("echo")
        return ToolOutput("echoed")

    return [ToolSpec("ask", "Ask the user", OBJ, ask), ToolSpec("echo", "Echo", OBJ, echo)]


def params(ran: list[str]) -> HarnessParams:
    return HarnessParams(model="scripted:m", tools=tools(ran))


def test_question_suspends_then_answer_is_the_tool_result(make_harness: Any) -> None:
    """The asking call's result is the answer; the finished echo keeps its result and is
    not run again; the history is valid and the model sees both."""
    ran: list[str] = []
    provider = ScriptedProvider(
        [
            reply(
                "asking",
                tool_call("ask", {"q": "branch?"}, id="a1"),
                tool_call("echo", {}, id="e1"),
            ),
            reply("done on main"),
        ]
    )
    harness = make_harness(params(ran), provider)
    run = harness.start("go")
    state = run.run_sync()
    assert state.exit_reason == "suspended"
    assert state.interrupt == Interrupt(
        "question",
        {"questions": [{"tool_use_id": "a1", "tool": "ask", "question": {"question": "branch?"}}]},
        "execute",
        ("a1",),
        (ToolResultBlock("e1", "echoed"),),
        id="execute:1",
    )
    assert [m.role for m in state.history] == ["user", "assistant"]
    state = harness.resume(run, "main").run_sync()
    assert state.exit_reason == "model_complete"
    assert ran == ["ask:branch?", "echo"]
    assert state.history[2] == Message(
        "user", (ToolResultBlock("a1", "main"), ToolResultBlock("e1", "echoed"))
    )
    assert_valid_history(state.history)
    assert len(provider.requests) == 2


def test_json_answer_becomes_json_text(make_harness: Any) -> None:
    """An answer that is not a string reaches the model as its JSON text."""
    provider = ScriptedProvider([reply(tool_call("ask", {"q": "n?"}, id="a1")), reply("ok")])
    harness = make_harness(params([]), provider)
    run = harness.start("go")
    run.run_sync()
    state = harness.resume(run, {"n": 3}).run_sync()
    assert state.history[2] == Message("user", (ToolResultBlock("a1", '{"n": 3}'),))


def test_two_questions_need_a_keyed_answer(make_harness: Any) -> None:
    """Two calls asked: the answer must be keyed by their ids; each gets its own."""
    provider = ScriptedProvider(
        [
            reply(tool_call("ask", {"q": "x?"}, id="a1"), tool_call("ask", {"q": "y?"}, id="a2")),
            reply("ok"),
        ]
    )
    harness = make_harness(params([]), provider)
    run = harness.start("go")
    run.run_sync()
    with pytest.raises(
        ResumeError, match=r"2 tool calls asked; answer with a dict keyed by their ids: 'a1', 'a2'"
    ):
        harness.resume(run, "both")
    state = harness.resume(run, {"a1": "X", "a2": "Y"}).run_sync()
    assert state.history[2] == Message(
        "user", (ToolResultBlock("a1", "X"), ToolResultBlock("a2", "Y"))
    )


def test_answer_must_be_json(make_harness: Any) -> None:
    """An answer that is not JSON data is refused before anything changes."""
    provider = ScriptedProvider([reply(tool_call("ask", {"q": "n?"}, id="a1"))])
    harness = make_harness(params([]), provider)
    run = harness.start("go")
    run.run_sync()
    with pytest.raises(ResumeError, match="the answer must be JSON data, not object"):
        harness.resume(run, object())
    assert run.state.interrupt is not None
    assert not run.state.interrupt.answered
