"""The driver: run the current state's handler, step the machine, until a final state.

Boring on purpose. Everything interesting is in the phase handlers (``_phases.py``), the
guards (``_guards.py``) and the recovery modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Container,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from types import AsyncGeneratorType
from typing import Any, Generic, Literal, Protocol, cast, runtime_checkable

import attrs
from statemachine import StateMachine

from innerloop._convert import unstructure
from innerloop._events import ChildEvent, Event, Finished, RunEvent, RunStarted, Transition
from innerloop._history import tuple_later
from innerloop._log import event_logger, logger
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._context import AbortSignal, Deps, PhaseContext, TurnScope, request_settings
from innerloop.fsm._output import OutputT
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._record import ParamsRecord
from innerloop.fsm._spec import Handler, TransitionSpec
from innerloop.fsm._state import HarnessState, Interrupt
from innerloop.providers._fingerprint import history_fingerprint
from innerloop.providers._normalize import RequestSettings
from innerloop.tools._runner import ToolObserver, ToolRunner

__all__ = ["Run", "RunHooks", "RunObserver", "StepHook", "TransitionObserver", "resume_point"]

Engine = Literal["table", "statemachine"]

RESTART_AT = {"stream": "call"}
"""States that need a live object of the driver (the open stream): a run checkpointed on
entering one goes on from the state named here (the model call is made again; its answer
had not been booked)."""


def resume_point(state: str) -> str:
    """The state a run checkpointed on entering ``state`` goes on from."""
    return RESTART_AT.get(state, state)


@runtime_checkable
class TransitionObserver(Protocol):
    def on_transition(self, machine: str, transition: TransitionSpec) -> None: ...


class RunHooks(ToolObserver, Protocol):
    """What a :class:`RunObserver` watches one run with (see ``innerloop.observe``).

    ``on_event`` sees every event the driver emits, when it emits it (a transition just
    before the target's handler runs), including the events a quiet ``run()`` never makes
    visible to the host; ``on_finish`` is called once when the run's event stream closes,
    with the exception that ended it, if any. As a :class:`ToolObserver` it also sees each
    tool call of the default tool runner start and finish, in the call's own task.

    Hooks with a ``watches`` attribute, a mapping of event types to the functions that
    take them, have each event of those types handed straight to its function and no
    other event (``on_event`` is not called), and a quiet ``run()`` makes no event of
    another type for them (tracing watches the eight it records)."""

    def on_event(self, event: RunEvent) -> None: ...

    def on_finish(self, error: BaseException | None) -> None: ...


def _wanted(hooks: RunHooks) -> Mapping[type[Event], Callable[[Any], None]] | None:
    """The event types ``hooks`` wants, each with the function that takes it: its
    ``watches`` attribute when it has one (a quiet run then makes no event of another
    type for it), else None (every type, to its ``on_event``)."""
    return getattr(hooks, "watches", None)


@runtime_checkable
class RunObserver(Protocol):
    """An observer given to ``Harness(observers=...)`` that watches whole runs (tracing).

    ``start_run`` is called when a run's events start flowing and returns the hooks that
    watch that run, or None when it has nothing to watch in it (tracing with nowhere to
    send spans). Without any hooks, the driver pays nothing."""

    def start_run(self, run: Run) -> RunHooks | None: ...


def _kinds(observer: object) -> tuple[bool, bool]:
    """Whether ``observer`` is a :class:`TransitionObserver` and a :class:`RunObserver`:
    whether it has their methods, as ``isinstance`` on the runtime protocols decides, but
    without their cost (tens of µs a check, which every run paid for every observer)."""
    return (
        callable(getattr(observer, "on_transition", None)),
        callable(getattr(observer, "start_run", None)),
    )


class _EveryType:
    """Contains every event type (the run observers watch them all)."""

    def __contains__(self, item: object) -> bool:
        return True


_EVERY_TYPE = _EveryType()
_NONE: frozenset[type[Event]] = frozenset()


class StepHook(Protocol):
    """Called after every transition of one run, with the run in its new state (its
    ``state.final_state`` already set when that state is final). A checkpoint writer is
    one (``innerloop.checkpoint``); it runs before the next handler, so what it saves is
    saved before anything else happens. It may return an awaitable (I/O done off the
    event loop): the driver awaits it before the next handler starts."""

    def __call__(self, run: Run, transition: TransitionSpec) -> Awaitable[None] | None: ...


class PhaseScope:
    """The cancel scope of one handler await: an abort cancels that await alone, and the
    cancellation is absorbed when the scope closes (trio's ``CancelScope``, reduced to what
    an abort needs; it never spans a ``yield``).

    ``asyncio.timeout(None)`` moved to "now" does the same job, at about 7 µs per await
    measured here; a turn awaits a dozen handler steps, which took ``bench/overhead.py``
    past its 200 µs target. This costs under 1 µs. The same rules hold: the task is
    cancelled from a loop callback (never while it runs), and only a cancellation this
    scope asked for, with no other one pending, is absorbed.
    """

    __slots__ = ("_entry", "_fired", "_handle", "_task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self._handle: asyncio.Handle | None = None
        self.enter(task)

    def enter(self, task: asyncio.Task[Any]) -> PhaseScope:
        """Open the scope around the next await of ``task`` (a run keeps one scope and
        enters it for each await, so no await makes an object)."""
        self._task = task
        self._entry = task.cancelling()
        self._handle = None
        self._fired = False
        return self

    def cancel(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel the await in progress (call on the loop's thread)."""
        if self._handle is None:
            self._handle = loop.call_soon(self._fire)

    def _fire(self) -> None:
        self._fired = True
        self._task.cancel()

    def close(self) -> bool:
        """Leave the scope. True when it cancelled the task and nothing else did, so the
        caller may absorb the ``CancelledError``. The scope is left clean (as entered):
        entering it again for the same task only needs :meth:`refresh`."""
        handle, fired = self._handle, self._fired
        self._handle, self._fired = None, False
        if handle is not None and not fired:
            handle.cancel()
        return fired and self._task.uncancel() <= self._entry

    def refresh(self, task: asyncio.Task[Any]) -> None:
        """Enter again, for ``task``'s next handler await, a scope left clean (closed, or
        never used) of the same task: only the cancellations pending now are noted."""
        self._entry = task.cancelling()


def _taker(watches: Mapping[type[Event], Callable[[Any], None]]) -> Callable[[RunEvent], None]:
    """Hand an event of any type to the function ``watches`` has for its type, if any."""

    def take(event: RunEvent) -> None:
        on = watches.get(type(event))
        if on is not None:
            on(event)

    return take


def _also(
    watch: Callable[[RunEvent], None],
    watched: Container[type[Event]],
    also: Callable[[RunEvent], None],
    types: frozenset[type[Event]],
) -> tuple[Callable[[RunEvent], None], Container[type[Event]]]:
    """``watch`` and ``also`` as one watcher: each sees the types it wants."""

    def either(event: RunEvent) -> None:
        kind = type(event)
        if kind in watched:
            watch(event)
        if kind in types:
            also(event)

    return either, _Either(watched, types)


class _Either:
    """Contains what either of two containers of event types contains."""

    __slots__ = ("one", "other")

    def __init__(self, one: Container[type[Event]], other: Container[type[Event]]) -> None:
        self.one, self.other = one, other

    def __contains__(self, item: object) -> bool:
        return item in self.one or item in self.other


def _hand(
    events: Iterable[RunEvent], watch: Callable[[RunEvent], None], watched: Container[type[Event]]
) -> None:
    """Hand each of ``events`` whose type is watched to ``watch``."""
    for ev in events:
        if type(ev) in watched:
            watch(ev)


def _going_on(state: HarnessState[Any]) -> dict[str, Any]:
    """What ``run_started`` keeps of a run going on mid-way: its state as JSON data, but
    its history and tasks (the event's ``messages`` and ``tasks``)."""
    data: dict[str, Any] = unstructure(state)
    data.pop("history", None)
    data.pop("tasks", None)
    return data


def _nested_step(
    within: Callable[[Any, Any, Any], Awaitable[None] | None], run: Run[Any]
) -> Callable[[Any, Any], Awaitable[None] | None]:
    """``within(run, machine, transition)`` as a child run calls it, holding ``run``
    weakly: the run holds it (in its scope), and a cycle would keep each ended run, its
    history and its last request with it, until the garbage collector's next pass, which
    then walks them all (a long conversation's message paid for the histories of the
    messages before it)."""
    ref = weakref.ref(run)

    def step(machine: Any, transition: Any) -> Awaitable[None] | None:
        target = ref()
        return None if target is None else within(target, machine, transition)

    return step


class Run(Generic[OutputT]):
    """One run of a compiled machine: the driver.

    It owns the run's :class:`PhaseContext` (``run.ctx``), runs the current state's
    handler with it, and steps the machine. Handlers and guards never see the ``Run``.

    An abort (``run.abort()``, from any thread or task, or from a handler or tool through
    ``ctx.abort()``) cancels the handler's pending await through a cancel scope around
    that await alone (a :class:`PhaseScope`); the cancellation is absorbed there, and the
    machine's ``abort_requested`` guards take the run to ``abort``.
    """

    def __init__(
        self,
        machine: CompiledMachine,
        params: HarnessParams[OutputT],
        state: HarnessState[OutputT],
        deps: Deps,
        *,
        observers: Sequence[TransitionObserver | RunObserver] = (),
        engine: Engine = "table",
        start_at: str | None = None,
        run_id: str | None = None,
        on_step: StepHook | None = None,
        settings: RequestSettings | None = None,
    ) -> None:
        """``settings`` is ``request_settings(params)``, passed in by a harness that made
        it once for all its runs (it builds every tool's definition)."""
        self.machine = machine
        self.params = params
        self.state = state
        spec = params.output_spec
        if spec is not None and state.output is None and state.output_data is not None:
            state.output = spec.rebuild(state.output_data)  # read back from a checkpoint
        self.deps = deps
        self.signal = AbortSignal(state)
        self.scope = TurnScope(settings or request_settings(params))
        self.ctx = PhaseContext(params, state, deps, self.scope, self.signal)
        on_transitions: list[TransitionObserver] = []
        on_runs: list[RunObserver] = []
        for o in observers:
            on_transition, on_run = _kinds(o)
            if on_transition:
                on_transitions.append(cast(TransitionObserver, o))
            if on_run:
                on_runs.append(cast(RunObserver, o))
        self.observers = tuple(on_transitions)
        self.scope.observers = tuple(observers)
        self.scope.emits = any(t.emits_events for t in params.tools)
        self.run_observers = tuple(on_runs)
        self.engine = engine
        self.current = start_at or machine.initial
        self.run_id = run_id
        """The run's id in a checkpoint store (None when nothing checkpoints it)."""
        self.on_step = on_step
        within = getattr(on_step, "within", None)  # a checkpoint writer: children's steps
        if within is not None:
            self.scope.nested_step = _nested_step(within, self)
        self._after_step: Awaitable[None] | None = None
        self._sm: StateMachine | None = None
        if engine == "statemachine":
            self._sm = machine.instantiate(self.ctx, at=self.current)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._phase: PhaseScope | None = None
        self._scope: PhaseScope | None = None  # entered anew for each handler await
        """The cancel scope of the handler await in progress, if any."""
        self._hooks: tuple[RunHooks, ...] = ()
        self._path: list[TransitionSpec] = []
        self._reading = False
        self.stopped_at: str | None = None
        """Where the run was left when its events stopped being read before a final state
        (the host left ``events()`` early, or a handler raised); None otherwise.
        ``Harness.resume(run)`` continues it from there."""
        self.resumed_from: Run[OutputT] | None = None
        """The run this one continues (set by ``Harness.resume`` given a ``Run``): the
        earlier stretches of a live run's tree (:class:`~innerloop.RunTree`)."""
        self.asked: Interrupt | None = None
        """The interrupt the run ended suspended on (None otherwise): what a bare answer
        to ``Harness.resume(run, answer)`` is for. Kept when the run is resumed, so a
        stale answer given to this ``Run`` again is refused."""
        self._abort_safe = machine.abort_safe

    def __repr__(self) -> str:
        # bounded, as the state's: never the history
        named = f" {self.run_id!r}" if self.run_id is not None else ""
        return f"<Run{named} state={self.current!r} turns={self.state.turns}>"

    @property
    def sm(self) -> StateMachine:
        """The python-statemachine instance, in the run's current state.

        The lean table engine creates it only when asked (it costs milliseconds and
        kilobytes per run); the ``statemachine`` engine steps it on every transition.
        """
        if self._sm is None:
            self._sm = self.machine.instantiate(self.ctx, at=self.current)
        elif self._sm.current_state_value != self.current:
            self._sm.current_state_value = self.current
        return self._sm

    @property
    def path(self) -> tuple[TransitionSpec, ...]:
        """The transitions this run took so far, in order (a resumed run's from where it
        went on); ``build_diagram(run)`` draws them."""
        return tuple(self._path)

    def abort(self, reason: str = "abort requested by the host") -> None:
        """Request an abort; safe from any thread or task."""
        self.signal.request(reason)

    # -- the loop -----------------------------------------------------------------------------

    def _wake(self) -> None:
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and running is loop:
            # on the run's own loop, which may be a durable engine's workflow loop without
            # call_soon_threadsafe or is_closed
            self._cancel_phase()
            return
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed in between
            loop.call_soon_threadsafe(self._cancel_phase)

    def _cancel_phase(self) -> None:
        phase, loop = self._phase, self._loop
        if self.scope.delegate is not None:  # a child runs in the handler: it aborts
            self.scope.delegate()
        elif phase is not None and loop is not None and self.current not in self._abort_safe:
            phase.cancel(loop)

    def _entered(self, task: asyncio.Task[Any] | None = None) -> PhaseScope:
        """The run's cancel scope, entered around the next handler await of ``task`` (the
        current task when None)."""
        if task is None:
            task = asyncio.current_task()
            assert task is not None
        scope = self._scope
        scope = self._phase = scope.enter(task) if scope is not None else PhaseScope(task)
        self._scope = scope
        return scope

    async def _await_phase(self, awaitable: Any, scope: PhaseScope) -> tuple[bool, Any]:
        """Await one step of a handler in its own cancel scope (``scope``, entered for
        it). ``(False, None)`` when an abort cancelled it; any other cancellation
        propagates."""
        try:
            result = await awaitable
        except BaseException as exc:
            if self._left(scope, exc):
                return False, None
            raise
        self._left(scope)
        return True, result

    async def _gen_phase(self, agen: AsyncGenerator[RunEvent, None]) -> AsyncIterator[RunEvent]:
        """Step ``agen`` (an async-generator handler's, or the generator a handler's work
        gave back), each step in the run's cancel scope, forwarding its events; an abort
        asked for between two events stops it (see :meth:`_stops_between_events`)."""
        try:
            while True:
                if self._stops_between_events():
                    break  # asked for between two events, e.g. by the host consuming them
                try:
                    done, ev = await self._await_phase(agen.__anext__(), self._entered())
                except StopAsyncIteration:
                    break
                if not done:
                    break
                yield ev
        finally:
            await agen.aclose()
        if self.scope.side.items:  # the last events of a child it stopped (as it closed)
            for ev in self.scope.side.take():
                yield ev

    def step(self) -> TransitionSpec:
        """Choose and take the transition out of the current state."""
        machine = self.machine
        if self._sm is not None and self.engine == "statemachine":
            taken = machine.send_step(self._sm)
        else:
            taken = machine.selectors[self.current](self.ctx)
        self.current = target = taken.target
        self._path.append(taken)
        if target in machine.finals:
            self.state.final_state = target
            self.state.exit_reason = machine.exit_reason(target)
        if self.observers:
            for observer in self.observers:
                observer.on_transition(machine.name, taken)
        if self.on_step is not None:
            self._after_step = self.on_step(self, taken)
        return taken

    async def _advance(self) -> TransitionSpec:
        """:meth:`step`, then await what the step hook left to finish (a commit)."""
        taken = self.step()
        after, self._after_step = self._after_step, None
        if after is not None:
            await after
        return taken

    def _watcher(
        self, also: Callable[[RunEvent], None] | None = None, types: frozenset[type[Event]] = _NONE
    ) -> tuple[Callable[[RunEvent], None], Container[type[Event]]]:
        """Who sees the events of this run, and which event types they want: the event
        logger (the types whose log level is enabled now), the run observers' hooks
        (every type; they also watch the default tool runner) and ``also`` (the events of
        ``types``). The driver checks the type first (a set look-up) and calls the
        watcher only for the types it wants."""
        watch, watched = self._watchers()
        return (watch, watched) if also is None else _also(watch, watched, also, types)

    def _watchers(self) -> tuple[Callable[[RunEvent], None], Container[type[Event]]]:
        started = (o.start_run(self) for o in self.run_observers)
        hooks = self._hooks = self.scope.hooks = tuple(h for h in started if h is not None)
        if hooks and isinstance(self.deps.tools, ToolRunner):
            self.deps.tools.observers = hooks
        log = event_logger()
        if not hooks:
            return log.__call__, frozenset(log.rules)
        wanted = [_wanted(h) for h in hooks]
        if any(types is None for types in wanted):
            watchers = ((log.__call__,) if log else ()) + tuple(
                h.on_event if types is None else _taker(types)
                for h, types in zip(hooks, wanted, strict=True)
            )

            def watch_all(event: RunEvent) -> None:
                for w in watchers:
                    w(event)

            return watch_all, _EVERY_TYPE
        table: dict[type[Event], tuple[Callable[[RunEvent], None], ...]] = {
            kind: (log.__call__,) for kind in log.rules
        }
        for types in wanted:
            for kind, take in (types or {}).items():
                table[kind] = (*table.get(kind, ()), take)

        def watch(event: RunEvent) -> None:
            for w in table[type(event)]:
                w(event)

        return watch, frozenset(table)

    async def events(self) -> AsyncGenerator[RunEvent, None]:
        """Run to a final state, yielding every stream and run event (``match event:``
        narrows each class of :data:`~innerloop.events.RunEvent`).

        A run's events are read once. Leaving early (``break``, an exception in the loop's
        body, ``aclose()``) pauses the run, as a crash would but with nothing lost: the
        step in flight is cancelled (its stream closed, its tools stopped), the run stays
        where it was (:attr:`stopped_at`, logged as a warning) and
        ``harness.resume(run)`` continues it (a streaming answer is asked for again, a tool
        call without a recorded result runs again). Reading the events again raises. To end
        a run early instead, ``run.abort()`` and read on to its ``finished`` event."""
        self._begin()
        watch, watched = self._watcher()
        self.scope.forward = not self.scope.quiet or ChildEvent in watched
        error: BaseException | None = None
        try:
            yield self._started(watch, watched)
            while self.current not in self.machine.finals:
                if self.state.abort is None or self.current in self._abort_safe:
                    self.scope.current = self.current
                    steps = await self._steps(*self.machine.handlers[self.current])
                    if type(steps) is AsyncGeneratorType:
                        async for ev in self._gen_phase(steps):
                            if type(ev) in watched:
                                watch(ev)
                            yield ev
                    else:
                        for ev in steps or ():
                            if type(ev) in watched:
                                watch(ev)
                            yield ev
                source = self.current
                taken = await self._advance()
                ev = Transition(source, taken.target, taken.guard)
                if Transition in watched:
                    watch(ev)
                yield ev
            yield self._finish(watch, watched)
        except BaseException as exc:
            # GeneratorExit: the host stopped reading, which is no failure of the run
            error = None if isinstance(exc, GeneratorExit) else exc
            raise
        finally:
            await self._close(error)

    def _begin(self) -> None:
        if self._reading:
            raise RuntimeError(self._read_twice())
        self._reading = True
        self._loop = asyncio.get_running_loop()
        self.signal.set_waker(self._wake)

    def _stopped(self, error: BaseException | None) -> None:
        self.stopped_at = self.current
        why = f"a handler raised {error!r}" if error else "its events stopped being read"
        logger("fsm").warning(
            "run left in state %r before it ended: %s; harness.resume(run) continues it",
            self.current,
            why,
            extra={"event": "stopped", "state": self.current, "run_id": self.run_id},
        )

    def _read_twice(self) -> str:
        if self.state.final_state is not None:
            return (
                f"this run has ended ({self.state.exit_reason}); a Run's events are read "
                "once: start a new run, or fork a checkpointed one"
            )
        return (
            f"this run's events were already read, and its reader left it in state "
            f"{self.current!r} before it ended; continue it with harness.resume(run) (a "
            "new Run from where it stopped)"
        )

    def _started(
        self, watch: Callable[[RunEvent], None], watched: Container[type[Event]]
    ) -> RunStarted:
        spec, state = self.machine.spec, self.state
        later = tuple_later(state.history)  # no copy of a conversation per message
        ev = RunStarted(
            spec.name,
            self.machine.fingerprint,
            spec.import_path,
            self.current,
            self.run_id,
            ParamsRecord(self.params),
            () if later is not None else tuple(state.history),
            state.turns,
            state.usage,
            state.cost_usd,
            tuple(attrs.evolve(t) for t in state.tasks) if state.tasks else (),
            _going_on(state) if self.current != spec.initial or state.interrupt else None,
        )
        if later is not None:
            ev = ev._messages_later(later)
        if RunStarted in watched:
            watch(ev)
        return ev

    def _end(self) -> str:
        """Record the final state the run reached and why it ended there (returned)."""
        state = self.state
        state.final_state = self.current
        self.asked = state.interrupt
        reason = state.exit_reason = self.machine.exit_reason(self.current)
        return reason

    def _finish(
        self, watch: Callable[[RunEvent], None], watched: Container[type[Event]]
    ) -> Finished:
        reason = self._end()
        state = self.state
        history = None if self.scope.quiet else history_fingerprint(state.history)
        asked = state.interrupt
        ev = Finished(
            reason,
            self.current,
            state.turns,
            state.usage,
            state.cost_usd,
            history,
            None if asked is None else unstructure(asked, Interrupt),
        )
        if Finished in watched:
            watch(ev)
        return ev

    async def _close(self, error: BaseException | None) -> None:
        self.signal.set_waker(None)
        if self.current not in self.machine.finals:
            self._stopped(error)
        try:
            # eager tool calls whose message was dropped (max_tokens) must not outlive the run
            await self.deps.tools.cancel_all()
            if self.scope.stream is not None:
                stream, self.scope.stream = self.scope.stream, None
                await stream.aclose()
        finally:
            self.scope.release_slot()
            for hooks in self._hooks:
                hooks.on_finish(error)

    async def run(self) -> HarnessState[OutputT]:
        """Run to the end, discarding events; returns the state. The streamed deltas are
        not passed up at all (``quiet``): a thousand loops stream 12,500 of them a second."""
        return await self._run_watching(None, frozenset())

    async def _run_watching(
        self, also: Callable[[RunEvent], None] | None, types: frozenset[type[Event]]
    ) -> HarnessState[OutputT]:
        """:meth:`run`, handing each event of ``types`` to ``also`` as well (made for it
        when nobody else watches its type): a child run nobody reads rolls its spending
        up at each answer this way, without making the events nobody reads."""
        self.scope.quiet = True
        try:
            await self._run_quietly(also, types)
        finally:
            self.scope.quiet, self.scope.watched = False, None
        return self.state

    async def _run_quietly(
        self, also: Callable[[RunEvent], None] | None, types: frozenset[type[Event]]
    ) -> None:
        """:meth:`events` for a reader who discards every event: the same steps, each
        event handed to the watchers alone and made only when one wants its type (a
        transition, the run's start and end), with no generator or coroutine between the
        handlers and this loop (:meth:`_quiet_steps`)."""
        self._begin()
        watch, watched = self._watcher(also, types)
        self.scope.forward = ChildEvent in watched
        self.scope.watched = watched
        error: BaseException | None = None
        try:
            if RunStarted in watched:
                self._started(watch, watched)
            await self._quiet_steps(watch, watched)
            if Finished in watched:
                self._finish(watch, watched)
            else:
                self._end()
        except BaseException as exc:
            error = exc
            raise
        finally:
            await self._close(error)

    async def _quiet_steps(
        self, watch: Callable[[RunEvent], None], watched: Container[type[Event]]
    ) -> None:
        """The steps of :meth:`_run_quietly` up to a final state. The run stays in this
        task: its one cancel scope is entered around each handler await (around each step
        of a generator handler, as in :meth:`events`: an abort asked for during a step
        that still yielded is seen between two events, not by the next step)."""
        scope, finals, handlers, ctx = (
            self.scope,
            self.machine.finals,
            self.machine.handlers,
            self.ctx,
        )
        state, abort_safe = self.state, self._abort_safe
        transitions = Transition in watched
        task = asyncio.current_task()
        assert task is not None
        phase = self._scope = self._scope or PhaseScope(task)
        while (source := self.current) not in finals:
            if state.abort is None or source in abort_safe:
                scope.current = source
                handler, is_gen = handlers[source]
                if is_gen:
                    steps = handler(ctx)
                else:  # awaited in the run's one scope, entered anew for this task
                    phase._entry = task.cancelling()  # phase.refresh(task), inline
                    self._phase = phase
                    try:
                        steps = await handler(ctx)
                    except BaseException as exc:
                        self._absorb(phase, exc)
                        steps = None  # an abort cancelled it
                    self._phase = None  # left: nothing to close unless an abort asked
                    if phase._handle is not None:  # it to cancel
                        phase.close()
                if type(steps) is AsyncGeneratorType:
                    await self._hand_generator(steps, watch, watched)
                elif steps:
                    _hand(steps, watch, watched)
            taken = self.step()
            if self._after_step is not None:  # what the step hook left (a commit)
                after, self._after_step = self._after_step, None
                await after
            if transitions:
                watch(Transition(source, taken.target, taken.guard))

    def _absorb(self, phase: PhaseScope, exc: BaseException) -> None:
        """Leave ``phase``, the handler await it scoped having raised ``exc``: return
        when ``exc`` is the cancellation an abort made (absorbed); else raise it."""
        if not self._left(phase, exc):
            raise exc

    def _left(self, phase: PhaseScope, exc: BaseException | None = None) -> bool:
        """Leave ``phase``, the handler await it scoped having raised ``exc`` (None: it
        returned). True when ``exc`` is the cancellation the scope made (an abort): the
        caller absorbs it."""
        self._phase = None
        return phase.close() and isinstance(exc, asyncio.CancelledError)

    async def _steps(self, handler: Handler, is_gen: bool) -> Any:
        """Start the current state's ``handler`` (``is_gen``: an async generator function)
        for :meth:`events`: the generator it makes, or what its coroutine returned (its
        events, or the generator yielding them), None when an abort cancelled it."""
        if is_gen:
            return handler(self.ctx)
        _, steps = await self._await_phase(handler(self.ctx), self._entered())
        return steps

    async def _hand_generator(
        self,
        agen: AsyncGenerator[RunEvent, None],
        watch: Callable[[RunEvent], None],
        watched: Container[type[Event]],
    ) -> None:
        """Step ``agen`` for :meth:`_run_quietly` as :meth:`events` does, handing its
        events to ``watch``."""
        async for ev in self._gen_phase(agen):
            if type(ev) in watched:
                watch(ev)

    def _stops_between_events(self) -> bool:
        """An abort was asked for and the handler may stop between two of its events
        (unless it runs when aborting, or reports what it booked)."""
        return (
            self.state.abort is not None
            and self.current not in self._abort_safe
            and not self.scope.reporting
        )

    def run_sync(self) -> HarnessState[OutputT]:
        """:meth:`run` on a private event loop, for hosts without one."""
        return asyncio.run(self.run())

    def iter_sync(self) -> Iterator[RunEvent]:
        """The events, for hosts without an event loop (runs a private loop, closed as
        ``asyncio.run`` closes its own: leftover tasks cancelled, so the providers' clean-up
        at the loop's end runs)."""
        agen: AsyncGenerator[RunEvent, None] = self.events()

        async def step() -> RunEvent:
            return await agen.__anext__()

        with asyncio.Runner() as runner:
            try:
                while True:
                    try:
                        yield runner.run(step())
                    except StopAsyncIteration:
                        return
            finally:
                runner.run(agen.aclose())
