"""The machine as data: states, their phase handlers, transitions in priority order.

A :class:`MachineSpec` is immutable. Every editing method returns a new spec, so the
default spec can never be changed by host code. ``compile_spec`` turns a spec into a
runnable machine and rejects one that cannot run.

Plugging in a custom state, for example a human approval step before tools run::

    spec = DEFAULT_SPEC.insert_between(
        "stream", "execute",
        StateSpec("approve", doc="ask the host"),
        approve_handler,                      # async def approve_handler(ctx): ...
        transitions=(
            TransitionSpec("approve", "abort", "abort_requested", "recovery"),
            TransitionSpec("approve", "execute"),
        ),
    ).renamed("approval")
    harness = Harness(params, providers, machine=spec)   # compiled (and checked) here

The editing methods are :meth:`MachineSpec.add_state`, :meth:`~MachineSpec.insert_between`,
:meth:`~MachineSpec.add_transition`, :meth:`~MachineSpec.replace_transition`,
:meth:`~MachineSpec.remove_transition`, :meth:`~MachineSpec.replace_handler`,
:meth:`~MachineSpec.with_guard`, :meth:`~MachineSpec.allow_unbounded` and
:meth:`~MachineSpec.renamed`. Worked examples live in ``innerloop.examples``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from innerloop._errors import SpecError
from innerloop.fsm._guardinfo import GuardInfo, declared, unwrap_guard

if TYPE_CHECKING:
    from innerloop._events import Event
    from innerloop.fsm._context import PhaseContext

__all__ = [
    "Guard",
    "Handler",
    "MachineSpec",
    "StateSpec",
    "TransitionSpec",
    "callable_name",
    "fingerprint_of",
    "work_of",
]

Handler: TypeAlias = Callable[["PhaseContext"], Any]
"""A phase handler: ``async def h(ctx)`` returning None or a list of events, or an async
generator function yielding events. It records what it did in ``ctx.state.outcome``."""
WORK = "_innerloop_work"
"""The attribute of an async-generator handler naming the coroutine the driver awaits
in its place (see :func:`work_of`)."""


def work_of(handler: Handler) -> Handler | None:
    """The coroutine that does ``handler``'s work, when ``handler`` is an async generator
    made to read it (the default ``call``, ``stream`` and ``execute``): it returns the
    phase's events (a list, or None), or a generator yielding them when they must be
    passed on as they come. The driver awaits it instead of stepping a generator, which
    costs an async generator per phase (the event loop's hooks, a weak set's entry, the
    closing). None for any other handler."""
    return getattr(handler, WORK, None)


Guard: TypeAlias = Callable[["PhaseContext"], bool]
"""A pure predicate over ``ctx.params`` and ``ctx.state``."""
StateKind: TypeAlias = Literal["phase", "recovery", "final"]
EdgeKind: TypeAlias = Literal["happy", "recovery", "exit"]

# (used only for typing handler results)
HandlerResult: TypeAlias = Awaitable["Sequence[Event] | None"]


EdgeKey: TypeAlias = tuple[str, str, str | None]


def callable_name(fn: object) -> str:
    """``module:qualname`` of a handler or guard (what a machine's signature records)."""
    target = getattr(fn, "func", fn)  # functools.partial
    module = getattr(target, "__module__", None) or type(target).__module__
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}:{qualname}"


