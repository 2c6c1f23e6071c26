"""What every phase handler and guard receives: ``PhaseContext(params, state, deps, scope)``.

- ``params``: the run's frozen :class:`~innerloop.HarnessParams`.
- ``state``: the run's :class:`~innerloop.HarnessState`, plain data.
- ``deps``: the run's services, frozen and typed by protocols: providers, clock, token
  cache, compactors and the tool executor. Swap any of them without touching a handler.
- ``scope``: the driver's live, per-run objects that are never persisted: the request of
  the current turn, the open stream, the static token count, whether anyone reads the
  stream events, and the abort signal.

Guards read only ``params`` and ``state``; handlers may use everything.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Container, Mapping, Sequence
from typing import Any

import attrs

from innerloop._messages import ToolResultBlock
from innerloop.fsm._params import HarnessParams, ModelChoice
from innerloop.fsm._state import HarnessState, Interrupt, Outcome
from innerloop.providers._base import ModelStream, Provider
from innerloop.providers._normalize import RequestSettings, WireRequest
from innerloop.recovery._clock import Clock
from innerloop.recovery._compaction import Compactor
from innerloop.recovery._gate import EndpointSlots, RateLimitGate, RateLimitGates, shared_gates
from innerloop.recovery._tokens import MessageTokenCache
from innerloop.tools._runner import ToolExecutor
from innerloop.tools._spec import ToolSpec
from innerloop.tools._strict import openai_strict_schema

__all__ = [
    "AbortSignal",
    "Deps",
    "Mailbox",
    "Nest",
    "PhaseContext",
    "TurnScope",
    "relay",
    "request_settings",
    "tool_definition",
]


def tool_definition(tool: ToolSpec) -> dict[str, Any]:
    """A tool's definition, with OpenAI's strict form of its schema when the tool was made
    by ``@tool`` (its function then takes the defaults of the optional arguments strict
    mode sends as null; a hand-written handler would see the nulls)."""
    definition = tool.to_definition()
    if tool.function is not None:
        strict = openai_strict_schema(tool.input_schema)
        if strict is not None:
            definition["strict_schema"] = strict
    return definition


def request_settings(params: HarnessParams) -> RequestSettings:
    """The part of ``params`` a provider request carries."""
    thinking, output = params.thinking, params.output_spec
    return RequestSettings(
        max_output_tokens=params.max_output_tokens,
        system=params.system,
        tools=tuple(tool_definition(t) for t in params.tools),
        tool_choice=params.tool_choice,
        thinking_budget=thinking.budget_tokens if thinking is not None else None,
        thinking_adaptive=thinking.adaptive if thinking is not None else False,
        thinking_effort=thinking.effort if thinking is not None else None,
        thinking_summary=thinking.summary if thinking is not None else None,
        stop_sequences=params.stop_sequences,
        temperature=params.temperature,
        top_p=params.top_p,
        prompt_cache=params.effective_prompt_cache,
        call_deadline=params.call_deadline,
        max_json_depth=params.max_json_depth,
        output_schema=dict(output.schema) if output is not None else None,
        output_strict_schema=(
            dict(output.strict_schema)
            if output is not None and output.strict_schema is not None
            else None
        ),
        output_name=output.name if output is not None else "output",
        anthropic_output_schema=dict(output.anthropic_schema) if output is not None else None,
        output_mode=params.output_mode,
        server_tools=params.server_tools,
    )


class AbortSignal:
    """Records an abort request in the state and wakes the run; safe from any thread.

    The state keeps only the request (data); the lock and the waker live here, with the
    driver."""

    def __init__(self, state: HarnessState) -> None:
        self._state = state
        self._lock = threading.Lock()
        self._waker: Callable[[], None] | None = None

    def request(self, reason: str = "abort requested by the host") -> None:
        with self._lock:
            if not self._state.request_abort(reason):
                return
            waker = self._waker
        if waker is not None:
            waker()

    def set_waker(self, wake: Callable[[], None] | None) -> None:
        """Called (once) on every request from now on; fired at once if one is pending."""
        with self._lock:
            self._waker = wake
            fire = wake is not None and self._state.abort_requested
        if fire and wake is not None:
            wake()


@attrs.frozen
class Deps:
    """The run's services. One per run (the token cache and the executor hold run data)."""

    providers: Mapping[str, Provider]
    clock: Clock
    tokens: MessageTokenCache
    compactor: Compactor
    """Shrinks the history (a summarizer, or truncation)."""
    fallback_compactor: Compactor
    """Takes over when ``compactor`` fails (deterministic truncation by default)."""
    tools: ToolExecutor
    gates: RateLimitGates = attrs.field(factory=shared_gates)
    """The rate-limit gates shared with the other runs of the process."""
    nest: Callable[[Deps, Any, str], Deps] | None = None
    """``nest(deps, child, path)``: the services of a child run (a ``Child``, at ``path``
    below this run) from those ``ChildRun`` made for it (``deps``): a durable workflow
    makes the child's model and tool calls its steps, a replay serves each child its own
    record. None: as made."""


