"""Compile a MachineSpec into a python-statemachine class, after checking it can run.

Each rule is one ``_check_*`` function that raises :class:`SpecError` naming the offending
states and the fix. The compiled machine keeps two equivalent ways to step:

* ``machine_class`` is a real python-statemachine ``StateMachine`` whose single event
  ``step`` carries every transition, in priority order, with the guards as conditions;
* ``select`` walks the same table directly (the driver's lean path: python-statemachine
  3.x costs tens to hundreds of microseconds per ``send``, the table lookup a few).

Tests check the two always choose the same transition.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import attrs
from statemachine import State, StateMachine

from innerloop._errors import SpecError
from innerloop.fsm._bounds import check_bounded, reachable
from innerloop.fsm._guardinfo import guard_info, unwrap_guard
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._spec import (
    Guard,
    Handler,
    MachineSpec,
    TransitionSpec,
    did_you_mean,
    work_of,
)
from innerloop.fsm._state import HarnessState

if TYPE_CHECKING:
    from innerloop.fsm._context import PhaseContext

__all__ = ["CompiledMachine", "compile_spec"]

STEP_EVENT = "step"


def _names(states: tuple[str, ...]) -> str:
    return ", ".join(repr(s) for s in states)


def _check_structure(spec: MachineSpec) -> None:
    seen: set[str] = set()
    for s in spec.states:
        if s.name in seen:
            raise SpecError("duplicate-state", f"state {s.name!r} is declared twice", (s.name,))
        if not s.name.isidentifier():
            raise SpecError(
                "state-name",
                f"state name {s.name!r} must be a Python identifier (letters, digits, _)",
                (s.name,),
            )
        seen.add(s.name)
    if spec.initial not in seen:
        hint = did_you_mean(spec.initial, spec.state_names)
        raise SpecError(
            "initial",
            f"initial state {spec.initial!r} is not declared{hint}",
            (spec.initial,),
        )
    keys: set[tuple[str, str, str | None]] = set()
    for t in spec.transitions:
        for end in (t.source, t.target):
            if end not in seen:
                hint = did_you_mean(end, spec.state_names)
                raise SpecError(
                    "unknown-state",
                    f"transition {t} refers to undeclared state {end!r}"
                    + (f"{hint} Otherwise declare" if hint else "; declare")
                    + " it with add_state()",
                    (end,),
                )
        if t.key in keys:
            raise SpecError("duplicate-transition", f"transition {t} is listed twice", ())
        keys.add(t.key)


def _check_finals(spec: MachineSpec) -> None:
    finals = spec.final_states
    if not finals:
        raise SpecError("no-final", f"spec {spec.name!r} has no final state; add one", ())
    for s in finals:
        if not s.exit_reason:
            raise SpecError(
                "exit-reason",
                f"final state {s.name!r} has no exit_reason; every final state must say why "
                "a run ended there",
                (s.name,),
            )
        if spec.transitions_from(s.name):
            raise SpecError(
                "final-out",
                f"final state {s.name!r} has outgoing transitions; remove them",
                (s.name,),
            )


HandlerKind = Literal["coroutine", "asyncgen"]


def _async_kind(fn: Callable[..., Any]) -> HandlerKind | None:
    """Whether calling ``fn`` gives a coroutine or an async generator, seen through
    ``functools.partial`` and objects with an async ``__call__``; None for a plain
    function."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isfunction(target) or inspect.ismethod(target)) and callable(target):
        target = target.__call__  # an object: its __call__ says
    if inspect.isasyncgenfunction(target):
        return "asyncgen"
    if inspect.iscoroutinefunction(target):
        return "coroutine"
    return None


