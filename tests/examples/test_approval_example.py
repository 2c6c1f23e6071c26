from __future__ import annotations

from typing import Any

import pytest

from innerloop import HarnessParams, HarnessState, Message, ParamsError, ToolResultBlock
from innerloop.examples import DENIED, with_approval
from innerloop.fsm import DEFAULT_SPEC, compile_spec
from innerloop.testing import ScriptedProvider, TransitionCoverage, machine_at, reply, tool_call
from innerloop.tools import ToolOutput, ToolSpec

PARAMS = HarnessParams(model="scripted:m")
APPROVAL = compile_spec(with_approval(lambda call, state: True))
CALL = Message.assistant([tool_call("echo", {"x": "a"}, id="t1")])


def tool_turn() -> HarnessState:
    return HarnessState(history=[Message.user("go"), CALL])


class TestTransitions:
    def test_stream_to_approve(self, transition_coverage: TransitionCoverage) -> None:
        """After a tool-calling answer, stream goes to approve instead of execute."""
        probe = machine_at(APPROVAL, "stream", tool_turn(), PARAMS, observers=[transition_coverage])
        assert probe.step() == "approve"

    def test_approve_to_execute(self, transition_coverage: TransitionCoverage) -> None:
        """approve goes on to execute (denied calls are answered there)."""
        probe = machine_at(
            APPROVAL, "approve", tool_turn(), PARAMS, observers=[transition_coverage]
        )
        assert probe.step() == "execute"

    def test_approve_abort(self, transition_coverage: TransitionCoverage) -> None:
        """An abort requested while waiting for approval goes to abort."""
        state = tool_turn()
        state.request_abort()
        probe = machine_at(APPROVAL, "approve", state, PARAMS, observers=[transition_coverage])
        assert probe.step() == "abort"

    def test_structure(self) -> None:
        """The approval machine routes stream -> approve -> execute; nothing else changed."""
        spec = APPROVAL.spec
        assert [str(t) for t in spec.transitions_from("approve")] == [
            "approve -> abort [abort_requested]",
            "approve -> execute",
        ]
        assert "stream -> approve [has_tool_calls]" in [str(t) for t in spec.transitions]
        assert len(spec.transitions) == len(DEFAULT_SPEC.transitions) + 2


def echo_tool(ran: list[str]) -> ToolSpec:
    async def echo(args: Any, ctx: Any) -> ToolOutput:
        ran.append(args["x"])
        return ToolOutput("echo:" + args["x"])

    return ToolSpec("echo", "Echo x", {"type": "object"}, echo)


def sync_ask(call: Any, state: Any) -> bool:
    return bool(call.input["x"] != "rm")


async def async_ask(call: Any, state: Any) -> bool:
    return bool(call.input["x"] != "rm")


@pytest.mark.parametrize("ask", [sync_ask, async_ask], ids=["sync", "async"])
def test_denied_call_end_to_end(make_harness: Any, ask: Any) -> None:
    """A denied call never runs and gets 'denied by the user'; the allowed one runs; the
    model sees both results and finishes."""
    ran: list[str] = []
    params = HarnessParams(model="scripted:m", tools=[echo_tool(ran)])
    calls = [tool_call("echo", {"x": "ls"}, id="c1"), tool_call("echo", {"x": "rm"}, id="c2")]
    provider = ScriptedProvider([reply("two calls", *calls), reply("ok, without rm")])
    state = make_harness(params, provider, machine=with_approval(ask)).run_sync("go")
    assert state.exit_reason == "model_complete"
    assert ran == ["ls"]
    assert state.history[2] == Message(
        "user", (ToolResultBlock("c1", "echo:ls", False), ToolResultBlock("c2", DENIED, True))
    )
    assert [m.role for m in state.history] == ["user", "assistant", "user", "assistant"]
    assert len(provider.requests) == 2


def test_eager_tools_refused(make_harness: Any) -> None:
    """With eager dispatch the approval machine refuses to run: calls would start unapproved."""
    params = HarnessParams(model="scripted:m", tools=[echo_tool([])], eager_tools=True)
    provider = ScriptedProvider([reply(tool_call("echo", {"x": "ls"}, id="c1"))])
    harness = make_harness(params, provider, machine=with_approval(sync_ask))
    with pytest.raises(ParamsError, match=r"^eager_tools: the approval machine needs"):
        harness.run_sync("go")
