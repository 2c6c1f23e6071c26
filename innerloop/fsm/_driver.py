"""The driver: run the current state's handler, step the machine, until a final state.

Boring on purpose. Everything interesting is in the phase handlers (``_phases.py``), the
guards (``_guards.py``) and the recovery modules.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from innerloop._events import Event, Finished, Transition
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._params import HarnessParams, ModelChoice
from innerloop.fsm._spec import TransitionSpec
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
        self._sm: Any = None
        self.static_tokens: int | None = None
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_phase = False
        self._cancelled_for_abort = False

    @property
    def sm(self) -> Any:
        """The python-statemachine instance at the current state. Built on first use: the
        table engine never needs it, and it costs about 1,000 objects per run."""
        if self._sm is None:
            self._sm = self.machine.instantiate(self.params, self.state, at=self.current)
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
        if self._in_phase and self._task is not None and not self._cancelled_for_abort:
            self._cancelled_for_abort = True
            self._task.cancel()

    async def _phase(self, state_name: str) -> AsyncIterator[Event]:
        handler, is_gen = self.machine.handlers[state_name]
        self._task = asyncio.current_task()
        if not is_gen:
            self._in_phase = True
            try:
                events = await handler(self)
            except asyncio.CancelledError:
                if not self._absorb_abort_cancel():
                    raise
                return
            finally:
                self._in_phase = False
            for ev in events or ():
                yield ev
            return
        agen = handler(self)
        try:
            while True:
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
        if self.engine == "statemachine":
            taken = self.machine.send_step(self.sm)
        else:
            taken = self.machine.select(self.current, self.params, self.state)
            if self._sm is not None:
                self._sm.current_state_value = taken.target
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
                if not self.state.abort.requested:
                    async for ev in self._phase(self.current):
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
            if self.state.stream is not None:
                stream, self.state.stream = self.state.stream, None
                await stream.aclose()

    async def run(self) -> HarnessState:
        """Run to the end, discarding events; returns the state."""
        async for _ in self.events():
            pass
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
