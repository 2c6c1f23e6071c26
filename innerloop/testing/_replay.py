"""Replay a recorded run: every recorded run is a test.

A run's event log holds what it needs to run again offline: its params and first
messages (``run_started``), the fingerprint of each model call's request
(``model_call``), what each call got back (``model_response``, ``model_error``) and each
tool call's result (``tool_executed``). :func:`replay` runs the run again on its own
machine with a provider that serves the recorded answers in order and checks that each
request is the one recorded, and with tools that return their recorded results; then it
compares the path of transitions, the end (exit reason, final state, turns, usage, cost)
and the final history's fingerprint with the record. The first difference is a
:class:`Divergence`.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Literal, NoReturn

import attrs

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import MessageComplete, ModelCall, StreamEvent, Transition
from innerloop._messages import Message, ModelResponse, ToolUseBlock
from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._context import Deps
from innerloop.fsm._driver import Run
from innerloop.fsm._locate import MachineNotFound, MachineRecord, find_machine, load_spec
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._record import RecordError, params_from_record
from innerloop.fsm._spec import MachineSpec
from innerloop.fsm._state import HarnessState
from innerloop.providers._fingerprint import (
    history_fingerprint,
    request_fingerprint,
    request_parts,
)
from innerloop.providers._normalize import DIALECTS, WireRequest
from innerloop.recovery._compaction import TruncatingCompactor
from innerloop.recovery._gate import RateLimitGates
from innerloop.recovery._tokens import MessageTokenCache, TiktokenCounter
from innerloop.testing._clock import FakeClock
from innerloop.testing._recording import Call, Recording, ReplayError, Source, load_recording
from innerloop.tools._runner import ToolBatch, ToolRunner
from innerloop.tools._spec import ToolCallResult

__all__ = ["Divergence", "ReplayDivergence", "ReplayError", "ReplayResult", "areplay", "replay"]

ParamsOverride = HarnessParams[Any] | Callable[[HarnessParams[Any]], HarnessParams[Any]]
"""Params to replay with: new ones, or a function of the recorded ones."""

_ABORT_GUARD = "abort_requested"
"""The guard of the edges a host's abort takes (the default machine's)."""


class ReplayDivergence(AssertionError):
    """A replay parted from its record; the message names the first difference."""

    def __init__(self, divergence: Divergence, where: str) -> None:
        self.divergence = divergence
        super().__init__(f"replay of {where} diverged: {divergence}")


@attrs.frozen
class Divergence:
    """The first place a replay parts from its record."""

    kind: Literal["transition", "request", "tool", "end"]
    """What differs: a transition taken, a model request, a tool call, or the run's end
    (exit reason, turns, usage, cost, final history, calls left unmade)."""
    state: str
    """The machine state the replay was in."""
    step: int
    """The transition (``kind="transition"``), model call (``"request"``) or tool call
    (``"tool"``) number, from 1; the number of transitions taken for ``"end"``."""
    recorded: str
    replayed: str
    request: tuple[str, ...] = ()
    """For ``"request"``: each part of the request that differs, recorded then replayed."""
    response: ModelResponse | ProviderError | None = None
    """For ``"request"``: what the run got for the recorded request (a response, or the
    error the call failed with)."""

    def __str__(self) -> str:
        what = {
            "transition": f"transition {self.step}",
            "request": f"model call {self.step}",
            "tool": f"tool call {self.step}",
            "end": "the run's end",
        }[self.kind]
        lines = [
            f"{what} in state {self.state!r}",
            f"  recorded: {self.recorded}",
            f"  replayed: {self.replayed}",
        ]
        lines += [f"  request {line}" for line in self.request]
        if isinstance(self.response, ProviderError):
            lines.append(f"  recorded response: failed: {self.response}")
        elif self.response is not None:
            lines.append(f"  recorded response: {_response_text(self.response)}")
        return "\n".join(lines)


@attrs.frozen(eq=False)
class ReplayResult:
    """What :func:`replay` found: :attr:`divergence` is None when the run replayed the
    same; :meth:`assert_same` fails a test otherwise."""

    where: str
    """The run replayed (``run 2 of runs/x.jsonl``)."""
    divergence: Divergence | None
    state: HarnessState[Any]
    """The replay's final state."""
    transitions: int
    """Transitions the replay took."""
    calls: int
    """Recorded model calls it served."""

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def assert_same(self) -> ReplayResult:
        """Raise :class:`ReplayDivergence` (an ``AssertionError`` naming the first
        difference) unless the replay took the same path to the same end."""
        if self.divergence is not None:
            raise ReplayDivergence(self.divergence, self.where)
        return self

    def __repr__(self) -> str:
        verdict = "same" if self.ok else f"diverged at {self.divergence!s}".split("\n")[0]
        return f"<ReplayResult {self.where}: {verdict}, {self.transitions} transitions>"


