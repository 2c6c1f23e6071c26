"""Every loop ends: budgets declared by guards, the compiler's proof, the named opt-out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from innerloop import DEFAULT_SPEC, SpecError, StateSpec, TransitionSpec, compile_spec
from innerloop.examples import example_specs
from innerloop.fsm import (
    Bound,
    GuardInfo,
    MachineSpec,
    PhaseContext,
    edge_bounds,
    guard,
    guard_info,
    loop_proof,
)
from innerloop.fsm._guards import turn_limit

T = TransitionSpec
PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "bounded-loops.md"
"""The manual's page on why every loop ends."""
FIX = (
    "so a run could go round it forever; declare the budget a guard on it bounds "
    "(guard(spends='name') on a guard that holds only while the budget is left, or "
    "guard(exhausts='name') on one that holds once it is spent, listed before the cycle's "
    "edge), or, if the loop is meant to be open-ended, say so: spec.allow_unbounded("
)


async def _noop(ctx: PhaseContext) -> None:
    return None


def wants_more(ctx: PhaseContext) -> bool:
    return int(ctx.state.notes.get("asks", 0)) < 3


@guard(reads=("state.notes",), exhausts="questions")
def asked_enough(ctx: PhaseContext) -> bool:
    return int(ctx.state.notes.get("asks", 0)) >= 3


def asking(spec: MachineSpec) -> MachineSpec:
    """``approve`` between ``stream`` and ``execute`` that may go to ``ask`` and back."""
    return (
        spec.insert_between(
            "stream",
            "execute",
            StateSpec("approve"),
            _noop,
            transitions=(
                T("approve", "abort", "abort_requested", "recovery"),
                T("approve", "ask", "wants_more"),
                T("approve", "execute"),
            ),
        )
        .add_state(StateSpec("ask"), _noop, [T("ask", "approve")])
        .renamed("asking")
    )


def test_default_machine_and_examples_are_proven() -> None:
    """The default machine and the four examples compile; each lists its cycles. Each
    example puts its states on edges of the default machine without adding a way back,
    so the count stays 13; the research machine's child states lie on no cycle at all
    (``survey`` is entered only from ``idle``, which nothing enters; ``write`` leaves
    only for final states and ``abort``), so its cycles are the default machine's."""
    assert len(loop_proof(DEFAULT_SPEC).cycles) == 13
    specs = example_specs()
    assert list(specs) == ["approval", "guardrail", "costcap", "research"]
    for spec in specs.values():
        compile_spec(spec)
        assert len(loop_proof(spec).cycles) == 13
    research = {c.states for c in loop_proof(specs["research"]).cycles}
    assert research == {c.states for c in loop_proof(DEFAULT_SPEC).cycles}


def test_default_proof_names_each_cycles_budget() -> None:
    """The retry, fallback, turn, repair and compaction loops are each bounded by the
    budget that really ends them."""
    proof = {
        c.states: [(str(t), str(b)) for t, bs in c.bounded for b in bs]
        for c in loop_proof(DEFAULT_SPEC).cycles
    }
    assert proof[("call", "call")] == [
        ("call -> call [transient_retry]", "spends transient_retries")
    ]
    assert proof[("call", "backoff", "call")] == [
        ("call -> backoff [rate_limited_retry]", "spends rate_limit_retries")
    ]
    assert proof[("normalize", "call", "fallback", "normalize")] == [
        ("call -> fallback [rate_limited_fallback]", "spends fallbacks"),
        ("call -> fallback [transient_fallback]", "spends fallbacks"),
    ]
    assert proof[("assemble", "compact", "assemble")] == [
        ("assemble -> compact [over_context_budget]", "turns, after turn_limit"),
        ("compact -> assemble", "compactions, after cannot_shrink"),
    ]
    assert proof[("assemble", "normalize", "call", "stream", "check", "repair", "assemble")] == [
        ("assemble -> normalize", "turns, after turn_limit"),
        ("check -> repair [output_invalid]", "turns, after turn_limit_continuing"),
        ("repair -> assemble", "repairs, after output_rejected"),
    ]


def test_unbounded_cycle_is_refused_naming_it() -> None:
    """A loop through an undeclared guard and back fails to compile, naming the cycle,
    its edges and both fixes."""
    spec = asking(DEFAULT_SPEC.with_guard("wants_more", wants_more))
    with pytest.raises(SpecError) as err:
        compile_spec(spec)
    assert err.value.rule == "unbounded-cycle"
    assert err.value.states == ("approve", "ask")
    assert str(err.value) == (
        "machine 'asking' has a cycle no budget bounds: approve -> ask -> approve (edges "
        f"approve -> ask [wants_more]; ask -> approve), {FIX}"
        "TransitionSpec('approve', 'ask', 'wants_more'), why='...')"
    )
    assert f"SpecError: {err.value}\n" in PAGE.read_text(encoding="utf-8")