def _takes_one_argument(fn: Callable[..., Any]) -> str | None:
    """The signature of ``fn`` when it cannot be called with one positional argument."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: cannot tell
        return None
    try:
        signature.bind(None)
    except TypeError:
        return str(signature.replace(return_annotation=inspect.Signature.empty))
    return None


def _described(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _check_handlers(spec: MachineSpec) -> None:
    for name in spec.handlers:  # first: a misspelled name explains a missing handler
        if name not in spec.state_names:
            hint = did_you_mean(name, spec.state_names)
            raise SpecError(
                "unknown-state",
                f"a handler is given for undeclared state {name!r}{hint}",
                (name,),
            )
    for s in spec.states:
        if s.final:
            continue
        handler = spec.handlers.get(s.name)
        if handler is None:
            raise SpecError(
                "missing-handler",
                f"state {s.name!r} has no phase handler; pass one to add_state() or "
                "replace_handler()",
                (s.name,),
            )
        if not callable(handler):
            raise SpecError(
                "missing-handler", f"handler of state {s.name!r} is not callable", (s.name,)
            )
        if _async_kind(handler) is None:
            raise SpecError(
                "handler-kind",
                f"handler of state {s.name!r} ({_described(handler)}) is a plain function; "
                f"a phase handler is awaited: write it as 'async def {s.name}(ctx)' "
                "(returning None or a list of events) or as an async generator yielding "
                "events",
                (s.name,),
            )
        signature = _takes_one_argument(handler)
        if signature is not None:
            raise SpecError(
                "handler-signature",
                f"handler of state {s.name!r} ({_described(handler)}) takes {signature}; "
                f"a phase handler takes one argument, the PhaseContext: "
                f"'async def {s.name}(ctx: PhaseContext)'",
                (s.name,),
            )


def _check_guards(spec: MachineSpec) -> None:
    for t in spec.transitions:
        if t.guard is not None and t.guard not in spec.guards:
            hint = did_you_mean(t.guard, spec.guards)
            known = ", ".join(sorted(spec.guards)) or "-"
            fix = (
                f"{hint} Otherwise add it with with_guard()"
                if hint
                else f"; add it with with_guard() (known guards: {known})"
            )
            raise SpecError(
                "unknown-guard",
                f"transition {t} names guard {t.guard!r}, which resolves to nothing{fix}",
                (t.source,),
            )
    for name, fn in spec.guards.items():
        _check_guard(name, fn)


def _check_guard(name: str, fn: Guard) -> None:
    target = unwrap_guard(fn)
    if not callable(target):
        raise SpecError("guard-kind", f"guard {name!r} is not callable: {target!r}")
    if _async_kind(target) is not None:
        raise SpecError(
            "guard-kind",
            f"guard {name!r} ({_described(target)}) is async; a guard is a plain "
            f"'def {name}(ctx) -> bool' that runs between phases and cannot await (a "
            "coroutine would always count as true): do the awaiting in a phase handler and "
            "record the result in ctx.state for the guard to read",
        )
    signature = _takes_one_argument(target)
    if signature is not None:
        raise SpecError(
            "guard-signature",
            f"guard {name!r} ({_described(target)}) takes {signature}; a guard takes one "
            f"argument, the PhaseContext: 'def {name}(ctx: PhaseContext) -> bool' (read "
            "ctx.params and ctx.state)",
        )
    info = guard_info(fn)
    for path in (*info.reads, *((info.given,) if info.given is not None else ())):
        _check_read(name, path)


def _check_read(guard: str, path: str) -> None:
    """The field a declared read starts with must exist on HarnessParams/HarnessState."""
    root, field = path.split(".")[:2]
    cls = HarnessParams if root == "params" else HarnessState
    if not hasattr(cls, field):
        names = [n for n in dir(cls) if not n.startswith("_")]
        hint = did_you_mean(field, names)
        raise SpecError(
            "guard-reads",
            f"guard {guard!r} declares it reads {path!r}, but {cls.__name__} has no field "
            f"{field!r}{hint}",
        )


def _check_fallthrough(spec: MachineSpec) -> None:
    for s in spec.states:
        if s.final:
            continue
        out = spec.transitions_from(s.name)
        if not out:
            raise SpecError(
                "trap-state",
                f"state {s.name!r} has no outgoing transition; add one to another state",
                (s.name,),
            )
        if out[-1].guard is not None:
            raise SpecError(
                "no-fallthrough",
                f"state {s.name!r} may stall: its last transition {out[-1]} is guarded; "
                f"end its list with an unguarded transition",
                (s.name,),
            )


def _check_reachability(spec: MachineSpec) -> None:
    forward: dict[str, list[str]] = {}
    backward: dict[str, list[str]] = {}
    for t in spec.transitions:
        forward.setdefault(t.source, []).append(t.target)
        backward.setdefault(t.target, []).append(t.source)
    reached = reachable(spec.initial, forward)
    unreachable = tuple(n for n in spec.state_names if n not in reached)
    if unreachable:
        raise SpecError(
            "unreachable",
            f"state {_names(unreachable)} cannot be reached from {spec.initial!r}; add a "
            "transition into it or remove it",
            unreachable,
        )
    can_finish: set[str] = set()
    for f in spec.final_states:
        can_finish |= reachable(f.name, backward)
    stuck = tuple(n for n in spec.state_names if n not in can_finish)
    if stuck:
        finals = ", ".join(repr(f.name) for f in spec.final_states)
        raise SpecError(
            "no-path-to-final",
            f"state {_names(stuck)} has no path to a final state; add a transition from "
            f"{stuck[0]!r} towards one of {finals}",
            stuck,
        )


CHECKS: tuple[Callable[[MachineSpec], None], ...] = (
    _check_structure,
    _check_finals,
    _check_handlers,
    _check_guards,
    _check_fallthrough,
    _check_reachability,
    check_bounded,
)


Choice = tuple[Guard | None, TransitionSpec]
"""A compiled transition: its guard function (None: unguarded) and the transition."""
Block = tuple[Callable[["PhaseContext"], Any] | None, tuple[Choice, ...]]
"""Consecutive transitions out of a state whose guards are given the same field (see
:func:`~innerloop.fsm.guard`), with a getter of that field on the context (None: the
guards are given none). While the field is None none of them holds: one look at it
skips them all."""


def _blocks(spec: MachineSpec, state: str) -> tuple[Block, ...]:
    """The transitions out of ``state`` in priority order, in blocks (see :data:`Block`)."""
    blocks: list[tuple[str | None, list[Choice]]] = []
    for t in spec.transitions_from(state):
        declared = spec.guards[t.guard] if t.guard is not None else None
        given = guard_info(declared).given if declared is not None else None
        if not blocks or blocks[-1][0] != given:
            blocks.append((given, []))
        blocks[-1][1].append((unwrap_guard(declared) if declared else None, t))
    return tuple(
        (operator.attrgetter(given) if given else None, tuple(choices)) for given, choices in blocks
    )


Selector = Callable[["PhaseContext"], TransitionSpec]
"""The transition taken out of one state: the first whose guard holds."""


def _selector(state: str, blocks: tuple[Block, ...]) -> Selector:
    """The :data:`Selector` of ``state``: its blocks written out as one function (the
    ifs in priority order, a given field looked at once per block), which costs a third
    of walking the table in a loop; the driver calls it at every step."""
    names: dict[str, Any] = {}
    lines = ["def select(ctx):"]
    for i, (given, choices) in enumerate(blocks):
        indent = "    "
        if given is not None:
            names[f"given{i}"] = given
            lines.append(f"    if given{i}(ctx) is not None:")
            indent = "        "
        for j, (guard, transition) in enumerate(choices):
            names[f"t{i}_{j}"] = transition
            if guard is None:
                lines.append(f"{indent}return t{i}_{j}")
            else:
                names[f"g{i}_{j}"] = guard
                lines.append(f"{indent}if g{i}_{j}(ctx):")
                lines.append(f"{indent}    return t{i}_{j}")
    names["state"] = state
    lines.append(
        '    raise AssertionError(f"no transition out of {state!r}; the compiler forbids this")'
    )
    exec(compile("\n".join(lines), f"<innerloop select {state}>", "exec"), names)
    return cast(Selector, names["select"])


def _runnable(handler: Handler) -> tuple[Handler, bool]:
    """What the driver runs for ``handler``, and whether it is an async generator
    function."""
    work = work_of(handler)
    if work is not None:
        return work, False
    return handler, _async_kind(handler) == "asyncgen"


class _MachineBase(StateMachine):
    """Base of compiled classes; holds the run's phase context for the guards."""

    _abstract = True

    def __init__(self, ctx: PhaseContext, start_value: str | None = None) -> None:
        self._il_ctx = ctx
        self._il_taken: TransitionSpec | None = None
        super().__init__(start_value=start_value)