# -- the record -------------------------------------------------------------------------------


def _machine(rec: Recording, specs: Iterable[MachineSpec | str]) -> CompiledMachine:
    started = rec.started
    record = MachineRecord(started.machine, started.fingerprint, started.import_path)
    try:
        given = [load_spec(s) if isinstance(s, str) else s for s in specs]
        spec = find_machine(record, given, what=rec.where)
    except (MachineNotFound, ValueError) as exc:
        raise ReplayError(str(exc)) from None
    initial = spec.initial
    if started.state != initial:
        raise ReplayError(
            f"cannot replay {rec.where}: it went on from state {started.state!r} (a resumed "
            f"run); a replay starts at {initial!r}: replay the run it resumed"
        )
    return _compiled(_Same(spec))


class _Same:
    """A spec compared by identity (a spec is unhashable), as a cache key that keeps it."""

    __slots__ = ("spec",)

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec

    def __hash__(self) -> int:
        return id(self.spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.spec is self.spec


@functools.lru_cache(maxsize=16)
def _compiled(key: _Same) -> CompiledMachine:
    """The compiled machine of a spec: replaying the runs of one machine compiles it once
    (compiling costs tens of milliseconds; a compiled machine serves any number of runs)."""
    return compile_spec(key.spec)


def _params(
    rec: Recording, override: ParamsOverride | None, real_tools: bool
) -> HarnessParams[Any]:
    if isinstance(override, HarnessParams):
        return override
    if rec.started.params is None:
        raise ReplayError(
            f"cannot replay {rec.where}: a checkpoint store keeps no params; pass "
            "params=HarnessParams(...), the params the run ran with"
        )
    try:
        recorded = params_from_record(rec.started.params, real_tools=real_tools)
    except RecordError as exc:
        raise ReplayError(f"cannot replay {rec.where}: {exc}") from None
    return recorded if override is None else override(recorded)


# -- the replay ---------------------------------------------------------------------------


def _response_text(response: ModelResponse) -> str:
    parts = []
    for block in response.message.content:
        if isinstance(block, ToolUseBlock):
            parts.append(f"{block.name}({json.dumps(block.input, separators=(',', ':'))})")
        else:
            text = getattr(block, "text", None)
            if text:
                parts.append(repr(text if len(text) <= 120 else text[:117] + "..."))
    return f"[{response.stop_reason}] " + " ".join(parts)


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _message(history: Sequence[Message], i: int) -> str:
    return _short(history[i].to_dict()) if i < len(history) else "none"


def _call_text(call: ModelCall) -> str:
    return (
        f"{call.provider}:{call.model}, {call.messages} messages, request {call.fingerprint[:12]}"
    )


class _Stream:
    """A model stream serving a recorded turn: its response, or its mid-stream error.
    A call the host aborted mid-stream has neither; its replay is aborted where the run
    was, before the stream is read."""

    def __init__(self, response: ModelResponse | None, error: ProviderError | None) -> None:
        self._events: list[StreamEvent] = [] if response is None else [MessageComplete(response)]
        self._error = error

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[StreamEvent]:
        for event in self._events:
            yield event
        if self._error is not None:
            raise self._error
        if not self._events:  # a host abort came before the stream was read, else this
            raise ProviderError(ErrorCategory.FATAL, "the recorded call has no answer")

    async def aclose(self) -> None:
        return None


class _Player:
    """The replay's side of the record: the model calls served so far, the first
    divergence, and the run (to name its state)."""

    def __init__(self, rec: Recording, params: HarnessParams[Any]) -> None:
        self.rec = rec
        self.params = params
        self.served = 0
        self.tool_calls = 0
        self.divergence: Divergence | None = None
        self.run: Run[Any] | None = None

    @property
    def state(self) -> str:
        return self.run.current if self.run is not None else "?"

    def diverge(self, divergence: Divergence) -> None:
        if self.divergence is None:
            self.divergence = divergence
            if self.run is not None:
                self.run.abort("replay diverged from its record")

    def open(self, provider: str, request: WireRequest) -> _Stream:
        calls, n = self.rec.calls, self.served + 1
        now = ModelCall(
            provider,
            request.dialect,
            request.model,
            request_fingerprint(request),
            request_parts(request),
            len(request.payload.get("messages") or ()),
        )
        if n > len(calls):
            self._refuse(
                Divergence(
                    "request",
                    self.state,
                    n,
                    f"no call {n}: the run made {len(calls)} model calls",
                    _call_text(now),
                )
            )
        call = calls[n - 1]
        if call.request is None:
            divergence = self._history_differs(call, now)
        elif call.request.fingerprint != now.fingerprint:
            divergence = Divergence(
                "request",
                self.state,
                n,
                _call_text(call.request),
                _call_text(now),
                tuple(self._request_diff(call.request, now, request)),
                call.error.error if call.error is not None else call.response,
            )
        else:
            divergence = None
        if divergence is not None:
            self._refuse(divergence)
        self.served = n
        error = call.error
        if error is not None and error.stage == "open":
            raise error.error
        return _Stream(call.response, error.error if error is not None else None)

    def _history_differs(self, call: Call, now: ModelCall) -> Divergence | None:
        """A stored run keeps each call's history, not its request: the replay's history
        must be that one (the first message that differs is named)."""
        then = call.history or ()
        history = tuple(self.run.state.history) if self.run is not None else ()
        if history == then:
            return None
        i = next((i for i, (a, b) in enumerate(zip(then, history, strict=False)) if a != b), None)
        i = min(len(then), len(history)) if i is None else i
        return Divergence(
            "request",
            self.state,
            self.served + 1,
            f"{len(then)} messages",
            f"{len(history)} messages ({now.provider}:{now.model})",
            (f"messages[{i}]: recorded {_message(then, i)}, replayed {_message(history, i)}",),
            call.error.error if call.error is not None else call.response,
        )

    def _refuse(self, divergence: Divergence) -> NoReturn:
        self.diverge(divergence)
        raise ProviderError(ErrorCategory.FATAL, f"replay diverged: {divergence}")

    def _request_diff(self, then: ModelCall, now: ModelCall, request: WireRequest) -> list[str]:
        recorded = self.rec.started.params or {}
        lines: list[str] = []
        for key in sorted({*then.parts, *now.parts}):
            if then.parts.get(key) == now.parts.get(key):
                continue
            if key not in now.parts:
                lines.append(f"{key}: recorded, not sent now")
            elif key == "model":
                lines.append(f"model: recorded {then.model!r}, replayed {now.model!r}")
            elif key == "messages":
                messages = request.payload.get("messages") or [None]
                lines.append(
                    f"messages: recorded {then.messages}, replayed {now.messages}; "
                    f"the replayed last one: {_short(messages[-1])}"
                )
            elif key in ("system", "instructions") and recorded.get("system") != (
                self.params.system
            ):
                lines.append(
                    f"system: recorded {_short(recorded.get('system'))}, replayed "
                    f"{_short(self.params.system)}"
                )
            elif key == "tools":
                names = [t.get("name") for t in recorded.get("tools", ())]
                lines.append(
                    f"tools: recorded {names}, replayed {[t.name for t in self.params.tools]}"
                )
            elif key not in then.parts:
                lines.append(f"{key}: not sent by the run, replayed {_short(request.payload[key])}")
            else:
                lines.append(f"{key}: differs, replayed {_short(request.payload[key])}")
        return lines

    def tool(self, call: ToolUseBlock) -> ToolCallResult:
        self.tool_calls += 1
        done = self.rec.tools.get(call.id)
        if done is None or done.name != call.name:
            self.diverge(
                Divergence(
                    "tool",
                    self.state,
                    self.tool_calls,
                    "no such call recorded" if done is None else f"{done.name} (id {call.id})",
                    f"{call.name}({_short(call.input)}) (id {call.id})",
                )
            )
            return ToolCallResult(call.id, call.name, "replay diverged", is_error=True)
        return ToolCallResult(
            done.tool_use_id,
            done.name,
            done.output,
            is_error=done.is_error,
            timed_out=done.timed_out,
            duration=done.duration,
        )


class _ReplayProvider:
    """A provider answering from the record (see :meth:`_Player.open`)."""

    def __init__(self, player: _Player, name: str, dialect: str) -> None:
        self.name = name
        self.dialect = dialect
        self._player = player

    async def open(self, request: WireRequest) -> _Stream:
        return self._player.open(self.name, request)

    async def aclose(self) -> None:
        return None


class _RecordedTools:
    """A tool executor returning the recorded results, by tool-call id."""

    def __init__(self, player: _Player) -> None:
        self._player = player

    def prestart(self, scope: Any, call: ToolUseBlock) -> None:
        return None

    async def run_calls(self, scope: Any, calls: Sequence[ToolUseBlock]) -> ToolBatch:
        return ToolBatch(tuple(self._player.tool(c) for c in calls), False)

    async def cancel_all(self) -> None:
        return None


def _dialects(rec: Recording, params: HarnessParams[Any]) -> dict[str, str]:
    found = {c.request.provider: c.request.dialect for c in rec.calls if c.request is not None}
    known = {
        c.provider: c.provider if c.provider in DIALECTS else DIALECTS[0]
        for c in params.model_chain
    }
    return {p: found.get(p, d) for p, d in known.items()}


def _check_end(player: _Player, replayed: int) -> None:
    rec, state = player.rec, player.run.state if player.run is not None else None
    assert state is not None
    end = rec.finished
    here = player.state
    if replayed < len(rec.transitions):
        t = rec.transitions[replayed]
        player.diverge(
            Divergence(
                "transition",
                here,
                replayed + 1,
                _transition_text(t),
                f"none: the replay ended in {state.final_state!r}",
            )
        )
        return
    if player.served < len(rec.calls):
        player.diverge(
            Divergence(
                "end",
                here,
                replayed,
                f"{len(rec.calls)} model calls",
                f"{player.served} model calls",
            )
        )
        return
    pairs = [
        ("exit_reason", end.exit_reason, state.exit_reason),
        ("turns", end.turns, state.turns),
        ("usage", end.usage, state.usage),
        ("cost_usd", end.cost_usd, state.cost_usd),
    ]
    if end.history is not None:
        pairs.append(("history", end.history, history_fingerprint(state.history)))
    for name, then, now in pairs:
        if then != now:
            player.diverge(Divergence("end", here, replayed, f"{name}={then!r}", f"{name}={now!r}"))
            return


def _transition_text(t: Transition) -> str:
    guard = f" [{t.guard}]" if t.guard else ""
    return f"{t.source} -> {t.target}{guard}"


async def _play(player: _Player, run: Run[Any]) -> int:
    """Drive ``run``, comparing each transition with the record; the number taken."""
    rec, taken = player.rec, 0
    abort_at = None
    if rec.host_abort is not None:
        abort_at = next((i for i, t in enumerate(rec.transitions) if t.guard == _ABORT_GUARD), None)
    if abort_at == 0:
        run.abort(rec.host_abort or "")
    async for event in run.events():
        if not isinstance(event, Transition) or player.divergence is not None:
            continue
        taken += 1
        recorded = rec.transitions[taken - 1] if taken <= len(rec.transitions) else None
        if recorded != event:
            player.diverge(
                Divergence(
                    "transition",
                    event.source,
                    taken,
                    "none: the run had ended" if recorded is None else _transition_text(recorded),
                    _transition_text(event),
                )
            )
        elif abort_at is not None and taken == abort_at:
            run.abort(rec.host_abort or "")  # the host aborted the run here
    return taken


async def areplay(
    source: Source,
    run: int | str = "last",
    *,
    specs: Iterable[MachineSpec | str] = (),
    params: ParamsOverride | None = None,
    real_tools: bool = False,
) -> ReplayResult:
    """:func:`replay`, on the running event loop."""
    rec = load_recording(source, run)
    machine = _machine(rec, specs)
    run_params = _params(rec, params, real_tools)
    player = _Player(rec, run_params)
    providers = {
        name: _ReplayProvider(player, name, dialect)
        for name, dialect in _dialects(rec, run_params).items()
    }
    started = rec.started
    state: HarnessState[Any] = HarnessState(
        history=list(started.messages),
        tasks=[attrs.evolve(t) for t in started.tasks],
        usage=started.usage,
        turns=started.turns,
        cost_usd=started.cost_usd,
    )
    state.start_run()
    deps = Deps(
        providers=providers,
        clock=FakeClock(),
        tokens=MessageTokenCache(TiktokenCounter()),
        compactor=TruncatingCompactor(),
        fallback_compactor=TruncatingCompactor(),
        tools=ToolRunner() if real_tools else _RecordedTools(player),
        gates=RateLimitGates(),
    )
    replaying: Run[Any] = Run(machine, run_params, state, deps)
    player.run = replaying
    taken = await _play(player, replaying)
    if player.divergence is None:
        _check_end(player, taken)
    return ReplayResult(rec.where, player.divergence, state, taken, player.served)


def replay(
    source: Source,
    run: int | str = "last",
    *,
    specs: Iterable[MachineSpec | str] = (),
    params: ParamsOverride | None = None,
    real_tools: bool = False,
) -> ReplayResult:
    """Replay one run of the event log at ``source`` (or of a log's events, as dicts) and
    compare it with its record.

    ``run`` picks the run: its number (1 for the first), ``"last"`` or its ``run_id``.
    The machine is the one the run recorded, found among ``specs`` (``MachineSpec``s or
    ``"module:ATTR"``) or at its recorded import path. ``params`` replaces the recorded
    params (a ``HarnessParams``, or a function of the recorded ones: to see what a new
    prompt or model changes). Tools return their recorded results, or run for real with
    ``real_tools=True`` (their functions imported from the recorded paths).

    One line makes a recorded run a test::

        replay("runs/incident.jsonl").assert_same()

    :class:`ReplayError` when the run cannot be replayed (an older log, no such run, its
    machine not at hand); the result's ``divergence`` otherwise."""
    return asyncio.run(areplay(source, run, specs=specs, params=params, real_tools=real_tools))
