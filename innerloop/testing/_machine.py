"""One transition at a time: put a compiled machine in any state and step it."""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import TypeAlias

import attrs

from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._context import AbortSignal, Deps, PhaseContext, TurnScope, request_settings
from innerloop.fsm._driver import TransitionObserver
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._spec import MachineSpec, TransitionSpec
from innerloop.fsm._state import HarnessState
from innerloop.recovery._clock import SystemClock
from innerloop.recovery._compaction import TruncatingCompactor
from innerloop.recovery._tokens import ApproxTokenCounter, MessageTokenCache
from innerloop.tools._runner import ToolRunner

__all__ = ["MachineProbe", "TrackedMachine", "TransitionCoverage", "machine_at", "phase_context"]

COUNTING: ContextVar[tuple[TransitionObserver, ...]] = ContextVar(
    "innerloop_testing_counting", default=()
)
"""The observers every probe and scenario reports to without being passed them: the pytest
plugin sets its session coverage here for each test it counts."""


def counting(observers: Iterable[TransitionObserver] = ()) -> tuple[TransitionObserver, ...]:
    """``observers`` and, after them, those of :data:`COUNTING` not among them."""
    given = tuple(observers)
    return given + tuple(o for o in COUNTING.get() if all(o is not g for g in given))


SCRIPTED_PARAMS = HarnessParams(model="scripted:scripted-model")
"""The params of a probe or scenario when the test gives none."""


def compiled_machine(machine: MachineSpec | CompiledMachine) -> CompiledMachine:
    """``machine``, compiled (and so checked) unless it already is."""
    return machine if isinstance(machine, CompiledMachine) else compile_spec(machine)


def phase_context(
    params: HarnessParams, state: HarnessState, deps: Deps | None = None
) -> PhaseContext:
    """A phase context over ``params`` and ``state``, for calling a guard or a handler
    directly in a test. Without ``deps``: no providers, the system clock, an approximate
    token counter, truncation and the default tool runner."""
    if deps is None:
        truncate = TruncatingCompactor()
        deps = Deps(
            providers={},
            clock=SystemClock(),
            tokens=MessageTokenCache(ApproxTokenCounter()),
            compactor=truncate,
            fallback_compactor=truncate,
            tools=ToolRunner(),
        )
    return PhaseContext(
        params, state, deps, TurnScope(request_settings(params)), AbortSignal(state)
    )


@attrs.define
class MachineProbe:
    """A python-statemachine instance of ``machine`` parked in a state."""

    machine: CompiledMachine
    params: HarnessParams
    state: HarnessState
    current: str
    observers: tuple[TransitionObserver, ...] = ()

    def step(self) -> str:
        """Fire ``step`` on the real python-statemachine instance; return the target.

        Also checks that the driver's lean table lookup picks the same transition.
        """
        ctx = phase_context(self.params, self.state)
        sm = self.machine.instantiate(ctx, at=self.current)
        taken = self.machine.send_step(sm)
        lean = self.machine.select(self.current, ctx)
        if lean.key != taken.key:
            raise AssertionError(f"engines disagree: statemachine took {taken}, table {lean}")
        for observer in self.observers:
            observer.on_transition(self.machine.name, taken)
        self.current = taken.target
        return taken.target

    def transition(self) -> TransitionSpec:
        """The transition ``step`` would take, without taking it."""
        return self.machine.select(self.current, phase_context(self.params, self.state))


def machine_at(
    machine: MachineSpec | CompiledMachine,
    state_name: str,
    state: HarnessState | None = None,
    params: HarnessParams | None = None,
    *,
    observers: Iterable[TransitionObserver] = (),
) -> MachineProbe:
    """A probe of ``machine`` in ``state_name`` over ``state`` and ``params``; its steps
    are reported to ``observers`` and, under the pytest plugin, to the session's
    transition coverage."""
    compiled = compiled_machine(machine)
    compiled.spec.state(state_name)
    params = params or SCRIPTED_PARAMS
    return MachineProbe(
        compiled, params, state or HarnessState(), state_name, counting(observers)
    )


EdgeKey: TypeAlias = tuple[str, str, str | None]