def _readonly(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _readonly_reasons(value: Mapping[EdgeKey, str]) -> Mapping[EdgeKey, str]:
    return MappingProxyType(dict(value))


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``candidates`` to a misspelled
    ``word``, or ``""`` when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def edge_hint(spec: MachineSpec, transition: TransitionSpec) -> str:
    """For an edge ``spec`` lacks: the closest edge out of its source (``"; did you mean
    'a -> b [g]'? (...)"``) and where to list them all."""
    source = transition.source
    listed = f"its edges from {source!r} are listed by transitions_from({source!r})"
    # compare what follows the source: every candidate shares it
    edges = {str(t).partition(" -> ")[2]: t for t in spec.transitions_from(source)}
    close = difflib.get_close_matches(str(transition).partition(" -> ")[2], list(edges), n=1)
    return f"; did you mean '{edges[close[0]]}'? ({listed})" if close else f"; {listed}"


def _state_tuple(value: Iterable[StateSpec]) -> tuple[StateSpec, ...]:
    return tuple(value)


def _transition_tuple(value: Iterable[TransitionSpec]) -> tuple[TransitionSpec, ...]:
    return tuple(value)


@attrs.frozen
class StateSpec:
    """A state. Final states carry the ``exit_reason`` a run ending there reports."""

    name: str
    """A Python identifier, unique in the spec; also the handler's key."""
    kind: StateKind = "phase"
    """``phase`` (the happy path), ``recovery`` (drawn apart) or ``final`` (the run ends)."""
    exit_reason: str | None = None
    """Required for a final state: what ``state.exit_reason`` says when a run ends here."""
    doc: str = ""
    """One line on what the state does (shown as the diagram's tooltip)."""
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
    """A key of ``MachineSpec.guards``; None means always (the source's fallthrough)."""
    kind: EdgeKind = "happy"
    """``happy``, ``recovery`` or ``exit`` (into a final state): how diagrams draw it."""

    @property
    def key(self) -> tuple[str, str, str | None]:
        """What identifies the edge in a spec (and in coverage counts)."""
        return (self.source, self.target, self.guard)

    def __str__(self) -> str:
        guard = f" [{self.guard}]" if self.guard else ""
        return f"{self.source} -> {self.target}{guard}"


@attrs.frozen(repr=False)
class MachineSpec:
    """A whole machine: states, transitions in priority order, handlers and guards.

    Edit it with the methods below; each returns a new spec and leaves this one as it was.
    Nothing is checked until :func:`~innerloop.fsm.compile_spec` (or ``Harness``) compiles
    it, so a spec may be broken half-way through a chain of edits.
    """

    name: str
    """Names the compiled class and the machine in coverage reports and diagrams."""
    initial: str
    states: tuple[StateSpec, ...] = attrs.field(converter=_state_tuple)
    transitions: tuple[TransitionSpec, ...] = attrs.field(converter=_transition_tuple)
    handlers: Mapping[str, Handler] = attrs.field(converter=_readonly, eq=False)
    """Phase handler per non-final state name."""
    guards: Mapping[str, Guard] = attrs.field(converter=_readonly, eq=False)
    """Guard functions by name."""
    unbounded: Mapping[EdgeKey, str] = attrs.field(factory=dict, converter=_readonly_reasons)
    """Edges allowed to close a cycle no budget bounds, each with the reason given
    (:meth:`allow_unbounded`)."""
    import_path: str | None = attrs.field(default=None, eq=False, kw_only=True)
    """Where the spec can be imported from (``module:attr``; the attribute may also be a
    function taking no argument that returns the spec), recorded with every run so that
    ``innerloop runs show``, ``innerloop ui`` and ``innerloop diagram --trace`` find a
    run's machine. Set it with :meth:`with_import_path`; every edit clears it."""

    def __repr__(self) -> str:
        path = f", import_path={self.import_path!r}" if self.import_path else ""
        return (
            f"MachineSpec({self.name!r}, {len(self.states)} states, "
            f"{len(self.transitions)} transitions, fingerprint={self.fingerprint!r}{path})"
        )

    # -- identity --------------------------------------------------------------------------

    def signature(self) -> dict[str, Any]:
        """The machine's structure as plain JSON data: its name, initial state, states,
        transitions in priority order, and each handler's and guard's ``module:qualname``.
        What a run records of its machine, and what :attr:`fingerprint` hashes."""
        return {
            "name": self.name,
            "initial": self.initial,
            "states": [[s.name, s.kind, s.exit_reason] for s in self.states],
            "transitions": [[t.source, t.target, t.guard, t.kind] for t in self.transitions],
            "handlers": {k: callable_name(v) for k, v in sorted(self.handlers.items())},
            "guards": {
                k: callable_name(unwrap_guard(v)) for k, v in sorted(self.guards.items())
            },
            "unbounded": sorted([*edge, why] for edge, why in self.unbounded.items()),
        }

    @property
    def fingerprint(self) -> str:
        """16 hex digits of the sha256 of :meth:`signature` without the name: equal for two
        specs with the same states, transitions, handlers and guards."""
        return fingerprint_of(self.signature())

    # -- reading -------------------------------------------------------------------------

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states)

    def state(self, name: str) -> StateSpec:
        for s in self.states:
            if s.name == name:
                return s
        hint = did_you_mean(name, self.state_names)
        raise SpecError("unknown-state", f"spec {self.name!r} has no state {name!r}{hint}", (name,))

    def transitions_from(self, name: str) -> tuple[TransitionSpec, ...]:
        return tuple(t for t in self.transitions if t.source == name)

    @property
    def final_states(self) -> tuple[StateSpec, ...]:
        return tuple(s for s in self.states if s.final)

    # -- editing (each returns a new spec) --------------------------------------------------

    def renamed(self, name: str) -> MachineSpec:
        """The same machine under another name (give custom machines their own, so their
        transition coverage is counted apart from the default machine's)."""
        return attrs.evolve(self, name=name, import_path=None)

    def with_import_path(self, path: str) -> MachineSpec:
        """The same machine, recording where it can be imported from (``module:attr``):
        tools that read a run later (``innerloop runs show``, ``innerloop ui``,
        ``innerloop diagram --trace``) load it from there to draw the run."""
        module, sep, attr = path.partition(":")
        if not sep or not module or not attr:
            raise SpecError(
                "import-path",
                f"import path {path!r} must be MODULE:ATTR (e.g. 'myapp.machines:SPEC')",
                (),
            )
        return attrs.evolve(self, import_path=path)

    def add_state(
        self,
        state: StateSpec,
        handler: Handler | None = None,
        transitions: Iterable[TransitionSpec] = (),
    ) -> MachineSpec:
        """Add ``state`` (with its handler unless final) and, optionally, its out-edges.

        Nothing leads into the new state yet: add an edge with :meth:`add_transition`, or use
        :meth:`insert_between`, which does both."""
        if state.final and handler is not None:
            raise SpecError(
                "final-handler",
                f"final state {state.name!r} cannot have a handler: a run ends on entering it",
                (state.name,),
            )
        if state.name in self.state_names:
            raise SpecError(
                "duplicate-state", f"state {state.name!r} already exists in {self.name!r}"
            )
        handlers = dict(self.handlers)
        if handler is not None:
            handlers[state.name] = handler
        return attrs.evolve(
            self,
            import_path=None,
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
        ``state``, and ``state`` leaves by ``transitions`` (default: ``state -> target``, of
        the kind the edges had). An edge into ``state`` is never an ``exit`` (``state`` is
        not final): an ``exit`` edge rerouted to it becomes ``happy``."""
        edges = [t for t in self.transitions if t.source == source and t.target == target]
        if not edges:
            for end in (source, target):
                self.state(end)  # an unknown state: says which, with "did you mean"
            targets = ", ".join(
                dict.fromkeys(repr(t.target) for t in self.transitions_from(source))
            )
            raise SpecError(
                "no-such-edge",
                f"spec {self.name!r} has no transition {source!r} -> {target!r} to insert "
                f"into; {source!r} leads to {targets or 'nothing'}",
                (source, target),
            )
        spec = self.add_state(state, handler)
        # each edge takes its kind from its target: an edge into the (non-final) inserted
        # state is no exit, and the exit, if any, moves to the edge into the final state
        rerouted = tuple(
            attrs.evolve(t, target=state.name, kind="happy" if t.kind == "exit" else t.kind)
            if t in edges
            else t
            for t in spec.transitions
        )
        out = tuple(transitions) or (TransitionSpec(state.name, target, kind=edges[0].kind),)
        return attrs.evolve(spec, transitions=(*rerouted, *out), import_path=None)

    def add_transition(
        self, transition: TransitionSpec, *, before: TransitionSpec | None = None
    ) -> MachineSpec:
        """Add an edge, with a priority among the edges leaving its source.

        With ``before`` it is tried just before that edge (which must leave the same
        source). Without it, a guarded edge is tried just before the source's unguarded
        fallthrough edge (after it, it could never be taken), and an unguarded edge after
        all of them."""
        items = list(self.transitions)
        if before is not None and before.source != transition.source:
            raise SpecError(
                "before-source",
                f"cannot add {transition} before {before}: priority only orders the edges "
                f"leaving one state; pass an edge leaving {transition.source!r}",
                (transition.source,),
            )
        out = self.transitions_from(transition.source)
        if before is None and transition.guard is not None and out and out[-1].guard is None:
            before = out[-1]
        if before is None:
            last = max(
                (i for i, t in enumerate(items) if t.source == transition.source),
                default=len(items) - 1,
            )
            items.insert(last + 1, transition)
        else:
            items.insert(self._index(before), transition)
        return attrs.evolve(self, transitions=tuple(items), import_path=None)

    def replace_transition(self, old: TransitionSpec, new: TransitionSpec) -> MachineSpec:
        """Put ``new`` where ``old`` was, keeping its priority (e.g. to change a guard or
        a target)."""
        items = list(self.transitions)
        items[self._index(old)] = new
        return attrs.evolve(self, transitions=tuple(items), import_path=None)

    def remove_transition(self, old: TransitionSpec) -> MachineSpec:
        """Drop the edge ``old`` (matched by source, target and guard)."""
        items = list(self.transitions)
        del items[self._index(old)]
        return attrs.evolve(self, transitions=tuple(items), import_path=None)

    def replace_handler(self, state: str, handler: Handler) -> MachineSpec:
        """Give ``state`` another phase handler (e.g. wrap the default one)."""
        if self.state(state).final:
            raise SpecError(
                "final-handler",
                f"final state {state!r} cannot have a handler: a run ends on entering it",
                (state,),
            )
        return attrs.evolve(self, handlers={**self.handlers, state: handler}, import_path=None)

    def with_guard(
        self,
        name: str,
        guard: Guard,
        *,
        reads: Iterable[str] | None = None,
        spends: str | None = None,
        exhausts: str | None = None,
    ) -> MachineSpec:
        """Add or replace a named guard.

        ``reads``, ``spends`` and ``exhausts`` declare what the guard reads and the budget
        it bounds, as :func:`~innerloop.fsm.guard` does on a function (given here, they
        replace what the function declares, and the function itself is left as it is)."""
        if reads is not None or spends is not None or exhausts is not None:
            guard = declared(guard, GuardInfo(reads or (), spends, exhausts))
        return attrs.evolve(self, guards={**self.guards, name: guard}, import_path=None)

    def allow_unbounded(self, edge: TransitionSpec, why: str) -> MachineSpec:
        """Let ``edge`` close a cycle that no budget bounds (``compile_spec`` refuses such
        a cycle otherwise), saying ``why`` the loop is meant to be open-ended, e.g. a
        person answers on each round. The edge must exist when the spec is compiled."""
        if not why.strip():
            raise SpecError(
                "unbounded-why",
                f"allow_unbounded({edge}) needs a reason: say why a run may go round this "
                "loop without limit (it shows in the proof and in code review)",
                (edge.source,),
            )
        return attrs.evolve(self, unbounded={**self.unbounded, edge.key: why}, import_path=None)

    def _index(self, transition: TransitionSpec) -> int:
        for i, t in enumerate(self.transitions):
            if t.key == transition.key:
                return i
        self.state(transition.source)  # an unknown state: says which, with "did you mean"
        raise SpecError(
            "no-such-edge",
            f"spec {self.name!r} has no transition {transition}{edge_hint(self, transition)}",
            (transition.source,),
        )


def fingerprint_of(signature: Mapping[str, Any]) -> str:
    """The fingerprint of a :meth:`MachineSpec.signature` (its name left out)."""
    body = {k: v for k, v in signature.items() if k != "name"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
