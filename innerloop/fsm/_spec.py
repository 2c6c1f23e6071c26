"""The machine as data: states, their phase handlers, transitions in priority order.

A :class:`MachineSpec` is immutable. Every editing method returns a new spec, so the
default spec can never be changed by host code. ``compile_spec`` turns a spec into a
runnable machine and rejects one that cannot run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from innerloop._errors import SpecError

if TYPE_CHECKING:
    from innerloop._events import Event
    from innerloop.fsm._driver import Run
    from innerloop.fsm._params import HarnessParams
    from innerloop.fsm._state import HarnessState

__all__ = ["Guard", "Handler", "MachineSpec", "StateSpec", "TransitionSpec"]

Handler: TypeAlias = Callable[["Run"], Any]
"""A phase handler: ``async def h(run)`` returning None or a list of events, or an async
generator function yielding events."""
Guard: TypeAlias = Callable[["HarnessParams", "HarnessState"], bool]
"""A pure predicate over params and state."""
StateKind: TypeAlias = Literal["phase", "recovery", "final"]
EdgeKind: TypeAlias = Literal["happy", "recovery", "exit"]

# (used only for typing handler results)
HandlerResult: TypeAlias = Awaitable["Sequence[Event] | None"]


def _readonly(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _state_tuple(value: Iterable[StateSpec]) -> tuple[StateSpec, ...]:
    return tuple(value)


def _transition_tuple(value: Iterable[TransitionSpec]) -> tuple[TransitionSpec, ...]:
    return tuple(value)


@attrs.frozen
class StateSpec:
    """A state. Final states carry the ``exit_reason`` a run ending there reports."""

    name: str
    kind: StateKind = "phase"
    exit_reason: str | None = None
    doc: str = ""
    runs_when_aborting: bool = False
    """Run the handler even after an abort was requested (the driver skips the handlers of
    other states then, so no new work starts); the default ``abort`` state sets it."""

    @property
    def final(self) -> bool:
        return self.kind == "final"


@attrs.frozen
class TransitionSpec:
    """An edge, taken when ``guard`` (a name in ``MachineSpec.guards``) holds, or always when
    ``guard`` is None. Edges from one state are tried in the order they are listed."""

    source: str
    target: str
    guard: str | None = None
    kind: EdgeKind = "happy"

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.source, self.target, self.guard)

    def __str__(self) -> str:
        guard = f" [{self.guard}]" if self.guard else ""
        return f"{self.source} -> {self.target}{guard}"


@attrs.frozen
class MachineSpec:
    name: str
    initial: str
    states: tuple[StateSpec, ...] = attrs.field(converter=_state_tuple)
    transitions: tuple[TransitionSpec, ...] = attrs.field(converter=_transition_tuple)
    handlers: Mapping[str, Handler] = attrs.field(converter=_readonly, eq=False)
    """Phase handler per non-final state name."""
    guards: Mapping[str, Guard] = attrs.field(converter=_readonly, eq=False)
    """Guard functions by name."""

    # -- reading -------------------------------------------------------------------------

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states)

    def state(self, name: str) -> StateSpec:
        for s in self.states:
            if s.name == name:
                return s
        raise SpecError("unknown-state", f"spec {self.name!r} has no state {name!r}", (name,))

    def transitions_from(self, name: str) -> tuple[TransitionSpec, ...]:
        return tuple(t for t in self.transitions if t.source == name)

    @property
    def final_states(self) -> tuple[StateSpec, ...]:
        return tuple(s for s in self.states if s.final)

    # -- editing (each returns a new spec) --------------------------------------------------

    def renamed(self, name: str) -> MachineSpec:
        return attrs.evolve(self, name=name)

    def add_state(
        self,
        state: StateSpec,
        handler: Handler | None = None,
        transitions: Iterable[TransitionSpec] = (),
    ) -> MachineSpec:
        """Add ``state`` (with its handler unless final) and, optionally, its out-edges."""
        if state.name in self.state_names:
            raise SpecError(
                "duplicate-state", f"state {state.name!r} already exists in {self.name!r}"
            )
        handlers = dict(self.handlers)
        if handler is not None:
            handlers[state.name] = handler
        return attrs.evolve(
            self,
            states=(*self.states, state),
            transitions=(*self.transitions, *transitions),
            handlers=handlers,
        )

    def insert_between(
        self,
        source: str,
        target: str,
        state: StateSpec,
        handler: Handler,
        transitions: Sequence[TransitionSpec] = (),
    ) -> MachineSpec:
        """Put ``state`` on every edge ``source -> target``: those edges now end at
        ``state``, and ``state`` leaves by ``transitions`` (default: ``state -> target``)."""
        edges = [t for t in self.transitions if t.source == source and t.target == target]
        if not edges:
            raise SpecError(
                "no-such-edge",
                f"spec {self.name!r} has no transition {source!r} -> {target!r} to insert into",
                (source, target),
            )
        spec = self.add_state(state, handler)
        rerouted = tuple(
            attrs.evolve(t, target=state.name) if t in edges else t for t in spec.transitions
        )
        out = tuple(transitions) or (TransitionSpec(state.name, target),)
        return attrs.evolve(spec, transitions=(*rerouted, *out))

    def add_transition(
        self, transition: TransitionSpec, *, before: TransitionSpec | None = None
    ) -> MachineSpec:
        """Add an edge. By default it is tried after the source's existing edges; with
        ``before`` it is tried just before that edge."""
        items = list(self.transitions)
        if before is None:
            last = max(
                (i for i, t in enumerate(items) if t.source == transition.source),
                default=len(items) - 1,
            )
            items.insert(last + 1, transition)
        else:
            items.insert(self._index(before), transition)
        return attrs.evolve(self, transitions=tuple(items))

    def replace_transition(self, old: TransitionSpec, new: TransitionSpec) -> MachineSpec:
        items = list(self.transitions)
        items[self._index(old)] = new
        return attrs.evolve(self, transitions=tuple(items))

    def remove_transition(self, old: TransitionSpec) -> MachineSpec:
        items = list(self.transitions)
        del items[self._index(old)]
        return attrs.evolve(self, transitions=tuple(items))

    def replace_handler(self, state: str, handler: Handler) -> MachineSpec:
        self.state(state)
        return attrs.evolve(self, handlers={**self.handlers, state: handler})

    def with_guard(self, name: str, guard: Guard) -> MachineSpec:
        """Add or replace a named guard."""
        return attrs.evolve(self, guards={**self.guards, name: guard})

    def _index(self, transition: TransitionSpec) -> int:
        for i, t in enumerate(self.transitions):
            if t.key == transition.key:
                return i
        raise SpecError("no-such-edge", f"spec {self.name!r} has no transition {transition}", ())
