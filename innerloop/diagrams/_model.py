"""The diagram model: a small frozen picture of a machine, optionally with a run on it.

Renderers (DOT, Mermaid) only read this model; they never look at a spec or a run. A
:class:`Diagram` is built from a :class:`~innerloop.fsm.MachineSpec`, a
:class:`~innerloop.fsm.CompiledMachine` or a live :class:`~innerloop.fsm.Run`, and a run's
event log can be laid over it with :meth:`Diagram.with_trace`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from innerloop._eventlog import pick_run, split_runs
from innerloop.fsm._bounds import edge_bounds
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._driver import Run
from innerloop.fsm._guardinfo import GuardInfo, guard_info
from innerloop.fsm._spec import EdgeKey, EdgeKind, MachineSpec, StateKind

__all__ = [
    "Diagram",
    "DiagramChild",
    "DiagramEdge",
    "DiagramEdgeGroup",
    "DiagramState",
    "Trace",
    "build_diagram",
    "child_events",
    "load_trace",
    "log_runs",
    "pick_run",
    "trace_from_events",
]

TIMES = "\N{MULTIPLICATION SIGN}"
"""Written before an edge's count in the renderers' labels."""


@attrs.frozen
class DiagramChild:
    """A machine a child state runs, drawn inside it as a cluster with its own trace."""

    name: str | None
    """The child's name: the first level of its runs' event paths (``web`` of
    ``web#2``), by which their events are laid over its cluster."""
    diagram: Diagram


@attrs.frozen
class DiagramState:
    """A state as drawn: its kind, and for a final state the exit reason it reports."""

    name: str
    kind: StateKind
    exit_reason: str | None = None
    doc: str = ""
    children: tuple[DiagramChild, ...] = ()
    """The machines a child state runs (``child_handler``, ``handoff_handler``: one;
    ``fan_out_handler`` over a list of different children: one per child, in its
    order), each drawn inside it as a cluster, with its own trace."""

    @property
    def child(self) -> Diagram | None:
        """The first child's machine (the only one but for a fan-out over several)."""
        return self.children[0].diagram if self.children else None

    @property
    def child_name(self) -> str | None:
        """The first child's name."""
        return self.children[0].name if self.children else None

    @property
    def final(self) -> bool:
        return self.kind == "final"


@attrs.frozen
class DiagramEdge:
    """A transition as drawn. ``priority`` is its 1-based place among the edges leaving
    ``source`` (the first guard that holds wins); ``siblings`` is how many edges leave it."""

    source: str
    target: str
    guard: str | None
    kind: EdgeKind
    priority: int
    siblings: int
    reads: tuple[str, ...] = ()
    """What the guard declares it reads."""
    exhausts: str | None = None
    """The budget the guard's edge is taken on exhausting (bounding the edges after it)."""
    bounds: tuple[str, ...] = ()
    """Why the edge cannot be taken forever (``spends turns``, ``turns, after turn_limit``)."""

    @property
    def tooltip(self) -> str:
        """The edge, what its guard reads and the budgets that bound it, one per line."""
        lines = [f"{self.source} -> {self.target}" + (f" [{self.guard}]" if self.guard else "")]
        if self.reads:
            lines.append(f"reads {', '.join(self.reads)}")
        if self.exhausts:
            lines.append(f"exhausts {self.exhausts}: bounds the edges after it")
        if self.bounds:
            lines.append(f"bounded: {'; '.join(self.bounds)}")
        return "\n".join(lines)

    @property
    def key(self) -> EdgeKey:
        return (self.source, self.target, self.guard)

    @property
    def condition(self) -> str:
        """The guard name, ``else`` for the unguarded last edge of a choice, or ``""``."""
        if self.guard is not None:
            return self.guard
        return "else" if self.siblings > 1 else ""

    @property
    def label(self) -> str:
        """``condition`` with the priority in front when the source has a choice."""
        if self.siblings > 1:
            return f"{self.priority}. {self.condition}"
        return self.condition


@attrs.frozen
class DiagramEdgeGroup:
    """The edges from one state to another, drawn as one arrow with one label line each.

    Its kind is the kind of its first (highest priority) edge."""

    source: str
    target: str
    edges: tuple[DiagramEdge, ...]

    @property
    def kind(self) -> EdgeKind:
        return self.edges[0].kind

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(e.label for e in self.edges if e.label)

    @property
    def tooltip(self) -> str:
        return "\n\n".join(e.tooltip for e in self.edges)


@attrs.frozen
class Trace:
    """What a run did: the transitions it took in order, and where it ended."""

    steps: tuple[EdgeKey, ...] = ()
    final_state: str | None = None
    exit_reason: str | None = None

    @property
    def counts(self) -> Mapping[EdgeKey, int]:
        """How many times each edge was taken."""
        out: dict[EdgeKey, int] = {}
        for key in self.steps:
            out[key] = out.get(key, 0) + 1
        return out

    def visited(self, initial: str) -> frozenset[str]:
        """Every state the run was in, starting with ``initial``."""
        return frozenset({initial, *(target for _, target, _ in self.steps)})

    @property
    def exit_path(self) -> tuple[EdgeKey, ...]:
        """The path to the exit: the transitions taken with every loop erased, so the result
        is a simple path from the first state to the last one, made of edges really taken."""
        path: list[EdgeKey] = []
        for key in self.steps:
            source, target, _ = key
            if target == source:  # a self-loop leaves the path as it is
                continue
            back = next((i for i, edge in enumerate(path) if edge[0] == target), None)
            if back is None:
                path.append(key)
            else:  # back at a state already on the path: erase the loop
                del path[back:]
        return tuple(path)


def trace_from_events(events: Iterable[Mapping[str, Any]]) -> Trace:
    """A trace from event dicts (``event.to_dict()``): ``transition`` and ``finished``
    events are read, every other event is skipped."""
    steps: list[EdgeKey] = []
    final_state = exit_reason = None
    for event in events:
        kind = event.get("type")
        if kind == "transition":
            steps.append((event["source"], event["target"], event.get("guard")))
        elif kind == "finished":
            final_state = event.get("final_state")
            exit_reason = event.get("exit_reason")
    return Trace(tuple(steps), final_state, exit_reason)


def child_events(events: Iterable[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    """The events of the children of state ``name`` (paths ``name``, ``name#n``) as their
    own runs saw them: each ``child_event``'s inner event, and a grandchild's again as a
    ``child_event`` with the rest of its path."""
    out: list[Mapping[str, Any]] = []
    for event in events:
        if event.get("type") != "child_event":
            continue
        head, _, rest = str(event.get("path", "")).partition("/")
        if head != name and head.partition("#")[0] != name:
            continue
        out.append({**event, "path": rest} if rest else event["event"])
    return out


def log_runs(path: str | Path) -> list[list[Mapping[str, Any]]]:
    """The runs of a JSONL event log (``innerloop run --log``, or one
    ``json.dumps(event.to_dict())`` per line), each a list of its event dicts, in order; a
    ``log_header`` line is skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines if line.strip()]
    return split_runs([e for e in events if e.get("type") != "log_header"])


def load_trace(path: str | Path, run: int | str | None = None) -> Trace:
    """A trace from a JSONL event log; ``run`` picks one run of a log holding several
    (see :func:`pick_run`)."""
    events, _ = pick_run(log_runs(path), run, str(path))
    return trace_from_events(events)


@attrs.frozen
class Diagram:
    """A machine to draw, with an optional live state and run trace on top."""

    name: str
    initial: str
    states: tuple[DiagramState, ...]
    edges: tuple[DiagramEdge, ...]
    current: str | None = None
    """The state a live machine is in, highlighted."""
    trace: Trace | None = None
    """A run laid over the machine: states visited, edges taken with counts, exit path."""

    def state(self, name: str) -> DiagramState:
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(f"diagram {self.name!r} has no state {name!r}")

    def with_current(self, state: str | None) -> Diagram:
        """The same diagram with ``state`` highlighted as the live one."""
        if state is not None:
            self.state(state)
        return attrs.evolve(self, current=state)

    def with_trace(self, trace: Trace | Iterable[Mapping[str, Any]]) -> Diagram:
        """The same diagram with a run's trace (or its event dicts) laid over it.

        Raises ``ValueError`` when the trace takes an edge the machine does not have (a log
        of another machine)."""
        if not isinstance(trace, Trace):
            events = list(trace)
            trace = trace_from_events(events)
            states = tuple(
                attrs.evolve(
                    s,
                    children=tuple(
                        attrs.evolve(
                            c, diagram=c.diagram.with_trace(child_events(events, c.name or s.name))
                        )
                        for c in s.children
                    ),
                )
                for s in self.states
            )
            return attrs.evolve(self, states=states).with_trace(trace)
        known = {e.key for e in self.edges}
        for key in trace.steps:
            if key not in known:
                source, target, guard = key
                raise ValueError(
                    f"the trace takes {source} -> {target} [{guard or 'no guard'}], which "
                    f"machine {self.name!r} does not have; pass the spec the run used (--spec)"
                )
        return attrs.evolve(self, trace=trace)

    def taken(self) -> Diagram:
        """Only what the traced run used: the states it was in (and the live one) and the
        edges it took, each child's machine likewise (a child that did not run left out);
        without a trace, the same diagram. A run's path reads at a size the whole machine
        does not."""
        if self.trace is None:
            return self
        keep = self.visited | {self.current}
        counts = self.counts
        states = tuple(
            attrs.evolve(
                s,
                children=tuple(
                    attrs.evolve(c, diagram=c.diagram.taken())
                    for c in s.children
                    if c.diagram.trace is None or c.diagram.trace.steps
                ),
            )
            for s in self.states
            if s.name in keep
        )
        edges = tuple(e for e in self.edges if counts.get(e.key))
        return attrs.evolve(self, states=states, edges=edges)

    # -- what renderers ask ----------------------------------------------------------------

    def edge_groups(self) -> tuple[DiagramEdgeGroup, ...]:
        """Edges grouped by (source, target), in the order their first edge is declared."""
        groups: dict[tuple[str, str], list[DiagramEdge]] = {}
        for e in self.edges:
            groups.setdefault((e.source, e.target), []).append(e)
        return tuple(DiagramEdgeGroup(s, t, tuple(es)) for (s, t), es in groups.items())

    @property
    def visited(self) -> frozenset[str]:
        return self.trace.visited(self.initial) if self.trace else frozenset()

    @property
    def counts(self) -> Mapping[EdgeKey, int]:
        return self.trace.counts if self.trace else {}

    @property
    def exit_path(self) -> frozenset[EdgeKey]:
        return frozenset(self.trace.exit_path) if self.trace else frozenset()

    @property
    def end_state(self) -> str | None:
        """Where the traced run ended."""
        if self.trace is None:
            return None
        if self.trace.final_state is not None:
            return self.trace.final_state
        return self.trace.steps[-1][1] if self.trace.steps else self.initial


def _spec_of(machine: MachineSpec | CompiledMachine | Run) -> MachineSpec:
    if isinstance(machine, Run):
        return machine.machine.spec
    if isinstance(machine, CompiledMachine):
        return machine.spec
    return machine


def child_machines(spec: MachineSpec, state: str) -> list[tuple[str | None, CompiledMachine]]:
    """The machines state ``state``'s handler runs as children, each with the child's
    name: a handler made by ``child_handler`` and the like names its ``child``, a
    ``fan_out_handler`` over a list of different children names them all (``children``)."""
    handler = spec.handlers.get(state)
    children = getattr(handler, "children", None)
    if not isinstance(children, tuple | list):
        children = [getattr(handler, "child", None)]
    out: list[tuple[str | None, CompiledMachine]] = []
    for child in children:
        compiled = getattr(child, "compiled", None)
        if isinstance(compiled, CompiledMachine):
            name = getattr(child, "name", None)
            out.append((name if isinstance(name, str) else None, compiled))
    return out


def _child_diagrams(spec: MachineSpec, state: str) -> tuple[DiagramChild, ...]:
    return tuple(
        DiagramChild(name, build_diagram(compiled))
        for name, compiled in child_machines(spec, state)
    )


def build_diagram(
    machine: MachineSpec | CompiledMachine | Run,
    *,
    current: str | None = None,
    trace: Trace | Iterable[Mapping[str, Any]] | None = None,
) -> Diagram:
    """The diagram of a spec, a compiled machine or a run.

    For a :class:`~innerloop.fsm.Run`, live or finished, ``current`` defaults to the state
    it is in now and ``trace`` to the path it took (:attr:`~innerloop.fsm.Run.path`).
    ``trace`` is a :class:`Trace` or the run's event dicts."""
    spec = _spec_of(machine)
    states = tuple(
        DiagramState(s.name, s.kind, s.exit_reason, s.doc, _child_diagrams(spec, s.name))
        for s in spec.states
    )
    edges: list[DiagramEdge] = []
    bounds = edge_bounds(spec)
    for s in spec.states:
        out = spec.transitions_from(s.name)
        for i, t in enumerate(out, start=1):
            fn = spec.guards.get(t.guard) if t.guard is not None else None
            info = guard_info(fn) if fn is not None else GuardInfo()
            edges.append(
                DiagramEdge(
                    t.source,
                    t.target,
                    t.guard,
                    t.kind,
                    i,
                    len(out),
                    info.reads,
                    info.exhausts,
                    tuple(map(str, bounds[t.key])),
                )
            )
    if isinstance(machine, Run):
        current = machine.current if current is None else current
        if trace is None and machine.path:
            state = machine.state
            steps = tuple(t.key for t in machine.path)
            trace = Trace(steps, state.final_state, state.exit_reason)
    diagram = Diagram(spec.name, spec.initial, states, tuple(edges)).with_current(current)
    return diagram if trace is None else diagram.with_trace(trace)
