from __future__ import annotations

import pytest

from innerloop import SpecError
from innerloop.examples import CostCap, example_specs, with_approval, with_cost_cap
from innerloop.fsm import DEFAULT_SPEC, MachineSpec, StateSpec, TransitionSpec, compile_spec

T = TransitionSpec
FINALS = (
    "'model_complete', 'tasks_complete', 'max_turns_exceeded', 'budget_exceeded', "
    "'aborted', 'failed', 'suspended'"
)


async def noop(run: object) -> None:
    return None


def snapshot(spec: MachineSpec) -> tuple[object, ...]:
    return (spec.name, spec.states, spec.transitions, dict(spec.handlers), dict(spec.guards))


def test_examples_leave_default_unchanged() -> None:
    """Building every example (twice) leaves DEFAULT_SPEC exactly as it was."""
    before = snapshot(DEFAULT_SPEC)
    for _ in range(2):
        for spec in example_specs().values():
            compile_spec(spec)
    assert snapshot(DEFAULT_SPEC) == before
    assert "approve" not in DEFAULT_SPEC.state_names


def test_examples_compose() -> None:
    """Examples stack: a cost cap on top of the approval machine compiles and has both."""
    spec = with_cost_cap(
        CostCap(max_tokens=100), lambda s, st: True, with_approval(lambda c, s: True)
    )
    assert {"approve", "cost_cap"} <= set(compile_spec(spec).spec.state_names)


class TestCompileRejects:
    def test_no_path_to_final(self) -> None:
        """A custom state that only loops on itself is rejected, naming it and the rule."""
        spec = DEFAULT_SPEC.add_state(StateSpec("spin"), noop, [T("spin", "spin")])
        spec = spec.add_transition(T("check", "spin", "tasks_complete"))
        with pytest.raises(SpecError) as err:
            compile_spec(spec)
        assert err.value.rule == "no-path-to-final"
        assert err.value.states == ("spin",)
        assert str(err.value) == (
            "state 'spin' has no path to a final state; add a transition from 'spin' "
            f"towards one of {FINALS}"
        )

    def test_unknown_guard(self) -> None:
        """A transition naming a guard nobody registered is rejected, naming the guard."""
        spec = DEFAULT_SPEC.insert_between(
            "stream",
            "execute",
            StateSpec("approve"),
            noop,
            transitions=(T("approve", "execute", "approved_by_human"), T("approve", "check")),
        )
        with pytest.raises(SpecError) as err:
            compile_spec(spec)
        assert err.value.rule == "unknown-guard"
        known = ", ".join(sorted(DEFAULT_SPEC.guards))
        assert str(err.value) == (
            "transition approve -> execute [approved_by_human] names guard "
            "'approved_by_human', which resolves to nothing; add it with with_guard() "
            f"(known guards: {known})"
        )

    def test_missing_fallthrough(self) -> None:
        """A custom state whose every edge is guarded may stall and is rejected."""
        spec = DEFAULT_SPEC.insert_between(
            "stream",
            "execute",
            StateSpec("approve"),
            noop,
            transitions=(T("approve", "execute", "has_tool_calls"),),
        )
        with pytest.raises(SpecError) as err:
            compile_spec(spec)
        assert str(err.value) == (
            "state 'approve' may stall: its last transition approve -> execute "
            "[has_tool_calls] is guarded; end its list with an unguarded transition"
        )


class TestEditing:
    def test_guarded_edge_goes_before_fallthrough(self) -> None:
        """add_transition puts a guarded edge just before the source's unguarded one."""
        spec = DEFAULT_SPEC.add_transition(T("execute", "failed", "abort_requested", "exit"))
        assert [str(t) for t in spec.transitions_from("execute")] == [
            "execute -> abort [abort_requested]",
            "execute -> suspended [interrupted]",
            "execute -> failed [abort_requested]",
            "execute -> check",
        ]

    def test_before_other_source_refused(self) -> None:
        """'before' must be an edge of the same source: priority is per state."""
        with pytest.raises(SpecError) as err:
            DEFAULT_SPEC.add_transition(
                T("execute", "check", "turn_limit"), before=T("idle", "assemble")
            )
        assert str(err.value) == (
            "cannot add execute -> check [turn_limit] before idle -> assemble: priority only "
            "orders the edges leaving one state; pass an edge leaving 'execute'"
        )

    def test_final_state_handler_refused(self) -> None:
        """A final state cannot get a handler, by add_state or replace_handler."""
        with pytest.raises(SpecError, match=r"^final state 'failed' cannot have a handler"):
            DEFAULT_SPEC.replace_handler("failed", noop)
        with pytest.raises(SpecError, match=r"^final state 'gone' cannot have a handler"):
            DEFAULT_SPEC.add_state(StateSpec("gone", "final", "gone"), noop)

    def test_missing_edge_names_the_fix(self) -> None:
        """Removing an edge that does not exist says how to list the real ones."""
        with pytest.raises(SpecError) as err:
            DEFAULT_SPEC.remove_transition(T("execute", "done"))
        assert str(err.value) == (
            "spec 'innerloop' has no transition execute -> done; its edges from 'execute' "
            "are listed by transitions_from('execute')"
        )

    def test_insert_between_missing_edge(self) -> None:
        """insert_between on an edge the spec lacks names both ends."""
        with pytest.raises(
            SpecError, match=r"^spec 'innerloop' has no transition 'idle' -> 'check'"
        ):
            DEFAULT_SPEC.insert_between("idle", "check", StateSpec("x"), noop)
