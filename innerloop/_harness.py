"""Harness: the front door. Builds a run from params, providers and a machine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence

from innerloop._events import Event
from innerloop._messages import Message
from innerloop._tasks import Task
from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._context import Deps
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._driver import Engine, Run, TransitionObserver
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._spec import MachineSpec
from innerloop.fsm._state import HarnessState
from innerloop.providers._base import Provider
from innerloop.recovery._clock import Clock, SystemClock
from innerloop.recovery._compaction import Compactor, TruncatingCompactor
from innerloop.recovery._gate import RateLimitGates, shared_gates
from innerloop.recovery._tokens import MessageTokenCache, TiktokenCounter, TokenCounter
from innerloop.tools._runner import ToolExecutor, ToolRunner

__all__ = ["Harness"]


def _provider_map(providers: Mapping[str, Provider] | Iterable[Provider]) -> dict[str, Provider]:
    if isinstance(providers, Mapping):
        return dict(providers)
    return {p.name: p for p in providers}


class Harness:
    """Runs the loop for ``params`` with the given providers (keyed by provider name, as
    used in ``params.model`` and ``params.fallbacks``)."""

    def __init__(
        self,
        params: HarnessParams,
        providers: Mapping[str, Provider] | Iterable[Provider],
        *,
        machine: MachineSpec | CompiledMachine = DEFAULT_SPEC,
        clock: Clock | None = None,
        token_counter: TokenCounter | None = None,
        compactor: Compactor | None = None,
        observers: Sequence[TransitionObserver] = (),
        engine: Engine = "table",
        tool_runner_factory: Callable[[], ToolExecutor] = ToolRunner,
        gates: RateLimitGates | None = None,
    ) -> None:
        self.params = params
        self.providers = _provider_map(providers)
        missing = [c for c in params.model_chain if c.provider not in self.providers]
        if missing:
            names = ", ".join(sorted({c.provider for c in missing}))
            raise ValueError(
                f"no provider given for {names}; pass providers={{'{missing[0].provider}': ...}}"
            )
        self.machine = machine if isinstance(machine, CompiledMachine) else compile_spec(machine)
        self.clock = clock or SystemClock()
        self.token_counter = token_counter or TiktokenCounter()
        self.fallback_compactor: Compactor = TruncatingCompactor()
        self.compactor = compactor or self.fallback_compactor
        self.observers = tuple(observers)
        self.engine: Engine = engine
        self.tool_runner_factory = tool_runner_factory
        self.gates = gates if gates is not None else shared_gates()
        """The rate-limit gates (process-wide by default: runs share what a 429 taught)."""

    def start(
        self,
        prompt: str | Message | None = None,
        *,
        state: HarnessState | None = None,
        tasks: Iterable[str] = (),
        start_at: str | None = None,
    ) -> Run:
        """A new run. ``prompt`` is appended as a user message to ``state``'s history."""
        state = state if state is not None else HarnessState()
        if prompt is not None:
            message = prompt if isinstance(prompt, Message) else Message.user(prompt)
            state.history.append(message)
        for i, text in enumerate(tasks, start=len(state.tasks) + 1):
            state.tasks.append(Task(f"t{i}", text))
        return Run(
            self.machine,
            self.params,
            state,
            self.deps(),
            observers=self.observers,
            engine=self.engine,
            start_at=start_at,
        )

    def deps(self) -> Deps:
        """The services of a new run (its own token cache and tool executor)."""
        return Deps(
            providers=self.providers,
            clock=self.clock,
            tokens=MessageTokenCache(self.token_counter),
            compactor=self.compactor,
            fallback_compactor=self.fallback_compactor,
            tools=self.tool_runner_factory(),
            gates=self.gates,
        )

    async def run(self, prompt: str | Message | None = None, **kwargs: object) -> HarnessState:
        """Run to the end; returns the final state."""
        return await self.start(prompt, **kwargs).run()  # type: ignore[arg-type]

    def run_sync(
        self,
        prompt: str | Message | None = None,
        *,
        on_event: Callable[[Event], None] | None = None,
        **kwargs: object,
    ) -> HarnessState:
        """The sync facade: drives the async run on a private event loop."""
        run = self.start(prompt, **kwargs)  # type: ignore[arg-type]

        async def drive() -> HarnessState:
            async for event in run.events():
                if on_event is not None:
                    on_event(event)
            return run.state

        return asyncio.run(drive())
