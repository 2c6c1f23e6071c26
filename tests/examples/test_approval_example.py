from __future__ import annotations

from typing import Any

import pytest

from innerloop import (
    HarnessParams,
    HarnessState,
    Message,
    ParamsError,
    ResumeError,
    ToolResultBlock,
)
from innerloop.examples import DENIED, with_approval
from innerloop.fsm import DEFAULT_SPEC, Interrupt, Outcome, compile_spec
from innerloop.testing import (
    ScriptedProvider,
    TransitionCoverage,
    assert_valid_history,
    machine_at,
    reply,
    tool_call,
)
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

    def test_approve_to_suspended(self, transition_coverage: TransitionCoverage) -> None:
        """An approve phase that asked the host (an interrupt) goes to suspended."""
        state = tool_turn()
        state.outcome = Outcome.INTERRUPTED
        probe = machine_at(APPROVAL, "approve", state, PARAMS, observers=[transition_coverage])
        assert probe.step() == "suspended"

    def test_approve_abort(self, transition_coverage: TransitionCoverage) -> None:
        """An abort requested while waiting for approval goes to abort."""
        state = tool_turn()
        state.request_abort()
        probe = machine_at(APPROVAL, "approve", state, PARAMS, observers=[transition_coverage])
        assert probe.step() == "abort"

    def test_structure(self) -> None:
        """The approval machine routes stream -> approve -> execute (or suspended);
        nothing else changed."""
        spec = APPROVAL.spec
        assert [str(t) for t in spec.transitions_from("approve")] == [
            "approve -> abort [abort_requested]",
            "approve -> suspended [interrupted]",
            "approve -> execute",
        ]
        assert "stream -> approve [has_tool_calls]" in [str(t) for t in spec.transitions]
        assert len(spec.transitions) == len(DEFAULT_SPEC.transitions) + 3


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


def two_calls() -> list[Any]:
    return [tool_call("echo", {"x": "ls"}, id="c1"), tool_call("echo", {"x": "rm"}, id="c2")]


class TestSuspendForApproval:
    """Without a callback, approve suspends the run; resume(run, answer) goes on."""

    def test_suspends_with_the_pending_calls(self, make_harness: Any) -> None:
        """The run ends in suspended, no tool ran, and the interrupt lists both calls."""
        ran: list[str] = []
        params = HarnessParams(model="scripted:m", tools=[echo_tool(ran)])
        provider = ScriptedProvider([reply("two calls", *two_calls()), reply("ok")])
        state = make_harness(params, provider, machine=with_approval()).run_sync("go")
        assert (state.exit_reason, state.final_state) == ("suspended", "suspended")
        assert ran == []
        assert state.interrupt == Interrupt(
            "approval",
            {
                "calls": [
                    {"id": "c1", "name": "echo", "input": {"x": "ls"}},
                    {"id": "c2", "name": "echo", "input": {"x": "rm"}},
                ]
            },
            "approve",
            ("c1", "c2"),
            id="approve:1",
        )

    @pytest.mark.parametrize(
        ("answer", "expected_ran", "results"),
        [
            (True, ["ls", "rm"], [("c1", "echo:ls", False), ("c2", "echo:rm", False)]),
            (False, [], [("c1", DENIED, True), ("c2", DENIED, True)]),
            (
                {"c1": True, "c2": False},
                ["ls"],
                [("c1", "echo:ls", False), ("c2", DENIED, True)],
            ),
        ],
        ids=["all", "none", "per-call"],
    )
    def test_resume_runs_or_refuses(
        self, make_harness: Any, answer: Any, expected_ran: list[str], results: list[Any]
    ) -> None:
        """The answer runs the approved calls and refuses the others; the history is the
        one the synchronous callback form gives, and valid."""
        ran: list[str] = []
        params = HarnessParams(model="scripted:m", tools=[echo_tool(ran)])
        provider = ScriptedProvider([reply("two calls", *two_calls()), reply("ok")])
        harness = make_harness(params, provider, machine=with_approval())
        run = harness.start("go")
        run.run_sync()
        state = harness.resume(run, answer).run_sync()
        assert state.exit_reason == "model_complete"
        assert ran == expected_ran
        assert state.history[2] == Message("user", tuple(ToolResultBlock(*r) for r in results))
        assert [m.role for m in state.history] == ["user", "assistant", "user", "assistant"]
        assert state.interrupt is None
        assert_valid_history(state.history)

    def test_same_history_as_callback_form(self, make_harness: Any) -> None:
        """Suspend + resume with a per-call answer gives the callback form's history."""

        def history(machine: Any, answer: Any) -> list[Message]:
            params = HarnessParams(model="scripted:m", tools=[echo_tool([])])
            provider = ScriptedProvider([reply("two calls", *two_calls()), reply("ok")])
            harness = make_harness(params, provider, machine=machine)
            run = harness.start("go")
            state = run.run_sync()
            if answer is not None:
                state = harness.resume(run, answer).run_sync()
            return list(state.history)

        assert history(with_approval(), {"c1": True, "c2": False}) == history(
            with_approval(sync_ask), None
        )

    @pytest.mark.parametrize(
        ("answer", "message"),
        [
            (None, "it is suspended on a 'approval' interrupt; pass answer="),
            (
                "yes",
                "an approval answer is True (run them all), False (deny them all) or "
                "{tool_use_id: bool} for 'c1', 'c2', not str",
            ),
            ({"c1": True}, "no verdict for 'c2'; an approval answer is"),
            ({"c1": True, "c2": False, "c9": True}, "no pending call 'c9'; an approval"),
            ({"c1": True, "c2": "no"}, "not a bool for 'c2'; an approval answer is"),
        ],
        ids=["missing", "wrong-type", "missing-call", "unknown-call", "not-bool"],
    )
    def test_wrong_answer_refused(self, make_harness: Any, answer: Any, message: str) -> None:
        """An answer of the wrong shape is refused, naming what is wrong; the suspended
        state is left as it was."""
        params = HarnessParams(model="scripted:m", tools=[echo_tool([])])
        provider = ScriptedProvider([reply("two calls", *two_calls())])
        harness = make_harness(params, provider, machine=with_approval())
        run = harness.start("go")
        state = run.run_sync()
        before = state.interrupt
        with pytest.raises(ResumeError) as err:
            harness.resume(run, answer)
        assert message in str(err.value)
        assert state.interrupt is before
        assert state.final_state == "suspended"

    def test_resume_of_a_finished_run_refused(self, make_harness: Any) -> None:
        """A run that is not suspended takes no answer."""
        params = HarnessParams(model="scripted:m")
        state = make_harness(params, ScriptedProvider([reply("hi")])).run_sync("go")
        with pytest.raises(ResumeError, match=r"it is not suspended \(it is model_complete\)"):
            make_harness(params, ScriptedProvider([])).resume(state, True)