class Mailbox:
    """Items handed over by other tasks (a child run's events), read by one task that
    waits for them or for the end of the work producing them (:func:`relay`)."""

    __slots__ = ("_wake", "items")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._wake: asyncio.Future[None] | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)
        self.nudge()

    def take(self) -> list[Any]:
        items, self.items = self.items, []
        return items

    def nudge(self, _: object = None) -> None:
        """Wake the reader (also a task's done callback: the work has ended)."""
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def wait(self) -> None:
        self._wake = asyncio.get_running_loop().create_future()
        try:
            await self._wake
        finally:
            self._wake = None


async def relay(box: Mailbox, work: asyncio.Future[Any]) -> AsyncGenerator[Any, None]:
    """Yield what arrives in ``box`` until ``work`` is done (and what it left there)."""
    work.add_done_callback(box.nudge)
    while True:
        if box.items:
            for item in box.take():
                yield item
            continue
        if work.done():
            return
        await box.wait()


@attrs.define
class TurnScope:
    """The driver's live objects, never persisted."""

    settings: RequestSettings
    request: WireRequest | None = None
    """The normalized wire request of the current turn."""
    stream: ModelStream | None = None
    """The open model stream between ``call`` and ``stream``."""
    slot: EndpointSlots | None = None
    """The endpoint's slots, one of which this run holds from before its call is sent
    until the stream is closed (only under a concurrency limit)."""
    static_tokens: int | None = None
    """Tokens of the system prompt and tool definitions (counted once per run, when a
    context budget or a compaction first needs them)."""
    assembled: bool = False
    """``assemble`` ran in this run (its first run checks the models' prices)."""
    usage_estimated: bool = False
    """A response of this run reported no usage: its tokens were counted (and said so)."""
    quiet: bool = False
    """Nobody reads the stream events (``Run.run()``), so none is made."""
    watched: Container[type] | None = None
    """In a quiet run, the event types its watchers want (an event of another type is
    made for nobody); None: every event is read."""
    reporting: bool = False
    """A handler has booked a result in the state and is yielding the events that report
    it: an abort waits until they are out (a counted turn always has its
    ``model_response``)."""
    current: str = ""
    """The state whose handler runs (kept by the driver)."""
    gates: dict[tuple[str, str], RateLimitGate] = attrs.field(factory=dict)
    """The rate-limit gate of each provider and model this run called, looked up in the
    process's gates once per run."""
    emits: bool = False
    """Some tool of the run streams events of its own (an agent tool): ``execute``
    forwards them while the calls run (set by the driver from the params' tools)."""
    side: Mailbox = attrs.field(factory=lambda: Mailbox())
    """Events emitted from outside a handler (an agent tool's child run), waiting to be
    yielded by the run (:meth:`PhaseContext.emit`)."""
    observers: tuple[Any, ...] = ()
    """The run's observers (coverage, tracing), handed on to its child runs."""
    hooks: tuple[Any, ...] = ()
    """The hooks its run observers watch this run with (set by the driver when its events
    start): a child run's observers find their parent's here."""
    nest: Nest | None = None
    """Where this run sits when it is a child run (set by ``ChildRun``); None for a top
    run."""
    children: list[Any] | None = None
    """This run's child runs, in the order they started (set by ``ChildRun``): a child's
    ``Run`` while it runs, its ``ChildSnapshot`` once it has ended (so the ended run can
    be freed): what :class:`~innerloop.RunTree` reads of a live run."""
    delegate: Callable[[], None] | None = None
    """Set while a child runs in the handler's own task (``ChildRun.inline``): an abort
    of this run is handed to it (it aborts the child) instead of cancelling the
    handler's await."""
    forward: bool = True
    """Someone reads or watches this run's events, so its child runs pass theirs up (a
    quiet ``run()`` with no observer and no event logging wanting them: they do not)."""
    nested_step: Callable[[Any, Any], Awaitable[None] | None] | None = None
    """Set when this run's checkpoints keep its children's progress: a child run (a
    child state's, a fan-out branch's, an agent tool's) calls it with its machine and the
    transition it took, once its state is saved in this run's notes; it checkpoints this
    run where it is (a ``CheckpointWriter.within``, or the same hook of a child run one
    level up)."""
    offered: tuple[ToolSpec, ...] | None = None
    """The tools offered on this turn, when ``params.prepare_tools`` or
    ``params.tool_sources`` choose them (None: ``params.tools``); see ``fsm._offer``."""

    def release_slot(self) -> None:
        """Give back the endpoint slot this run holds (none held: nothing to do)."""
        slots, self.slot = self.slot, None
        if slots is not None:
            slots.release()