def _guard_method(name: str, fn: Guard) -> Callable[[Any], bool]:
    def method(self: Any) -> bool:
        return bool(fn(self._il_ctx))

    method.__name__ = name
    return method


def _build_class(spec: MachineSpec) -> type[StateMachine]:
    states = {
        s.name: State(s.name, value=s.name, initial=(s.name == spec.initial), final=s.final)
        for s in spec.states
    }
    attrs_: dict[str, Any] = dict(states)
    event = None
    for t in spec.transitions:
        cond = f"_guard_{t.guard}" if t.guard else None
        edge = (
            states[t.source].to(states[t.target], cond=cond, on=_record_taken(t))
            if cond
            else states[t.source].to(states[t.target], on=_record_taken(t))
        )
        event = edge if event is None else event | edge
    attrs_[STEP_EVENT] = event
    for name, fn in spec.guards.items():
        attrs_[f"_guard_{name}"] = _guard_method(f"_guard_{name}", unwrap_guard(fn))
    class_name = "".join(p.capitalize() for p in spec.name.replace("-", "_").split("_")) or "M"
    cls: type[StateMachine] = type(f"{class_name}Machine", (_MachineBase,), attrs_)
    _unregister(cls)
    return cls


def _unregister(cls: type[StateMachine]) -> None:
    """Take a compiled class back out of python-statemachine's process-wide registry
    (kept by qualified name for its Django mixin, which innerloop does not use): the class
    holds the spec's handlers and guards and all they close over (a provider, a host's
    data), which the last machine compiled under each name would otherwise keep alive for
    the process's life. The library has no public call for it.

    One atomic ``pop``, whatever class the key holds by then: threads compiling machines
    of the same name at once each register theirs under one key (this module's), and a
    look-then-delete let two of them delete it twice (a ``KeyError`` a run met with 25
    threads compiling). Only innerloop's compiled classes have this module's name, and
    none of them is wanted in the registry."""
    from statemachine import registry

    key = f"{cls.__module__}.{cls.__name__}"  # the library's own key (statemachine.utils)
    registry._REGISTRY.pop(key, None)


