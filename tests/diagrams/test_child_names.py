"""A child state's cluster takes its trace from its runs' events by the child's name, the
first level of their path, whatever the state is called."""

from __future__ import annotations

from typing import Any

from innerloop import Child, HarnessParams
from innerloop.diagrams import build_diagram
from innerloop.fsm import DEFAULT_SPEC, StateSpec, fan_out_handler, with_child_state
from innerloop.testing import ScriptedProvider


def _step(path: str, source: str, target: str, guard: str | None = None) -> dict[str, Any]:
    event = {"type": "transition", "source": source, "target": target, "guard": guard}
    return {"type": "child_event", "path": path, "event": event}


def test_a_fan_out_state_reads_its_childs_paths() -> None:
    """State ``survey`` runs child ``web``: the branches ``web#1`` and ``web#2`` are laid
    over its cluster, an agent tool's ``web[c1]`` and another child's lines are not."""
    web = Child("web", HarnessParams(model="k:m"), providers={"k": ScriptedProvider([])})
    spec = with_child_state(
        DEFAULT_SPEC,
        StateSpec("survey"),
        fan_out_handler(web, lambda state: ["a", "b"]),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("survey")
    events = [
        {"type": "transition", "source": "idle", "target": "survey", "guard": None},
        _step("web#1", "idle", "assemble"),
        _step("web#2", "idle", "assemble"),
        _step("web[c1]", "idle", "assemble"),
        _step("other", "idle", "assemble"),
    ]
    diagram = build_diagram(spec, trace=events)
    state = diagram.state("survey")
    assert state.child_name == "web"
    assert state.child is not None
    assert dict(state.child.counts) == {("idle", "assemble", None): 2}
    assert dict(diagram.counts) == {("idle", "survey", None): 1}
