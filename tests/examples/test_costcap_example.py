from __future__ import annotations

from typing import Any

import pytest

from innerloop import HarnessParams, HarnessState, ParamsError, Usage
from innerloop.examples import CostCap, Spending, with_cost_cap
from innerloop.examples.costcap import CostCapOutcome
from innerloop.fsm import compile_spec
from innerloop.testing import ScriptedProvider, TransitionCoverage, machine_at, reply, tool_call
from innerloop.tools import ToolOutput, ToolSpec

PARAMS = HarnessParams(model="scripted:m")
COSTCAP = compile_spec(with_cost_cap(CostCap(max_tokens=20), lambda spending, state: True))


class TestTransitions:
    def test_check_to_cost_cap(self, transition_coverage: TransitionCoverage) -> None:
        """When the run goes on, check passes through cost_cap instead of assemble."""
        probe = machine_at(
            COSTCAP, "check", HarnessState(), PARAMS, observers=[transition_coverage]
        )
        assert probe.step() == "cost_cap"

    def test_cost_cap_to_assemble(self, transition_coverage: TransitionCoverage) -> None:
        """Under the cap (or after a yes), cost_cap goes on to assemble."""
        probe = machine_at(
            COSTCAP, "cost_cap", HarnessState(), PARAMS, observers=[transition_coverage]
        )
        assert probe.step() == "assemble"

    def test_declined(self, transition_coverage: TransitionCoverage) -> None:
        """After a no, cost_cap ends the run in stopped_at_cost_cap."""
        state = HarnessState(outcome=CostCapOutcome.CAP_DECLINED)
        probe = machine_at(COSTCAP, "cost_cap", state, PARAMS, observers=[transition_coverage])
        assert probe.step() == "stopped_at_cost_cap"
        assert COSTCAP.exit_reason("stopped_at_cost_cap") == "cost_cap_declined"

    def test_abort(self, transition_coverage: TransitionCoverage) -> None:
        """An abort requested while asking goes to abort, before the host's answer counts."""
        state = HarnessState(outcome=CostCapOutcome.CAP_DECLINED)
        state.request_abort()
        probe = machine_at(COSTCAP, "cost_cap", state, PARAMS, observers=[transition_coverage])
        assert probe.step() == "abort"


def test_cap_needs_an_amount() -> None:
    """A cap without tokens or dollars is refused, naming the fields."""
    with pytest.raises(ParamsError, match=r"^cost_cap: give max_tokens, max_cost_usd or both$"):
        CostCap()


def run_three_turns(make_harness: Any, ask: Any, cap: CostCap) -> HarnessState:
    async def noop(args: Any, ctx: Any) -> ToolOutput:
        return ToolOutput("ok")

    params = HarnessParams(model="scripted:m", tools=[ToolSpec("noop", "Noop", {}, noop)])
    usage = Usage(10, 5)
    script = [reply(tool_call("noop", {}), usage=usage) for _ in range(3)]
    provider = ScriptedProvider([*script, reply("done", usage=usage)])
    harness = make_harness(params, provider, machine=with_cost_cap(cap, ask))
    state: HarnessState = harness.run_sync("work")
    return state


def test_no_stops_the_run(make_harness: Any) -> None:
    """Passing 20 tokens (after turn 2, at 30) the host is asked once; no ends the run."""
    asked: list[Spending] = []

    def ask(spending: Spending, state: HarnessState) -> bool:
        asked.append(spending)
        return False

    state = run_three_turns(make_harness, ask, CostCap(max_tokens=20))
    assert asked == [Spending(30, state.cost_usd, 1)]
    assert (state.exit_reason, state.final_state, state.turns) == (
        "cost_cap_declined",
        "stopped_at_cost_cap",
        2,
    )


def test_yes_goes_on_until_the_next_multiple(make_harness: Any) -> None:
    """An async yes lets the run go on; the host is asked again past 40 tokens."""
    asked: list[int] = []

    async def ask(spending: Spending, state: HarnessState) -> bool:
        asked.append(spending.tokens)
        return True

    state = run_three_turns(make_harness, ask, CostCap(max_tokens=20))
    assert asked == [30, 45]
    assert (state.exit_reason, state.turns) == ("model_complete", 4)
