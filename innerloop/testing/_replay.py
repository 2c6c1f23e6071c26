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
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NoReturn

import attrs

from innerloop._convert import structure
from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import (
    ChildEvent,
    Finished,
    MessageComplete,
    ModelCall,
    RunStarted,
    StreamEvent,
    Transition,
)
from innerloop._messages import Message, ModelResponse, ToolUseBlock, Usage
from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._context import Deps
from innerloop.fsm._driver import Run
from innerloop.fsm._live import LIVE, live_named
from innerloop.fsm._locate import MachineNotFound, MachineRecord, find_machine, load_spec
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._record import RecordError, params_from_record, recorded_only
from innerloop.fsm._spec import MachineSpec
from innerloop.fsm._state import HarnessState
from innerloop.providers._fingerprint import history_fingerprint, request_digests
from innerloop.providers._normalize import DIALECTS, WireRequest
from innerloop.recovery._compaction import TruncatingCompactor
from innerloop.recovery._gate import RateLimitGates
from innerloop.recovery._tokens import MessageTokenCache, TiktokenCounter
from innerloop.testing._clock import FakeClock
from innerloop.testing._recording import Call, Recording, ReplayError, Source, load_recording
from innerloop.tools._runner import ToolBatch, ToolRunner, aborted_result
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

    kind: Literal["transition", "request", "tool", "end", "child"]
    """What differs: a transition taken, a model request, a tool call, the run's end
    (exit reason, turns, usage, cost, final history, the interrupt it waits on, calls
    left unmade), or a child run (one started that the record lacks, or one recorded
    that did not run)."""
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
    path: str = ""
    """The child run it happened in (``research/web#2``); ``""`` for the top run."""

    def __str__(self) -> str:
        what = {
            "transition": f"transition {self.step}",
            "request": f"model call {self.step}",
            "tool": f"tool call {self.step}",
            "end": "the run's end",
            "child": f"child run {self.step}",
        }[self.kind]
        where = f" of child {self.path!r}" if self.path else ""
        lines = [
            f"{what} in state {self.state!r}{where}",
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
    if started.state != initial and started.resumed is None:
        raise ReplayError(
            f"cannot replay {rec.where}: it went on from state {started.state!r} (a resumed "
            "run), and was recorded by an innerloop whose run_started did not keep the state "
            "a resumed run goes on with; record it again with this innerloop, or replay the "
            "run it resumed"
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
        params = override
    elif rec.started.params is None:
        raise ReplayError(
            f"cannot replay {rec.where}: a checkpoint store keeps no params; pass "
            "params=HarnessParams(...), the params the run ran with"
        )
    else:
        try:
            recorded = params_from_record(rec.started.params)
        except RecordError as exc:
            raise ReplayError(f"cannot replay {rec.where}: {exc}") from None
        params = recorded if override is None else override(recorded)
        missing = {
            k: v for k, v in rec.started.params.items() if k in LIVE and not getattr(params, k)
        }
        live = live_named(missing)
        if live is not None:
            raise ReplayError(
                f"cannot replay {rec.where}: its tools were chosen each turn by {live}, which "
                "a log names but cannot carry; give them again: --harness MODULE:ATTR (the "
                "Harness it ran on), or replay(LOG, params=lambda p: attrs.evolve(p, "
                "tool_sources=[...], prepare_tools=...))"
            )
    unreal = [t.name for t in params.tools if recorded_only(t)] if real_tools else []
    if unreal:
        raise ReplayError(
            f"cannot replay {rec.where} with real tools: the log keeps no code, and tool "
            f"{unreal[0]!r} is only its record (a recorded function path is never imported); "
            "pass params= holding the real tools (e.g. params=lambda p: p.evolve(tools=[...]))"
        )
    return params


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


class _Replay:
    """What the players of one replay share: the first divergence, the top run (aborted
    at it), and a player per run (the top one at path ``""``, each child at its path)."""

    def __init__(self, rec: Recording, params: HarnessParams[Any], real_tools: bool) -> None:
        self.divergence: Divergence | None = None
        self.run: Run[Any] | None = None
        self.real_tools = real_tools
        self.top = _Player(self, "", rec, params)
        self.players: dict[str, _Player] = {"": self.top}
        self.started: dict[str, int] = {}
        """Per child path, how many of its runs the replay started."""

    def diverge(self, divergence: Divergence) -> None:
        if self.divergence is None:
            self.divergence = divergence
            if self.run is not None:
                self.run.abort("replay diverged from its record")

    def nest(self, prefix: str) -> Callable[[Deps, Any, str], Deps]:
        """The ``Deps.nest`` of the run at ``prefix``: each child it starts is served by
        a player of its own, on its own record."""

        def nest(deps: Deps, child: Any, path: str) -> Deps:
            full = f"{prefix}/{path}" if prefix else path
            player = self._child(prefix, full)
            return attrs.evolve(
                deps,
                providers=player.providers(deps.providers, child.params.model_chain),
                tools=deps.tools if self.real_tools else _RecordedTools(player),
                nest=self.nest(full),
            )

        return nest

    def _child(self, parent: str, path: str) -> _Player:
        n = self.started.get(path, 0) + 1
        self.started[path] = n
        runs = self.top.rec.children.get(path, ())
        rec = runs[n - 1] if n <= len(runs) else None
        player = _Player(self, path, rec, None)
        self.players[path] = player
        if rec is None:  # a divergence once it runs (a child made, then not run, is none)
            above = self.players.get(parent, self.top)
            player.unrecorded = attrs.evolve(
                Divergence(
                    "child",
                    above.state,
                    sum(self.started.values()),
                    f"no run of child {path!r}"
                    + (f" after its {len(runs)}" if runs else "")
                    + " was recorded",
                    f"child {path!r} started (run {n})",
                ),
                path=parent,
            )
        return player

    def event(self, event: ChildEvent) -> None:
        """Compare a child's transition or end with its record."""
        player = self.players.get(event.path)
        if player is None:
            return
        if player.unrecorded is not None:
            self.diverge(player.unrecorded)
            return
        inner = event.event
        if isinstance(inner, Transition):
            player.step(inner)
        elif isinstance(inner, Finished):
            player.finish(inner)

    def check_children(self) -> None:
        """Every child the run ran, the replay ran (but an agent tool's, when its call
        was answered from the record)."""
        for path, runs in self.top.rec.children.items():
            done = self.started.get(path, 0)
            if done >= len(runs) or self._answered_whole(path):
                continue
            missed = runs[done]
            parent = path.rpartition("/")[0]
            above = self.players.get(parent, self.top)
            above.diverge(
                Divergence(
                    "child",
                    above.state,
                    sum(self.started.values()) + 1,
                    f"child {path!r} ran ({len(missed.transitions)} transitions, "
                    f"{missed.finished.exit_reason})",
                    f"child {path!r} did not run" + (f" again after {done}" if done else ""),
                )
            )
            return

    def _answered_whole(self, path: str) -> bool:
        """An agent tool's child (or one inside it) whose tool call the replay answered
        from the record: the child did not run, and need not."""
        parts = path.split("/")
        for i, part in enumerate(parts):
            player = self.players.get("/".join(parts[:i]))
            if player is None:
                return False
            if part.endswith("]") and part[part.find("[") + 1 : -1] in player.answered:
                return True
        return False


class _Player:
    """The replay of one recorded run (the top run, or a child at its path): the model
    calls served so far, the transitions taken, and its state."""

    def __init__(
        self,
        replay: _Replay,
        path: str,
        rec: Recording | None,
        params: HarnessParams[Any] | None,
    ) -> None:
        self.replay = replay
        self.path = path
        self.rec = rec if rec is not None else _NONE
        self.params = params
        self.served = 0
        self.tool_calls = 0
        self.taken = 0
        self.current = self.rec.started.state
        self.answered: set[str] = set()
        """The ids of the tool calls answered from the record."""
        self.unrecorded: Divergence | None = None
        """For a child the record lacks: the divergence it is once it runs."""
        self.abort_in_batch: str | None = None
        """The host's abort (its reason) that came while the next tool batch ran: the
        replay requests it there, once the calls that had finished have their results."""

    @property
    def state(self) -> str:
        run = self.replay.run
        return run.current if not self.path and run is not None else self.current

    def diverge(self, divergence: Divergence) -> None:
        self.replay.diverge(attrs.evolve(divergence, path=self.path))

    def providers(
        self, given: Mapping[str, Any], chain: Sequence[Any] = ()
    ) -> dict[str, _ReplayProvider]:
        """A replay provider for each provider the run had, its model ``chain`` names
        (so a child the record lacks meets its divergence, not a missing provider) or
        its record names."""
        dialects = {name: getattr(p, "dialect", DIALECTS[0]) for name, p in given.items()}
        for model in chain:
            name = model.provider
            dialects.setdefault(name, name if name in DIALECTS else DIALECTS[0])
        for c in self.rec.calls:
            if c.request is not None:
                dialects[c.request.provider] = c.request.dialect
        return {name: _ReplayProvider(self, name, d) for name, d in dialects.items()}

    def open(self, provider: str, request: WireRequest) -> _Stream:
        if self.unrecorded is not None:
            self.replay.diverge(self.unrecorded)
            raise ProviderError(ErrorCategory.FATAL, f"replay diverged: {self.unrecorded}")
        calls, n = self.rec.calls, self.served + 1
        fingerprint, parts = request_digests(request)
        count = len(request.payload.get("messages") or ())
        now = ModelCall(provider, request.dialect, request.model, fingerprint, parts, count)
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
        run = self.replay.run
        history = tuple(run.state.history) if run is not None else ()
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
        params = self.params
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
            elif (
                key in ("system", "instructions")
                and params is not None
                and recorded.get("system") != params.system
            ):
                lines.append(
                    f"system: recorded {_short(recorded.get('system'))}, replayed "
                    f"{_short(params.system)}"
                )
            elif key == "tools" and params is not None:
                names = [t.get("name") for t in recorded.get("tools", ())]
                lines.append(f"tools: recorded {names}, replayed {[t.name for t in params.tools]}")
            elif key not in then.parts:
                lines.append(f"{key}: not sent by the run, replayed {_short(request.payload[key])}")
            else:
                lines.append(f"{key}: differs, replayed {_short(request.payload[key])}")
        return lines

    def tool(self, call: ToolUseBlock) -> ToolCallResult:
        if self.unrecorded is not None:
            self.replay.diverge(self.unrecorded)
        self.tool_calls += 1
        self.answered.add(call.id)
        done = self.rec.tools.get(call.id) or self._suspended_at(call)
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
        if isinstance(done, ToolCallResult):
            return done
        return ToolCallResult(
            done.tool_use_id,
            done.name,
            done.output,
            is_error=done.is_error,
            timed_out=done.timed_out,
            duration=done.duration,
        )

    def _suspended_at(self, call: ToolUseBlock) -> ToolCallResult | None:
        """A call of the batch the run suspended in: its question asked again, or its
        result kept in the interrupt (it had finished)."""
        asked = self.rec.finished.interrupt
        if not asked:
            return None
        if asked.get("kind") == "question":
            for q in asked.get("payload", {}).get("questions", ()):
                if q.get("tool_use_id") == call.id:
                    return ToolCallResult(call.id, str(q.get("tool")), "", interrupt=q["question"])
        for block in asked.get("done", ()):
            if block.get("tool_use_id") == call.id:
                return ToolCallResult(
                    call.id, call.name, block.get("content", ""), is_error=block.get("is_error")
                )
        return None

    def step(self, event: Transition) -> None:
        """Compare a transition the replay took with the record's next one."""
        self.taken += 1
        self.current = event.target
        transitions = self.rec.transitions
        recorded = transitions[self.taken - 1] if self.taken <= len(transitions) else None
        if recorded != event:
            self.diverge(
                Divergence(
                    "transition",
                    event.source,
                    self.taken,
                    "none: the run had ended" if recorded is None else _transition_text(recorded),
                    _transition_text(event),
                )
            )

    def finish(self, ended: Finished) -> None:
        """Compare the run's end with the record's: the transitions and calls left, the
        exit reason, turns, usage, cost, final history and the interrupt it waits on."""
        rec, here, taken = self.rec, self.state, self.taken
        if taken < len(rec.transitions):
            self.diverge(
                Divergence(
                    "transition",
                    here,
                    taken + 1,
                    _transition_text(rec.transitions[taken]),
                    f"none: the replay ended in {ended.final_state!r}",
                )
            )
            return
        if self.served < len(rec.calls):
            self.diverge(
                Divergence(
                    "end",
                    here,
                    taken,
                    f"{len(rec.calls)} model calls",
                    f"{self.served} model calls",
                )
            )
            return
        end = rec.finished
        pairs = [
            ("exit_reason", end.exit_reason, ended.exit_reason),
            ("turns", end.turns, ended.turns),
            ("usage", end.usage, ended.usage),
            ("cost_usd", end.cost_usd, ended.cost_usd),
            ("interrupt", _json(end.interrupt), _json(_as_recorded(ended.interrupt, end))),
        ]
        if end.history is not None:
            pairs.append(("history", end.history, ended.history))
        for name, then, now in pairs:
            if then != now:
                self.diverge(Divergence("end", here, taken, f"{name}={then!r}", f"{name}={now!r}"))
                return


def _as_recorded(interrupt: Any, recorded: Finished) -> Any:
    """The replayed interrupt without its ``id`` when the log's has none (a log written
    before interrupts had ids): the rest is compared."""
    if isinstance(interrupt, Mapping) and isinstance(recorded.interrupt, Mapping):
        if "id" not in recorded.interrupt:
            return {k: v for k, v in interrupt.items() if k != "id"}
    return interrupt


def _json(value: Any) -> str | None:
    """JSON data as canonical text (tuples and lists alike), for comparing."""
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


_NONE = Recording(
    "no record",
    RunStarted("", "", None, "?"),
    (),
    {},
    (),
    Finished("", "", 0, Usage(), None),
    None,
)
"""The record of a child the run did not start: every call and tool call diverges."""


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
    """A tool executor returning the recorded results, by tool-call id; an agent tool
    (a child run as a tool, when the params hold it) runs, so its child is replayed."""

    def __init__(self, player: _Player) -> None:
        self._player = player
        self._runner = ToolRunner()

    def prestart(self, scope: Any, call: ToolUseBlock) -> None:
        return None

    async def run_calls(self, scope: Any, calls: Sequence[ToolUseBlock]) -> ToolBatch:
        reason = self._player.abort_in_batch
        if reason is not None:
            self._player.abort_in_batch = None
            return await self._aborted(calls, reason)
        agents = [c for c in calls if _runs_a_child(scope, c.name)]
        ran: dict[str, ToolCallResult] = {}
        cancelled = False
        if agents:
            batch = await self._runner.run_calls(scope, agents)
            ran, cancelled = {r.tool_use_id: r for r in batch.results}, batch.cancelled
        results = tuple(ran[c.id] if c.id in ran else self._player.tool(c) for c in calls)
        for c in calls:
            if c.id not in ran:
                self._spent_by_children(scope.state, c.id)
        return ToolBatch(results, cancelled)

    async def _aborted(self, calls: Sequence[ToolUseBlock], reason: str) -> ToolBatch:
        """The batch the host aborted in the record: the calls that had finished return
        their results, then the abort comes and cancels the others, as it did."""
        player = self._player
        done = {c.id: player.tool(c) for c in calls if c.id in player.rec.tools}
        run = player.replay.run
        assert run is not None
        run.abort(reason)
        if len(done) == len(calls):  # it came after the last call had finished
            return ToolBatch(tuple(done[c.id] for c in calls))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.get_running_loop().create_future()  # until the abort cancels it
        return ToolBatch(tuple(done.get(c.id) or aborted_result(c) for c in calls), cancelled=True)

    def _spent_by_children(self, state: HarnessState[Any], call_id: str) -> None:
        """Add to the run's totals what an agent tool's child spent (tokens, cost,
        turns), its call answered from the record (the child, not run, rolls nothing up)."""
        player = self._player
        prefix = f"{player.path}/" if player.path else ""
        for path, runs in player.replay.top.rec.children.items():
            rest = path[len(prefix) :] if path.startswith(prefix) else ""
            if "/" in rest or not rest.endswith(f"[{call_id}]"):
                continue
            for child in runs:
                ended = child.finished
                state.usage = state.usage + ended.usage
                state.turns += ended.turns - child.started.turns
                if ended.cost_usd is None or state.cost_usd is None:
                    state.cost_usd = None
                else:
                    state.cost_usd += ended.cost_usd

    async def cancel_all(self) -> None:
        await self._runner.cancel_all()


def _runs_a_child(scope: Any, name: str) -> bool:
    spec = scope.params.tool(name)
    return spec is not None and spec.emits_events


def _dialects(rec: Recording, params: HarnessParams[Any]) -> dict[str, str]:
    found = {c.request.provider: c.request.dialect for c in rec.calls if c.request is not None}
    known = {
        c.provider: c.provider if c.provider in DIALECTS else DIALECTS[0]
        for c in params.model_chain
    }
    return {p: found.get(p, d) for p, d in known.items()}


def _transition_text(t: Transition) -> str:
    guard = f" [{t.guard}]" if t.guard else ""
    return f"{t.source} -> {t.target}{guard}"


async def _play(replay: _Replay, run: Run[Any]) -> Finished | None:
    """Drive ``run``, comparing each transition (its children's too) with the record;
    its ``finished`` event (None when it ended otherwise)."""
    top = replay.top
    rec, ended = top.rec, None
    abort_at = None
    if rec.host_abort is not None:
        abort_at = next((i for i, t in enumerate(rec.transitions) if t.guard == _ABORT_GUARD), None)
    if abort_at == 0:
        run.abort(rec.host_abort or "")
    async for event in run.events():
        if replay.divergence is not None:
            continue
        if type(event) is ChildEvent:
            replay.event(event)
        elif isinstance(event, Transition):
            top.step(event)
            if top.taken == abort_at and replay.divergence is None:
                if _finished_before_abort(rec, run.state.history):
                    top.abort_in_batch = rec.host_abort or ""  # it came mid-batch
                else:
                    run.abort(rec.host_abort or "")  # the host aborted the run here
        elif isinstance(event, Finished):
            ended = event
    return ended


def _finished_before_abort(rec: Recording, history: Sequence[Message]) -> bool:
    """Whether some of the tool calls about to run (the last message's) finished in the
    record before the host's abort: it came while they ran."""
    last = history[-1] if history else None
    return last is not None and any(c.id in rec.tools for c in last.tool_uses)


def _start(rec: Recording) -> tuple[HarnessState[Any], str | None]:
    """The state the run started with, and where it went on from when it was resumed."""
    started = rec.started
    if started.resumed is not None:
        saved = {k: v for k, v in started.resumed.items() if k not in ("history", "tasks")}
        try:
            state: HarnessState[Any] = structure(saved, HarnessState)
        except Exception as exc:  # the record is not a state this innerloop reads
            raise ReplayError(
                f"cannot replay {rec.where}: the state it went on with cannot be read back "
                f"({exc}); record it again with this innerloop"
            ) from None
        state.history = list(started.messages)
        state.tasks = [attrs.evolve(t) for t in started.tasks]
        return state, started.state
    state = HarnessState(
        history=list(started.messages),
        tasks=[attrs.evolve(t) for t in started.tasks],
        usage=started.usage,
        turns=started.turns,
        cost_usd=started.cost_usd,
    )
    state.start_run()
    return state, None


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
    replay = _Replay(rec, run_params, real_tools)
    top = replay.top
    providers = {
        name: _ReplayProvider(top, name, dialect)
        for name, dialect in _dialects(rec, run_params).items()
    }
    state, start_at = _start(rec)
    deps = Deps(
        providers=providers,
        clock=FakeClock(),
        tokens=MessageTokenCache(TiktokenCounter()),
        compactor=TruncatingCompactor(),
        fallback_compactor=TruncatingCompactor(),
        tools=ToolRunner() if real_tools else _RecordedTools(top),
        gates=RateLimitGates(),
        nest=replay.nest(""),
    )
    replaying: Run[Any] = Run(machine, run_params, state, deps, start_at=start_at)
    replay.run = replaying
    ended = await _play(replay, replaying)
    if replay.divergence is None and ended is not None:
        top.finish(_with_history(ended, rec, state))
    if replay.divergence is None:
        replay.check_children()
    return ReplayResult(rec.where, replay.divergence, state, top.taken, top.served)


def _with_history(ended: Finished, rec: Recording, state: HarnessState[Any]) -> Finished:
    """``ended`` with its history's fingerprint (a stored record keeps one; the replay
    computes it only to compare)."""
    if ended.history is None and rec.finished.history is not None:
        return attrs.evolve(ended, history=history_fingerprint(state.history))
    return ended


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
    A log is data: nothing it names is imported, called or evaluated. The machine is the
    one the run recorded, found among ``specs`` (``MachineSpec``s or ``"module:ATTR"``
    you name) or the default machine; its recorded import path is only shown as the
    ``--spec`` to pass. The params are the recorded ones, with the output type as its
    recorded JSON Schema dict and tools that only return their recorded results.
    ``params`` replaces them (a ``HarnessParams``, or a function of the recorded ones: to
    see what a new prompt or model changes, or to give your output class back with
    ``lambda p: p.evolve(output_type=Weather)``). With ``real_tools=True`` the tools run
    for real: they must be yours, given in ``params`` (``lambda p: p.evolve(tools=[...])``).

    One line makes a recorded run a test::

        replay("runs/incident.jsonl").assert_same()

    :class:`ReplayError` when the run cannot be replayed (an older log, no such run, its
    machine not at hand); the result's ``divergence`` otherwise."""
    return asyncio.run(areplay(source, run, specs=specs, params=params, real_tools=real_tools))
