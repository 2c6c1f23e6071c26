"""The driver: run the current state's handler, step the machine, until a final state.

Boring on purpose. Everything interesting is in the phase handlers (``_phases.py``), the
guards (``_guards.py``) and the recovery modules.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from statemachine import StateMachine

from innerloop._events import Event, Finished, Transition
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._params import HarnessParams, ModelChoice
from innerloop.fsm._spec import Handler, TransitionSpec
from innerloop.fsm._state import HarnessState
from innerloop.recovery._clock import Clock
from innerloop.recovery._compaction import Compactor
from innerloop.recovery._tokens import MessageTokenCache

if TYPE_CHECKING:
    from innerloop.providers._base import Provider
    from innerloop.tools._runner import ToolRunner

__all__ = ["Run", "TransitionObserver"]

Engine = Literal["table", "statemachine"]


class TransitionObserver(Protocol):
    def on_transition(self, machine: str, transition: TransitionSpec) -> None: ...


class Run:
    """One run of a compiled machine over ``params`` and ``state``.

    Handlers reach everything they need through it: ``params``, ``state``, the providers,
    the clock, the token cache, the compactor and the tool runner.
    """

    def __init__(
        self,
        machine: CompiledMachine,
        params: HarnessParams,
        state: HarnessState,
        *,
        providers: Mapping[str, Provider],
        clock: Clock,
        tokens: MessageTokenCache,
        compactor: Compactor,
        fallback_compactor: Compactor,
        tool_runner: ToolRunner,
        observers: Sequence[TransitionObserver] = (),
        engine: Engine = "table",
        start_at: str | None = None,
    ) -> None:
        self.machine = machine
        self.params = params
        self.state = state
        self.providers = providers
        self.clock = clock
        self.tokens = tokens
        self.compactor = compactor
        self.fallback_compactor = fallback_compactor
        self.tool_runner = tool_runner
        self.observers = tuple(observers)
        self.engine = engine
        self.current = start_at or machine.initial
        self._sm: StateMachine | None = None
        if engine == "statemachine":
            self._sm = machine.instantiate(params, state, at=self.current)
        self.static_tokens: int | None = None
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_phase = False
        self._abort_safe = frozenset(s.name for s in machine.spec.states if s.runs_when_aborting)
        self._cancelled_for_abort = False
        self.quiet = False  # set by run(): nobody reads the stream events, so none is made

    @property
    def sm(self) -> StateMachine:
        """The python-statemachine instance, in the run's current state.

        The lean table engine creates it only when asked (it costs milliseconds and
        kilobytes per run); the ``statemachine`` engine steps it on every transition.
        """
        if self._sm is None:
            self._sm = self.machine.instantiate(self.params, self.state, at=self.current)
        elif self._sm.current_state_value != self.current:
            self._sm.current_state_value = self.current
        return self._sm

    # -- services for handlers -------------------------------------------------------------

    @property
    def choice(self) -> ModelChoice:
        """The active provider and model."""
        return self.params.model_chain[self.state.active]

    @property
    def provider(self) -> Provider:
        name = self.choice.provider
        try:
            return self.providers[name]
        except KeyError:
            raise KeyError(
                f"no provider named {name!r} was given to the harness; "
                f"pass providers={{'{name}': ...}}"
            ) from None

    def abort(self, reason: str = "abort requested by the host") -> None:
        """Request an abort; safe from any thread or task."""
        self.state.abort.request(reason)

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
        if (
            self._in_phase
            and self._task is not None
            and not self._cancelled_for_abort
            and self.current not in self._abort_safe
        ):
            self._cancelled_for_abort = True
            self._task.cancel()

    async def _call_phase(self, handler: Handler) -> Sequence[Event]:
        """Run a coroutine handler; its events (if any) come back as a list."""
        self._task = asyncio.current_task()
        self._in_phase = True
        try:
            return await handler(self) or ()
        except asyncio.CancelledError:
            if not self._absorb_abort_cancel():
                raise
            return ()
        finally:
            self._in_phase = False

    async def _gen_phase(self, handler: Handler) -> AsyncIterator[Event]:
        """Run an async-generator handler, forwarding its events."""
        self._task = asyncio.current_task()
        agen = handler(self)
        try:
            while True:
                if self.state.abort.requested and self.current not in self._abort_safe:
                    return  # asked for between two events, e.g. by the host consuming them
                self._in_phase = True
                try:
                    ev = await agen.__anext__()
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if not self._absorb_abort_cancel():
                        raise
                    return
                finally:
                    self._in_phase = False
                yield ev
        finally:
            await agen.aclose()

    def _absorb_abort_cancel(self) -> bool:
        if self._cancelled_for_abort and self.state.abort.requested:
            self._cancelled_for_abort = False
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return True
        return False

    def step(self) -> TransitionSpec:
        """Choose and take the transition out of the current state."""
        if self._sm is not None and self.engine == "statemachine":
            taken = self.machine.send_step(self._sm)
        else:
            taken = self.machine.select(self.current, self.params, self.state)
        self.current = taken.target
        for observer in self.observers:
            observer.on_transition(self.machine.name, taken)
        return taken

    async def events(self) -> AsyncGenerator[Event, None]:
        """Run to a final state, yielding every stream and run event."""
        self._loop = asyncio.get_running_loop()
        self.state.abort.add_waker(self._wake)
        try:
            while self.current not in self.machine.finals:
                if not self.state.abort.requested or self.current in self._abort_safe:
                    handler, is_gen = self.machine.handlers[self.current]
                    if is_gen:
                        async for ev in self._gen_phase(handler):
                            yield ev
                    else:
                        for ev in await self._call_phase(handler):
                            yield ev
                source = self.current
                taken = self.step()
                yield Transition(source, taken.target, taken.guard)
            self.state.final_state = self.current
            self.state.exit_reason = self.machine.exit_reason(self.current)
            yield Finished(
                self.state.exit_reason,
                self.current,
                self.state.turns,
                self.state.usage,
                self.state.cost_usd,
            )
        finally:
            self.state.abort.remove_waker(self._wake)
            # eager tool calls whose message was dropped (max_tokens) must not outlive the run
            await self.tool_runner.cancel_all()
            if self.state.stream is not None:
                stream, self.state.stream = self.state.stream, None
                await stream.aclose()

    async def run(self) -> HarnessState:
        """Run to the end, discarding events; returns the state. The streamed deltas are
        not passed up at all (``quiet``): a thousand loops stream 12,500 of them a second."""
        self.quiet = True
        try:
            async for _ in self.events():
                pass
        finally:
            self.quiet = False
        return self.state

    def iter_sync(self) -> Iterator[Event]:
        """The events, for hosts without an event loop (runs a private loop)."""
        loop = asyncio.new_event_loop()
        agen: AsyncGenerator[Event, None] = self.events()
        try:
            while True:
                try:
                    yield loop.run_until_complete(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            loop.run_until_complete(agen.aclose())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