def _spec_of(machine: MachineSpec | CompiledMachine) -> MachineSpec:
    return machine.spec if isinstance(machine, CompiledMachine) else machine


@attrs.frozen
class TrackedMachine:
    """A machine whose coverage is reported: the spec, the edges reported (and gated
    by ``--innerloop-coverage-strict``), and the base they were added over, if any."""

    spec: MachineSpec
    edges: tuple[TransitionSpec, ...]
    base: str | None = None
    """The name of the machine ``edges`` were added over; None when all are reported."""


class TransitionCoverage:
    """Records the transitions taken and reports, per tracked machine, the ones never taken.

    An edge is identified by its key ``(source, target, guard)``: a transition taken by
    any machine counts for every tracked machine that has an edge with that key, so the
    runs of a derived machine cover the edges it shares with its base. Nothing is tracked
    until :meth:`track` is called (the pytest plugin calls it for each
    ``--innerloop-coverage=MODULE:ATTR``)."""

    def __init__(self) -> None:
        self.taken: dict[str, dict[EdgeKey, int]] = {}
        """Per machine name that took transitions: the count per edge key."""
        self.tracked: dict[str, TrackedMachine] = {}
        self.recording = True
        """False while transitions are not to count (the pytest plugin clears it during
        tests outside ``--innerloop-coverage-scope``)."""

    def track(
        self,
        machine: MachineSpec | CompiledMachine,
        *,
        added_over: MachineSpec | CompiledMachine | None = None,
    ) -> None:
        """Report ``machine``'s transitions at the end of the session, under its name;
        with ``added_over``, only the edges it adds over that base machine (those whose
        key the base does not have), e.g. ``track(spec, added_over=DEFAULT_SPEC)`` to gate
        a custom machine's own edges and not the default machine's. Tracking a machine
        again adds to what is reported."""
        spec = _spec_of(machine)
        base = None if added_over is None else _spec_of(added_over)
        known = self.tracked.get(spec.name)
        if known is not None and known.spec.transitions != spec.transitions:
            raise ValueError(
                f"two different machines are both named {spec.name!r}: give each its own "
                "name with MachineSpec.renamed() so their coverage is reported apart"
            )
        inherited = set() if base is None else {t.key for t in base.transitions}
        wanted = {t.key for t in spec.transitions if t.key not in inherited}
        if known is not None:
            wanted |= {t.key for t in known.edges}
        edges = tuple(t for t in spec.transitions if t.key in wanted)
        full = len(edges) == len(spec.transitions)
        self.tracked[spec.name] = TrackedMachine(
            spec, edges, None if full or base is None else base.name
        )

    def on_transition(self, machine: str, transition: TransitionSpec) -> None:
        if not self.recording:
            return
        counts = self.taken.setdefault(machine, {})
        counts[transition.key] = counts.get(transition.key, 0) + 1

    def count(self, transition: TransitionSpec) -> int:
        """How often an edge with ``transition``'s key was taken, by any machine."""
        return sum(counts.get(transition.key, 0) for counts in self.taken.values())

    def missing(self, machine: MachineSpec | TrackedMachine) -> list[TransitionSpec]:
        """The edges of ``machine`` (of a tracked machine: the reported ones) never taken."""
        edges = machine.edges if isinstance(machine, TrackedMachine) else machine.transitions
        return [t for t in edges if self.count(t) == 0]

    def untracked(self) -> list[str]:
        """Names of machines that took transitions none of which a tracked machine has."""
        keys = {t.key for m in self.tracked.values() for t in m.spec.transitions}
        return sorted(
            name
            for name, counts in self.taken.items()
            if name not in self.tracked and keys.isdisjoint(counts)
        )

    def table(self, name: str) -> str:
        """The coverage of the tracked machine ``name``, one line per reported edge."""
        tracked = self.tracked[name]
        over = f" (the transitions it adds over {tracked.base!r})" if tracked.base else ""
        lines = [f"transition coverage of {name!r}{over}:"]
        for t in tracked.edges:
            n = self.count(t)
            lines.append(f"{'  ' if n else '!!'} {n:6d}  {t}")
        done = len(tracked.edges) - len(self.missing(tracked))
        lines.append(f"{done}/{len(tracked.edges)} transitions taken")
        return "\n".join(lines)
