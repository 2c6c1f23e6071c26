"""Every loop ends: which edges the guards' budgets bound, and the proof that every cycle of
a machine passes through one.

An edge is *bounded* by budget ``b`` when its own guard spends ``b`` (``guard(spends="b")``:
it holds only while ``b`` is left) or when an edge listed before it out of the same state
exhausts ``b`` (``guard(exhausts="b")``: that edge is taken once ``b`` is spent, so this one
only while ``b`` is left), or when the spec allows it by name
(:meth:`MachineSpec.allow_unbounded`). Take every bounded edge out of the machine's graph:
if what is left has no cycle, every cycle of the machine passes through a bounded edge.
``compile_spec`` checks this and refuses a machine with a cycle no budget bounds, naming
the cycle.

What the proof assumes (it is about the graph; the rest is what the guards declare):

* a spending guard holds only while its budget is left, an exhausting one once it is spent;
* a budget's counter rises each time a run goes round a cycle through an edge it bounds
  (the default machine: ``turns`` when a model response is accepted, ``rate_limit_retries``
  and ``transient_retries`` on each failed call of their kind, ``fallbacks`` (``state.active``)
  when the fallback state switches models, ``repairs`` (``state.output_repairs``) in the
  repair state, ``compactions``: the history shrinks, else the compaction ``cannot_shrink``);
* a counter is reset only on a cycle that another budget bounds (the retry counters when a
  turn's response is accepted or the model switches; never ``turns`` or ``fallbacks``).

Where a cycle is bounded by several budgets, :func:`loop_proof` lists them all; one that
holds is enough (a compaction loop also passes ``assemble``'s turn check, which its
``compactions`` bound, not ``turns``, ends).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import Literal

import attrs

from innerloop._errors import SpecError
from innerloop.fsm._guardinfo import guard_info
from innerloop.fsm._spec import EdgeKey, MachineSpec, TransitionSpec, edge_hint

__all__ = ["Bound", "CycleProof", "LoopProof", "check_bounded", "edge_bounds", "loop_proof"]

CYCLE_LIMIT = 200
"""At most this many cycles are listed by :func:`loop_proof` (a dense machine has many)."""


@attrs.frozen
class Bound:
    """Why an edge cannot be taken forever: a budget and the guard that bounds it."""

    budget: str
    """The budget's name; ``unbounded`` for an edge the spec allows by name."""
    guard: str | None
    """The edge's own guard (``spends``), the earlier guard exhausting the budget
    (``after``), or None (``allowed``)."""
    how: Literal["spends", "after", "allowed"]
    why: str = ""
    """The reason given to :meth:`MachineSpec.allow_unbounded`."""

    def __str__(self) -> str:
        if self.how == "spends":
            return f"spends {self.budget}"
        if self.how == "after":
            return f"{self.budget}, after {self.guard}"
        return f"allowed unbounded: {self.why}"


def edge_bounds(spec: MachineSpec) -> Mapping[EdgeKey, tuple[Bound, ...]]:
    """The bounds of every edge of ``spec`` (an empty tuple: unbounded), by edge key."""
    out: dict[EdgeKey, tuple[Bound, ...]] = {}
    for state in spec.state_names:
        exhausted: list[Bound] = []
        for t in spec.transitions_from(state):
            bounds = list(exhausted)
            fn = spec.guards.get(t.guard) if t.guard is not None else None
            info = guard_info(fn) if fn is not None else None
            if info is not None and info.spends:
                bounds.append(Bound(info.spends, t.guard, "spends"))
            if t.key in spec.unbounded:
                bounds.append(Bound("unbounded", None, "allowed", spec.unbounded[t.key]))
            out[t.key] = tuple(bounds)
            if info is not None and info.exhausts:
                exhausted.append(Bound(info.exhausts, t.guard, "after"))
    return out


