"""Scenarios: for every transition, the context in which the machine chooses exactly that
transition, built from real data and checked against both engines."""

from __future__ import annotations

import json

import attrs
import pytest

from innerloop import (
    HarnessParams,
    HarnessState,
    Message,
    ModelResponse,
    ProviderError,
    ToolUseBlock,
)
from innerloop._errors import ErrorCategory
from innerloop.durable import state_from_dict, state_to_dict
from innerloop.examples import example_specs
from innerloop.examples.approval import ApprovalOutcome
from innerloop.examples.costcap import CostCapOutcome
from innerloop.examples.guardrail import RedactOutcome
from innerloop.fsm import (
    DEFAULT_SPEC,
    ChildOutcome,
    CompiledMachine,
    Outcome,
    TransitionSpec,
    compile_spec,
)
from innerloop.testing import (
    FakeClock,
    ScenarioError,
    Scenarios,
    phase_context,
    scenario,
)

MACHINE = compile_spec(DEFAULT_SPEC)


def _approved(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = ApprovalOutcome.APPROVED


def _clean(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = RedactOutcome.CLEAN


def _declined(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = CostCapOutcome.CAP_DECLINED


def _under_cap(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = CostCapOutcome.UNDER_CAP


def _children_succeeded(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = ChildOutcome.SUCCEEDED


def _a_child_failed(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = ChildOutcome.FAILED


SPECS = example_specs()
EXAMPLES = {
    "approval": Scenarios(SPECS["approval"]).add("approve", "execute", _approved),
    "guardrail": Scenarios(SPECS["guardrail"]).add("redact", "check", _clean),
    "costcap": Scenarios(SPECS["costcap"])
    .add("cost_cap", "stopped_at_cost_cap", _declined)
    .add("cost_cap", "assemble", _under_cap),
    "research": Scenarios(SPECS["research"])
    .add("survey", "assemble", _children_succeeded)
    .add("survey", "failed", _a_child_failed)
    .add("write", "model_complete", _children_succeeded)
    .add("write", "failed", _a_child_failed),
}
EXAMPLE_EDGES = [(name, t) for name, s in EXAMPLES.items() for t in s.spec.transitions]


def _steps_to(machine: CompiledMachine, edge: TransitionSpec, scenarios: Scenarios) -> None:
    ctx = scenarios.context(edge.source, edge.target, edge.guard)
    assert machine.select(edge.source, ctx) == edge
    sm = machine.instantiate(ctx, at=edge.source)
    assert machine.send_step(sm) == edge


class TestDefaultMachine:
    @pytest.mark.parametrize("edge", DEFAULT_SPEC.transitions, ids=str)
    def test_the_table_engine_chooses_the_edge(self, edge: TransitionSpec) -> None:
        """Each default transition's scenario makes the lean table lookup take it."""
        ctx = scenario(edge.source, edge.target, edge.guard)
        assert MACHINE.select(edge.source, ctx) == edge

    @pytest.mark.parametrize("edge", DEFAULT_SPEC.transitions, ids=str)
    def test_the_statemachine_engine_chooses_the_edge(self, edge: TransitionSpec) -> None:
        """Each default transition's scenario makes python-statemachine's send('step')
        take it."""
        ctx = scenario(edge.source, edge.target, edge.guard)
        assert MACHINE.send_step(MACHINE.instantiate(ctx, at=edge.source)) == edge

    @pytest.mark.parametrize("edge", DEFAULT_SPEC.transitions, ids=str)
    def test_the_state_is_plain_data(self, edge: TransitionSpec) -> None:
        """Each scenario's state goes through JSON and back unchanged: no mock in it."""
        state = scenario(edge.source, edge.target, edge.guard).state
        data = state_to_dict(state)
        assert state_to_dict(state_from_dict(json.loads(json.dumps(data)))) == data

    def test_every_default_edge_has_a_builder(self) -> None:
        """No default transition is left without a scenario."""
        assert Scenarios(DEFAULT_SPEC).missing() == []


class TestRealData:
    def test_a_rate_limit_is_a_real_provider_error(self) -> None:
        """call -> backoff: a 429 ProviderError with backoff retries left."""
        state = scenario("call", "backoff").state
        assert isinstance(state.error, ProviderError)
        assert (state.error.category, state.error.status) == (ErrorCategory.RATE_LIMITED, 429)
        assert state.rate_limit_failures == 1
        assert state.outcome is Outcome.FAILED

    def test_a_tool_turn_is_a_real_model_response(self) -> None:
        """stream -> execute: the model's response asks for a tool, and the history ends
        with it."""
        state = scenario("stream", "execute").state
        assert isinstance(state.last_response, ModelResponse)
        assert state.last_response.stop_reason == "tool_use"
        assert state.pending_tool_uses == ("toolu_scenario_1",)
        assert state.history[-1] == state.last_response.message

    def test_a_fallback_gets_a_model_to_fall_back_to(self) -> None:
        """call -> fallback adds a model to a chain that has none left, and keeps the
        chain it is given."""
        for guard in ("rate_limited_fallback", "transient_fallback"):
            assert len(scenario("call", "fallback", guard).params.model_chain) == 2
        params = HarnessParams(model="scripted:a", fallbacks=["scripted:b", "scripted:c"])
        assert scenario("call", "fallback", "transient_fallback", params=params).params is params

    def test_the_budgets_a_guard_needs_are_set(self) -> None:
        """assemble -> compact and check -> budget_exceeded set a context and a spend
        budget when the params have none, and keep the ones given."""
        ctx = scenario("assemble", "compact")
        assert ctx.params.context_budget is not None
        assert ctx.state.context_tokens == ctx.params.context_budget + 1
        assert scenario("check", "budget_exceeded").params.spend_budget is not None

    def test_overrides_are_set_on_the_state(self) -> None:
        """Keyword overrides land on the state, and the edge is still the chosen one."""
        ctx = scenario("call", "backoff", rate_limit_failures=3, turns=2)
        assert (ctx.state.rate_limit_failures, ctx.state.turns) == (3, 2)
        assert MACHINE.select("call", ctx).target == "backoff"

    async def test_a_handler_runs_on_a_scenario(self) -> None:
        """An async test: the backoff handler waits what the server asked, then the
        machine calls again."""
        clock = FakeClock()
        error = ProviderError(ErrorCategory.RATE_LIMITED, "slow down", status=429, retry_after=7)
        ctx = scenario("call", "backoff", error=error)
        ctx = phase_context(ctx.params, ctx.state, attrs.evolve(ctx.deps, clock=clock))
        events = [e async for e in DEFAULT_SPEC.handlers["backoff"](ctx)]
        assert [type(e).__name__ for e in events] == ["Backoff"]
        assert clock.sleeps == [7]
        assert MACHINE.select("backoff", ctx) == TransitionSpec("backoff", "call", None, "recovery")


class TestErrors:
    def test_an_ambiguous_edge_lists_the_guards(self) -> None:
        """Two edges join call and abort: the error names both guards."""
        with pytest.raises(ScenarioError) as e:
            scenario("call", "abort")
        assert str(e.value) == (
            "machine 'innerloop' has 2 transitions call -> abort; pass the guard: "
            "guard='abort_requested' for call -> abort [abort_requested], "
            "or guard=None for call -> abort"
        )

    def test_an_unknown_edge_says_did_you_mean(self) -> None:
        """A misspelt target: the error offers the nearest edges."""
        with pytest.raises(ScenarioError) as e:
            scenario("call", "bakoff")
        assert str(e.value) == (
            "machine 'innerloop' has no transition call -> bakoff; did you mean "
            "call -> backoff [rate_limited_retry] or call -> abort [abort_requested] "
            "or call -> abort?"
        )

    def test_a_wrong_guard_lists_the_right_ones(self) -> None:
        """The edge exists, but not with that guard."""
        with pytest.raises(ScenarioError) as e:
            scenario("stream", "compact", "failed")
        assert str(e.value) == (
            "machine 'innerloop' has no transition stream -> compact [failed]; pass "
            "guard='context_overflow' for stream -> compact [context_overflow], "
            "or guard='truncated' for stream -> compact [truncated]"
        )

    def test_an_unknown_state_lists_the_states(self) -> None:
        """A source the machine does not have."""
        with pytest.raises(ScenarioError) as e:
            scenario("spam", "eggs")
        assert str(e.value) == (
            "machine 'innerloop' has no transition spam -> eggs; 'spam' is not one of its "
            "states: idle, assemble, compact, normalize, call, stream, execute, check, "
            "repair, backoff, fallback, abort, model_complete, tasks_complete, "
            "max_turns_exceeded, budget_exceeded, aborted, failed, suspended"
        )

    def test_a_custom_edge_without_a_builder_says_how_to_add_one(self) -> None:
        """An edge out of a custom state has no default scenario."""
        with pytest.raises(ScenarioError) as e:
            scenario("redact", "check", spec=SPECS["guardrail"])
        assert str(e.value) == (
            "no scenario for redact -> check of machine 'guardrail': register one with "
            "Scenarios(spec).add('redact', 'check', build), where build(params, state) "
            "sets the state's fields so that the guards tried before it are false"
        )

    def test_overrides_that_change_the_edge_are_refused(self) -> None:
        """An override that makes the machine choose another edge is named."""
        with pytest.raises(ScenarioError) as e:
            scenario("call", "backoff", rate_limit_failures=99)
        assert str(e.value) == (
            "the scenario of call -> backoff [rate_limited_retry] makes machine 'innerloop' "
            "choose call -> abort instead; drop or change the overrides "
            "(rate_limit_failures=99)"
        )

    def test_an_unknown_field_is_refused(self) -> None:
        """An override that is no HarnessState field."""
        with pytest.raises(ScenarioError, match="HarnessState has no field 'turnz'; the fields"):
            scenario("call", "backoff", turnz=1)

    def test_an_added_guard_that_wins_first_is_named(self) -> None:
        """A derived machine tries a guard of its own before an inherited edge: the
        inherited edge's default scenario is refused, naming the edge chosen instead."""
        spec = (
            DEFAULT_SPEC.with_guard("one_turn_only", lambda ctx: ctx.state.turns >= 1)
            .add_transition(
                TransitionSpec("check", "model_complete", "one_turn_only", "exit"),
                before=TransitionSpec("check", "abort", "abort_requested", "recovery"),
            )
            .renamed("one_turn")
        )
        with pytest.raises(ScenarioError) as e:
            scenario("check", "assemble", spec=spec)
        assert str(e.value) == (
            "the scenario of check -> assemble makes machine 'one_turn' choose "
            "check -> model_complete [one_turn_only] instead; register a builder with "
            ".add('check', 'assemble', build) whose state makes the guards tried before "
            "check -> assemble false"
        )


class TestCustomMachines:
    def test_only_the_custom_edges_need_a_builder(self) -> None:
        """Inherited and rerouted edges with default guard functions reuse the default
        scenarios; edges out of a custom state need their own, unless guarded by a default
        guard."""
        missing = {name: [str(t) for t in Scenarios(s).missing()] for name, s in SPECS.items()}
        assert missing == {
            "approval": ["approve -> execute"],
            "guardrail": ["redact -> check"],
            "costcap": [
                "cost_cap -> stopped_at_cost_cap [cost_cap_declined]",
                "cost_cap -> assemble",
            ],
            "research": [
                "survey -> assemble [child_succeeded]",
                "survey -> failed",
                "write -> model_complete [child_succeeded]",
                "write -> failed",
            ],
        }

    def test_every_example_has_its_scenarios(self) -> None:
        """EXAMPLES (the builders of each example's own edges) names every example."""
        assert list(EXAMPLES) == list(SPECS)

    def test_a_replaced_guard_function_loses_its_default_scenario(self) -> None:
        """Same guard name, another function: the default builder is not assumed to fit."""
        spec = DEFAULT_SPEC.with_guard("model_finished", lambda ctx: False).renamed("never")
        assert [str(t) for t in Scenarios(spec).missing()] == [
            "check -> model_complete [model_finished]"
        ]

    @pytest.mark.parametrize(("name", "edge"), EXAMPLE_EDGES, ids=lambda v: str(v))
    def test_every_example_edge_has_a_scenario_that_selects_it(
        self, name: str, edge: TransitionSpec
    ) -> None:
        """Every transition of the four examples, both engines."""
        _steps_to(EXAMPLES[name].machine, edge, EXAMPLES[name])

    def test_add_returns_new_scenarios(self) -> None:
        """Registering leaves the scenarios it was called on as they were."""
        base = Scenarios(SPECS["guardrail"])
        added = base.add("redact", "check", _clean)
        assert base.missing() != added.missing() == []

    def test_a_registered_builder_replaces_the_default(self) -> None:
        """A builder added for an inherited edge is the one used."""

        def late_tool_turn(params: HarnessParams, state: HarnessState) -> None:
            call = ToolUseBlock("t1", "echo", {"text": "hi"})
            state.history = [Message.user("echo hi"), Message.assistant([call])]
            state.outcome = Outcome.RESPONSE
            state.turns = 5

        scenarios = Scenarios(DEFAULT_SPEC).add("stream", "execute", late_tool_turn)
        assert scenarios.context("stream", "execute").state.turns == 5
        assert scenario("stream", "execute", spec=scenarios).state.turns == 5

    def test_add_refuses_an_ambiguous_edge(self) -> None:
        """add picks an edge the way context does."""
        with pytest.raises(ScenarioError, match="has 2 transitions compact -> abort"):
            Scenarios(DEFAULT_SPEC).add("compact", "abort", _clean)

    def test_a_guarded_custom_edge_names_its_guard(self) -> None:
        """The error for a guarded custom edge says which guard the builder must satisfy."""
        with pytest.raises(ScenarioError) as e:
            scenario("cost_cap", "stopped_at_cost_cap", spec=SPECS["costcap"])
        assert str(e.value).endswith(
            "register one with Scenarios(spec).add('cost_cap', 'stopped_at_cost_cap', build), "
            "where build(params, state) sets the state's fields that 'cost_cap_declined' reads"
        )
