from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from innerloop import HarnessParams
from innerloop._events import Transition
from innerloop.diagrams import Trace, build_diagram, load_trace, to_dot, trace_from_events
from innerloop.fsm import DEFAULT_SPEC, compile_spec
from innerloop.testing import ScriptedProvider, reply


class TestBuildDiagram:
    def test_default_machine_size(self) -> None:
        """The default machine draws as 18 states and 39 edges, with kinds and exits."""
        d = build_diagram(DEFAULT_SPEC)
        assert (len(d.states), len(d.edges)) == (19, 45)
        assert d.state("compact").kind == "recovery"
        assert d.state("failed").exit_reason == "failed"

    def test_edge_tooltips_show_reads_and_budgets(self) -> None:
        """Each edge's tooltip (in DOT and the SVG) names what its guard reads and the
        budget that bounds it."""
        d = build_diagram(DEFAULT_SPEC)
        tips = {e.key: e.tooltip for e in d.edges}
        assert tips[("call", "call", "transient_retry")] == (
            "call -> call [transient_retry]\n"
            "reads state.error, state.transient_failures, params.recovery.transient_retries\n"
            "bounded: spends transient_retries"
        )
        assert tips[("check", "assemble", None)] == (
            "check -> assemble\nbounded: turns, after turn_limit_continuing"
        )
        assert tips[("compact", "abort", "cannot_shrink")] == (
            "compact -> abort [cannot_shrink]\nreads state.outcome\n"
            "exhausts compactions: bounds the edges after it"
        )
        assert 'tooltip="call -> call [transient_retry]\nreads state.error' in to_dot(d)

    def test_priorities_and_labels(self) -> None:
        """Edges carry their 1-based priority; the unguarded last one reads 'else'."""
        d = build_diagram(compile_spec(DEFAULT_SPEC))
        call = [e.label for e in d.edges if e.source == "call"]
        assert call == [
            "1. abort_requested",
            "2. call_opened",
            "3. rate_limited_retry",
            "4. rate_limited_fallback",
            "5. transient_retry",
            "6. transient_fallback",
            "7. context_overflow",
            "8. else",
        ]
        assert [e.label for e in d.edges if e.source == "normalize"] == [""]

    def test_groups_merge_parallel_edges(self) -> None:
        """Edges between the same two states are drawn as one group with one line each."""
        groups = {(g.source, g.target): g for g in build_diagram(DEFAULT_SPEC).edge_groups()}
        assert groups[("compact", "abort")].labels == ("1. abort_requested", "2. cannot_shrink")
        assert groups[("compact", "abort")].kind == "recovery"

    def test_unknown_current_state(self) -> None:
        """Highlighting a state the machine lacks fails with the state's name."""
        with pytest.raises(KeyError, match="no state 'nowhere'"):
            build_diagram(DEFAULT_SPEC, current="nowhere")


class TestTrace:
    def test_counts_visited_and_end(self, run_events: list[dict[str, object]]) -> None:
        """A trace counts each edge taken and knows the states visited and the end state."""
        d = build_diagram(DEFAULT_SPEC, trace=run_events)
        assert d.counts[("normalize", "call", None)] == 2
        assert d.counts[("call", "call", "transient_retry")] == 1
        assert d.visited == {
            "idle", "assemble", "normalize", "call", "stream", "execute", "check",
            "model_complete",
        }  # fmt: skip
        assert d.end_state == "model_complete"

    def test_exit_path_erases_loops(self, run_events: list[dict[str, object]]) -> None:
        """The exit path is the run with its loops (and self-loops) erased."""
        assert trace_from_events(run_events).exit_path == (
            ("idle", "assemble", None),
            ("assemble", "normalize", None),
            ("normalize", "call", None),
            ("call", "stream", "call_opened"),
            ("stream", "check", None),
            ("check", "model_complete", "model_finished"),
        )

    def test_foreign_trace_rejected(self) -> None:
        """A trace taking an edge the machine lacks is refused with a hint to pass --spec."""
        trace = Trace((("idle", "approve", None),))
        with pytest.raises(ValueError, match="does not have") as err:
            build_diagram(DEFAULT_SPEC, trace=trace)
        assert str(err.value) == (
            "the trace takes idle -> approve [no guard], which machine 'innerloop' does not "
            "have; pass the spec the run used (--spec)"
        )

    def test_load_jsonl(self, tmp_path: Path, run_events: list[dict[str, object]]) -> None:
        """A JSONL event log loads into the same trace as the event dicts."""
        path = tmp_path / "run.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in run_events) + "\n")
        assert load_trace(path) == trace_from_events(run_events)


def test_live_run_current(make_harness: Any) -> None:
    """While a run goes, its diagram highlights the state it has just entered."""
    harness = make_harness(HarnessParams(model="scripted:m"), ScriptedProvider([reply("hi")]))
    run = harness.start("hello")
    assert build_diagram(run).current == "idle"

    async def drive() -> list[tuple[str, str | None]]:
        return [
            (event.target, build_diagram(run).current)  # read as each transition arrives
            async for event in run.events()
            if isinstance(event, Transition)
        ]

    seen = asyncio.run(drive())
    assert seen == [(t, t) for t, _ in seen]
    assert [t for t, _ in seen][-1] == "model_complete"