def test_self_loop_without_budget_is_refused() -> None:
    """A retry edge whose guard spends nothing is a cycle of one state."""
    spec = DEFAULT_SPEC.with_guard("retry_always", lambda ctx: True).replace_transition(
        T("call", "call", "transient_retry"), T("call", "call", "retry_always", "recovery")
    )
    with pytest.raises(
        SpecError,
        match=r"^machine 'innerloop' has a cycle no budget bounds: "
        r"call -> call \(edges call -> call \[retry_always\]\)",
    ):
        compile_spec(spec)


def test_proof_rests_on_the_declarations() -> None:
    """With the turn checks replaced by undeclared guards, the agent loop is unbounded."""
    spec = DEFAULT_SPEC.with_guard("turn_limit", lambda ctx: False).with_guard(
        "turn_limit_continuing", lambda ctx: False
    )
    with pytest.raises(
        SpecError,
        match=r"cycle no budget bounds: assemble -> normalize -> "
        r"call -> stream -> check -> assemble \(",
    ):
        compile_spec(spec)


def test_spending_guard_bounds_its_edge() -> None:
    """Declared with spends=, the loop's own guard bounds it."""
    spec = asking(DEFAULT_SPEC.with_guard("wants_more", wants_more, spends="questions"))
    compile_spec(spec)
    cycle = next(c for c in loop_proof(spec).cycles if c.states == ("approve", "ask", "approve"))
    assert (
        str(cycle) == "approve -> ask -> approve\n    approve -> ask [wants_more]: spends questions"
    )
    assert guard_info(wants_more) == GuardInfo()  # the function itself is left unmarked


def test_exhausting_guard_bounds_the_edges_after_it() -> None:
    """An edge tried after a guard that exhausts a budget is bounded by that budget."""
    spec = asking(DEFAULT_SPEC.with_guard("wants_more", wants_more))
    spec = spec.with_guard("asked_enough", asked_enough).add_transition(
        T("approve", "execute", "asked_enough"), before=T("approve", "ask", "wants_more")
    )
    compile_spec(spec)
    assert edge_bounds(spec)[("approve", "ask", "wants_more")] == (
        Bound("questions", "asked_enough", "after"),
    )
    assert edge_bounds(spec)[("approve", "execute", "asked_enough")] == ()


def test_named_opt_out_compiles_and_shows_in_the_proof() -> None:
    """allow_unbounded names the edge and the reason; the proof says so."""
    spec = asking(DEFAULT_SPEC.with_guard("wants_more", wants_more)).allow_unbounded(
        T("ask", "approve"), why="a person answers each round"
    )
    compile_spec(spec)
    cycle = next(c for c in loop_proof(spec).cycles if c.states[:2] == ("approve", "ask"))
    assert str(cycle) == (
        "approve -> ask -> approve\n"
        "    ask -> approve: allowed unbounded: a person answers each round"
    )


def test_opt_out_needs_a_reason_and_a_real_edge() -> None:
    """An empty reason is refused at once; an edge the spec lacks, at compile time."""
    with pytest.raises(SpecError, match=r"^allow_unbounded\(ask -> approve\) needs a reason"):
        DEFAULT_SPEC.allow_unbounded(T("ask", "approve"), why=" ")
    spec = DEFAULT_SPEC.allow_unbounded(T("call", "call", "transient_retyr"), why="x")
    with pytest.raises(SpecError) as err:
        compile_spec(spec)
    assert str(err.value) == (
        "allow_unbounded names call -> call [transient_retyr], which spec 'innerloop' does "
        "not have; did you mean 'call -> call [transient_retry]'? "
        "(its edges from 'call' are listed by transitions_from('call'))"
    )


def test_guard_declaration_validated() -> None:
    """A read outside params/state, or a budget that is not a name, is refused."""
    with pytest.raises(SpecError, match=r"^guard reads 'ctx.deps.clock': a read is a dotted"):
        guard(reads=("ctx.deps.clock",))
    with pytest.raises(SpecError, match=r"^guard budget spends='two words' must be a name"):
        guard(spends="two words")
    reads = ("state.turns", "state.turns_at_start", "params.max_turns")
    assert guard_info(turn_limit) == GuardInfo(reads, None, "turns")


def test_readme_shows_the_default_proof() -> None:
    """The "Every loop ends" page shows loop_proof(DEFAULT_SPEC), as generated."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(
        r"# Every loop ends\n.*?`str\(loop_proof\(DEFAULT_SPEC\)\)` writes it"
        r".*?```text\n(.*?)```",
        text,
        re.S,
    )
    assert found is not None
    assert found.group(1) == str(loop_proof(DEFAULT_SPEC)), (
        "paste str(innerloop.fsm.loop_proof(DEFAULT_SPEC)) into docs/concepts/bounded-loops.md"
    )
