"""One transition at a time: put a compiled machine in any state and step it."""

from __future__ import annotations

from collections.abc import Iterable

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

__all__ = ["MachineProbe", "TransitionCoverage", "machine_at", "phase_context"]


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
    """A probe of ``machine`` in ``state_name`` over ``state`` and ``params``."""
    compiled = machine if isinstance(machine, CompiledMachine) else compile_spec(machine)
    compiled.spec.state(state_name)
    params = params or HarnessParams(model="scripted:scripted-model")
    return MachineProbe(compiled, params, state or HarnessState(), state_name, tuple(observers))


class TransitionCoverage:
    """Records the transitions taken, per machine name, and reports the ones never taken.

    The pytest plugin reports the default machine; :meth:`track` a custom machine's spec
    to have it reported (and, with ``--innerloop-coverage-strict``, gated) too."""

    def __init__(self) -> None:
        self.taken: dict[str, dict[tuple[str, str, str | None], int]] = {}
        self.specs: dict[str, MachineSpec] = {}

    def track(self, spec: MachineSpec | CompiledMachine) -> None:
        """Report ``spec``'s transitions at the end of the session, under its name."""
        spec = spec.spec if isinstance(spec, CompiledMachine) else spec
        known = self.specs.get(spec.name)
        if known is not None and known.transitions != spec.transitions:
            raise ValueError(
                f"two different machines are both named {spec.name!r}: give each its own "
                "name with MachineSpec.renamed() so their coverage is counted apart"
            )
        self.specs[spec.name] = spec

    def untracked(self) -> list[str]:
        """Names of machines that took transitions but whose spec was not tracked."""
        return sorted(set(self.taken) - set(self.specs))

    def on_transition(self, machine: str, transition: TransitionSpec) -> None:
        counts = self.taken.setdefault(machine, {})
        counts[transition.key] = counts.get(transition.key, 0) + 1

    def count(self, machine: str, transition: TransitionSpec) -> int:
        return self.taken.get(machine, {}).get(transition.key, 0)

    def missing(self, spec: MachineSpec) -> list[TransitionSpec]:
        return [t for t in spec.transitions if self.count(spec.name, t) == 0]

    def table(self, spec: MachineSpec) -> str:
        lines = [f"transition coverage of {spec.name!r}:"]
        for t in spec.transitions:
            n = self.count(spec.name, t)
            mark = "  " if n else "!!"
            lines.append(f"{mark} {n:6d}  {t}")
        done = len(spec.transitions) - len(self.missing(spec))
        lines.append(f"{done}/{len(spec.transitions)} transitions taken")
        return "\n".join(lines)