def _record_taken(t: TransitionSpec) -> Callable[[Any], None]:
    def on(machine: Any) -> None:
        machine._il_taken = t

    return on


@attrs.frozen(eq=False, repr=False)
class CompiledMachine:
    """A checked spec, its python-statemachine class and its transition table."""

    spec: MachineSpec
    machine_class: type[StateMachine]
    table: dict[str, tuple[Block, ...]]
    handlers: dict[str, tuple[Handler, bool]]
    """Per state: what the driver runs, the spec's handler or the coroutine doing its work
    (:func:`~innerloop.fsm._spec.work_of`), and whether it is an async generator
    function."""
    finals: frozenset[str]
    fingerprint: str
    """The spec's :attr:`~innerloop.fsm.MachineSpec.fingerprint`, computed once."""
    selectors: dict[str, Selector] = attrs.field(factory=dict)
    """Per state: :meth:`select` for that state, as one function (see :func:`_selector`)."""
    exit_reasons: dict[str, str] = attrs.field(factory=dict)
    """Per final state: why a run ended there."""
    abort_safe: frozenset[str] = frozenset()
    """The states whose handler runs when an abort is pending (``runs_when_aborting``)."""

    def __repr__(self) -> str:
        return f"CompiledMachine({self.spec!r})"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def initial(self) -> str:
        return self.spec.initial

    def is_final(self, state: str) -> bool:
        return state in self.finals

    def exit_reason(self, state: str) -> str:
        reason = self.exit_reasons.get(state)
        return reason if reason is not None else self.spec.state(state).exit_reason or state

    def select(self, state: str, ctx: PhaseContext) -> TransitionSpec:
        """The first transition out of ``state`` whose guard holds (the lean path); the
        guards given a field that is None are skipped (they do not hold)."""
        return self.selectors[state](ctx)

    def instantiate(self, ctx: PhaseContext, at: str | None = None) -> StateMachine:
        """A python-statemachine instance over ``ctx``, in state ``at``."""
        factory: Any = self.machine_class
        return factory(ctx, start_value=at)  # type: ignore[no-any-return]

    def send_step(self, machine: StateMachine) -> TransitionSpec:
        """Step a python-statemachine instance with ``send('step')``; returns the edge."""
        probe: Any = machine
        probe._il_taken = None
        machine.send(STEP_EVENT)
        taken: TransitionSpec | None = probe._il_taken
        assert taken is not None
        return taken

    def transitions(self) -> tuple[TransitionSpec, ...]:
        return self.spec.transitions


def compile_spec(spec: MachineSpec) -> CompiledMachine:
    """Check ``spec`` and compile it. Raises :class:`SpecError` for a spec that cannot run:
    among others, a handler that is not async, a guard that does not take one argument, a
    misspelled name (with "did you mean"), and a cycle no budget bounds (see
    :func:`~innerloop.fsm.loop_proof`)."""
    for check in CHECKS:
        check(spec)
    machine_class = _build_class(spec)
    table = {s.name: _blocks(spec, s.name) for s in spec.states}
    handlers = {name: _runnable(fn) for name, fn in spec.handlers.items()}
    finals = frozenset(s.name for s in spec.final_states)
    selectors = {
        name: _selector(name, blocks) for name, blocks in table.items() if name not in finals
    }
    reasons = {s.name: s.exit_reason or s.name for s in spec.final_states}
    abort_safe = frozenset(s.name for s in spec.states if s.runs_when_aborting)
    return CompiledMachine(
        spec,
        machine_class,
        table,
        handlers,
        finals,
        spec.fingerprint,
        selectors,
        reasons,
        abort_safe,
    )