def reachable(start: str, edges: Mapping[str, Iterable[str]]) -> set[str]:
    """Every state reachable from ``start`` (``start`` included)."""
    seen = {start}
    queue = deque([start])
    while queue:
        for nxt in edges.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def _shortest_cycle(start: str, edges: Mapping[str, list[str]]) -> tuple[str, ...] | None:
    """The shortest path ``start -> ... -> start`` (at least one edge), or None."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in edges.get(node, ()):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return (*reversed(path), start)
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    return None


def _unbounded_cycle(spec: MachineSpec) -> tuple[str, ...] | None:
    bounds = edge_bounds(spec)
    edges: dict[str, list[str]] = {}
    for t in spec.transitions:
        if not bounds[t.key]:
            edges.setdefault(t.source, []).append(t.target)
    for state in spec.state_names:
        cycle = _shortest_cycle(state, edges)
        if cycle is not None:
            return cycle
    return None


def _check_allowed_edges(spec: MachineSpec) -> None:
    keys = {t.key for t in spec.transitions}
    for source, target, guard in spec.unbounded:
        if (source, target, guard) not in keys:
            edge = TransitionSpec(source, target, guard)
            raise SpecError(
                "unbounded-edge",
                f"allow_unbounded names {edge}, which spec {spec.name!r} does not have"
                f"{edge_hint(spec, edge)}",
                (source,),
            )


def check_bounded(spec: MachineSpec) -> None:
    """Raise :class:`SpecError` (rule ``unbounded-cycle``) naming a cycle of ``spec`` that
    passes through no bounded edge."""
    _check_allowed_edges(spec)
    cycle = _unbounded_cycle(spec)
    if cycle is None:
        return
    bounds = edge_bounds(spec)
    hops = [
        str(t)
        for a, b in pairwise(cycle)
        for t in spec.transitions_from(a)
        if t.target == b and not bounds[t.key]
    ]
    first = next(
        t for t in spec.transitions_from(cycle[0]) if t.target == cycle[1] and not bounds[t.key]
    )
    edge = f"TransitionSpec({first.source!r}, {first.target!r}" + (
        f", {first.guard!r})" if first.guard else ")"
    )
    raise SpecError(
        "unbounded-cycle",
        f"machine {spec.name!r} has a cycle no budget bounds: {' -> '.join(cycle)} (edges "
        f"{'; '.join(hops)}), so a run could go round it forever; declare the budget a "
        "guard on it bounds (guard(spends='name') on a guard that holds only while the "
        "budget is left, or guard(exhausts='name') on one that holds once it is spent, "
        "listed before the cycle's edge), or, if the loop is meant to be open-ended, say "
        f"so: spec.allow_unbounded({edge}, why='...')",
        tuple(dict.fromkeys(cycle)),
    )


@attrs.frozen
class CycleProof:
    """One simple cycle of a machine and the bounded edges on it."""

    states: tuple[str, ...]
    """The cycle, closed: the first state is also the last."""
    bounded: tuple[tuple[TransitionSpec, tuple[Bound, ...]], ...]
    """Each bounded edge on the cycle with its bounds. Where two edges join the same
    states, the hop counts only when both are bounded."""

    def __str__(self) -> str:
        lines = [" -> ".join(self.states)]
        lines += [f"    {t}: {'; '.join(map(str, bounds))}" for t, bounds in self.bounded]
        return "\n".join(lines)


@attrs.frozen
class LoopProof:
    """Every simple cycle of a machine with the budgets that bound it (``str()`` writes
    it out; docs/concepts/bounded-loops.md shows the default machine's)."""

    machine: str
    cycles: tuple[CycleProof, ...]
    complete: bool = True
    """False when the machine has more than ``CYCLE_LIMIT`` cycles and the list is cut."""

    def __str__(self) -> str:
        head = f"machine {self.machine!r}: {len(self.cycles)} cycles, each bounded"
        if not self.complete:
            head += f" (the first {len(self.cycles)} listed)"
        return "\n".join([head, *map(str, self.cycles)]) + "\n"


def _simple_cycles(spec: MachineSpec, limit: int) -> list[tuple[str, ...]]:
    """Simple cycles over states, each listed once, starting at its earliest declared
    state, in declaration order."""
    order = {name: i for i, name in enumerate(spec.state_names)}
    succ: dict[str, list[str]] = {}
    for t in spec.transitions:
        nexts = succ.setdefault(t.source, [])
        if t.target not in nexts:
            nexts.append(t.target)
    for nexts in succ.values():
        nexts.sort(key=order.__getitem__)
    found: list[tuple[str, ...]] = []

    def walk(start: str, path: list[str]) -> None:
        for nxt in succ.get(path[-1], ()):
            if len(found) >= limit:
                return
            if nxt == start:
                found.append((*path, start))
            elif order[nxt] > order[start] and nxt not in path:
                walk(start, [*path, nxt])

    for state in spec.state_names:
        walk(state, [state])
    return found


def loop_proof(spec: MachineSpec, limit: int = CYCLE_LIMIT) -> LoopProof:
    """The proof that every cycle of ``spec`` is bounded: each simple cycle (over states)
    with the bounded edges on it. Raises :class:`SpecError` as ``compile_spec`` does when
    a cycle is unbounded."""
    check_bounded(spec)
    bounds = edge_bounds(spec)
    cycles = _simple_cycles(spec, limit + 1)
    proofs = []
    for cycle in cycles[:limit]:
        bounded = []
        for a, b in pairwise(cycle):
            hop = [t for t in spec.transitions_from(a) if t.target == b]
            if all(bounds[t.key] for t in hop):
                bounded += [(t, bounds[t.key]) for t in hop]
        proofs.append(CycleProof(cycle, tuple(bounded)))
    return LoopProof(spec.name, tuple(proofs), len(cycles) <= limit)