@attrs.frozen(eq=False)
class Nest:
    """Where a child run sits in the tree of runs: the run that runs it (``parent``,
    that run's context), the child's ``name`` and its ``segment`` of the event path
    (``web#2``, ``forecaster[toolu_01]``)."""

    parent: PhaseContext
    name: str
    segment: str

    @property
    def path(self) -> str:
        """The child's path from the top run down (``survey/web#2``), as its events carry
        it through the top run's ``events()``."""
        above = self.parent.scope.nest
        return f"{above.path}/{self.segment}" if above is not None else self.segment


@attrs.frozen(eq=False)
class PhaseContext:
    """What a phase handler or a guard receives."""

    params: HarnessParams
    state: HarnessState
    deps: Deps
    scope: TurnScope
    signal: AbortSignal = attrs.field(repr=False)

    @property
    def current_state(self) -> str:
        """The state whose handler runs."""
        return self.scope.current

    @property
    def choice(self) -> ModelChoice:
        """The active provider and model."""
        active, params = self.state.active, self.params
        return params.model if active == 0 else params.model_chain[active]

    @property
    def provider(self) -> Provider:
        name = self.choice.provider
        try:
            return self.deps.providers[name]
        except KeyError:
            raise KeyError(
                f"no provider named {name!r} was given to the harness; "
                f"pass providers={{'{name}': ...}}"
            ) from None

    @property
    def tokens(self) -> MessageTokenCache:
        return self.deps.tokens

    @property
    def request_abort(self) -> Callable[[str], None]:
        """Abort the run (cancelling what it waits on); what tools get as ``ctx.abort``."""
        return self.signal.request

    def abort(self, reason: str = "abort requested") -> None:
        self.signal.request(reason)

    def emit(self, event: Any) -> None:
        """Hand an event to the run from outside its handler (an agent tool's child run,
        in the tool's task): the ``execute`` phase yields it while the calls run."""
        self.scope.side.put(event)

    def interrupt(
        self,
        kind: str,
        payload: Any,
        *,
        tool_use_ids: Sequence[str] = (),
        done: Sequence[ToolResultBlock] = (),
        path: str = "",
    ) -> None:
        """Pause the run for an answer from outside: the ``interrupted`` guard takes it to
        ``suspended`` (add that transition to a custom state that calls this). On
        ``Harness.resume(run, answer)`` this state's handler runs again and finds the
        answer in :attr:`resumed`. ``path`` names the child run that asked, when a child
        state or an agent tool passes a child's interrupt up."""
        state = self.state
        state.interrupts += 1
        asked_in = self.current_state
        state.interrupt = Interrupt(
            kind,
            payload,
            asked_in,
            tuple(tool_use_ids),
            tuple(done),
            path=path,
            id=f"{asked_in}:{state.interrupts}",
        )
        state.outcome = Outcome.INTERRUPTED

    @property
    def resumed(self) -> Interrupt | None:
        """The answered interrupt this state raised, when the run was just resumed here;
        the handler takes it (``state.interrupt`` is cleared) and goes on."""
        pending = self.state.interrupt
        if pending is None or not pending.answered or pending.state != self.current_state:
            return None
        self.state.interrupt = None
        return pending
