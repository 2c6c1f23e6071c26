"""What a replay reads of a recorded run: the run's start, its model calls with what each
got back, its tool results, its path and its end, from an event log (or a log's events)
or from a checkpoint store."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from innerloop._convert import unstructure
from innerloop._errors import InnerloopError
from innerloop._eventlog import iter_event_log, pick_run, split_runs
from innerloop._events import (
    Abort,
    Event,
    Finished,
    ModelCall,
    ModelError,
    ModelResponseEvent,
    RunStarted,
    ToolExecuted,
    Transition,
)
from innerloop._messages import Message, ModelResponse, ToolResultBlock
from innerloop.checkpoint._open import open_checkpointer, store_errors
from innerloop.checkpoint._types import Checkpoint, Checkpointer
from innerloop.checkpoint._writer import decode
from innerloop.fsm._state import Interrupt, Outcome
from innerloop.providers._fingerprint import history_fingerprint
from innerloop.tools._runner import ABORTED_TOOL

__all__ = ["Call", "Recording", "ReplayError", "Source", "load_recording", "log_runs"]


class ReplayError(InnerloopError, ValueError):
    """A run cannot be replayed (an older log, no such run, its machine not at hand...)."""


@attrs.frozen
class Call:
    """One recorded model call: its request (the fingerprint an event log keeps, or the
    history a checkpoint kept), and what it got back (a response, an error, or neither:
    the host aborted it mid-stream)."""

    request: ModelCall | None
    response: ModelResponse | None = None
    error: ModelError | None = None
    history: tuple[Message, ...] | None = None


@attrs.frozen
class Recording:
    """A recorded run, as a replay reads it (``started.params`` is None for a stored run:
    a checkpoint store keeps no params)."""

    where: str
    started: RunStarted
    calls: tuple[Call, ...]
    tools: Mapping[str, ToolExecuted]
    transitions: tuple[Transition, ...]
    finished: Finished
    host_abort: str | None
    children: Mapping[str, tuple[Recording, ...]] = attrs.field(factory=dict)
    """The runs it ran inside it (child states, fan-outs, handoffs, agent tools), by
    their whole path (``research/web#2``), each path's runs in order."""


_OLD = (
    "it was recorded by an innerloop that did not keep what a replay needs (the run's "
    "params and each model call's request fingerprint); record it again with this "
    "innerloop (innerloop run --log, or an EventLog) and replay that"
)


_READ = frozenset(
    c.type
    for c in (
        RunStarted,
        ModelCall,
        ModelResponseEvent,
        ModelError,
        ToolExecuted,
        Transition,
        Abort,
        Finished,
    )
)
"""The events a replay reads (a stream's deltas are not replayed: its response is)."""


def _events(lines: Sequence[Mapping[str, Any]]) -> list[Event]:
    return [Event.from_dict(line) for line in lines if line.get("type") in _READ]


def _calls(events: Sequence[Event]) -> tuple[Call, ...]:
    """Each recorded model call with what it got back."""
    calls: list[Call] = []
    for ev in events:
        if isinstance(ev, ModelCall):
            calls.append(Call(ev))
        elif isinstance(ev, ModelResponseEvent) and calls:
            calls[-1] = attrs.evolve(calls[-1], response=ev.response)
        elif isinstance(ev, ModelError) and calls:
            calls[-1] = attrs.evolve(calls[-1], error=ev)
    return tuple(calls)


def _children(lines: Sequence[Mapping[str, Any]], where: str) -> dict[str, tuple[Recording, ...]]:
    """The runs recorded inside a run (its ``child_event`` lines), by path: each run of
    a path in order (a child state entered twice runs its child twice)."""
    nested: dict[str, list[list[Mapping[str, Any]]]] = {}
    for line in lines:
        if line.get("type") != "child_event":
            continue
        event, runs = line["event"], nested.setdefault(str(line["path"]), [])
        if event.get("type") == "run_started" or not runs:
            runs.append([])
        runs[-1].append(event)
    return {
        path: tuple(
            _record(events, f"{where}, child {path}" + (f" (run {i})" if len(runs) > 1 else ""))
            for i, events in enumerate(runs, 1)
        )
        for path, runs in nested.items()
    }


def _record(lines: Sequence[Mapping[str, Any]], where: str) -> Recording:
    events = _events(lines)
    started = events[0] if events else None
    calls = _calls(events)
    answered = any(isinstance(e, ModelResponseEvent | ModelError) for e in events)
    if not isinstance(started, RunStarted) or started.params is None:
        raise ReplayError(f"cannot replay {where}: {_OLD}")
    if answered and not calls:
        raise ReplayError(
            f"cannot replay {where}: its model calls have no model_call event (a quiet "
            "run() makes none: its events were read by an observer); record the run from "
            "run.events(), iter_sync() or run_sync(on_event=...)"
        )
    finished = next((e for e in reversed(events) if isinstance(e, Finished)), None)
    if finished is None:
        raise ReplayError(
            f"cannot replay {where}: it has no finished event (still going, or cut off); "
            "replay a run that ended"
        )
    host_abort = next(
        (e.reason for e in events if isinstance(e, Abort) and e.diagnostic is None), None
    )
    return Recording(
        where,
        started,
        calls,
        {e.tool_use_id: e for e in events if isinstance(e, ToolExecuted)},
        tuple(e for e in events if isinstance(e, Transition)),
        finished,
        host_abort,
        _children(lines, where),
    )


Source = str | Path | Sequence[Mapping[str, Any]] | Checkpointer
"""An event log's path, or a log's events as dicts (``event.to_dict()``: the events a
durable engine streams, say), or a checkpoint store (a ``Checkpointer``, or its URL:
``sqlite:///runs.db``, ``postgresql://...``)."""

_STORE_SCHEMES = ("sqlite://", "postgresql://", "postgres://", "memory:")


def load_recording(source: Source, run: int | str) -> Recording:
    """The run ``run`` of ``source`` (see :data:`Source`)."""
    if isinstance(source, str) and source.startswith(_STORE_SCHEMES):
        return _stored(source, run)
    if not isinstance(source, str | Path | Sequence):
        return _stored(source, run)
    where = "the events given" if not isinstance(source, str | Path) else str(source)
    picked: Sequence[Mapping[str, Any]]
    try:
        if isinstance(source, str | Path):
            picked, label = _streamed(iter_event_log(source), run, where)
        else:
            lines = [e for e in source if e.get("type") != "log_header"]
            picked, label = pick_run(_joined(split_runs(lines)), run, where)
    except OSError as exc:
        raise ReplayError(f"cannot read {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    try:
        return _record(picked, label)
    except ReplayError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a log is data
        lines_of = str(exc).strip().splitlines()
        line = lines_of[0] if lines_of else type(exc).__name__
        raise ReplayError(f"cannot replay {label}: its events cannot be read: {line}") from None


def _continues(first: Mapping[str, Any], last_type: Any, entered: Any) -> bool:
    """Does the run opening with ``first`` go on where the one before stopped unfinished
    (its last event of type ``last_type``, ``"finished"`` when there is none before; its
    last transition into ``entered``)?"""
    return (
        first.get("type") == "run_started"
        and first.get("resumed") is not None
        and last_type != "finished"
        and entered is not None
        and first.get("state") == entered
    )


def _wanted(run: int | str | None, number: int, run_id: Any, found: bool) -> bool:
    """Is run ``number`` (its id ``run_id``) the one ``pick_run`` picks for ``run``?"""
    if run is None or run == "last":
        return True
    if isinstance(run, int) or run.isdigit():
        return int(run) == number
    return not found and run_id == run


def _streamed(
    lines: Iterator[dict[str, Any]], run: int | str, where: str
) -> tuple[list[Mapping[str, Any]], str]:
    """``pick_run(_joined(split_runs(lines)), run, where)``, reading ``lines`` as a stream:
    of the runs it passes it keeps their ids, and of the one picked the lines a replay
    reads, so a replay's memory grows with that run, not with the log."""
    stubs, picked = _walk(lines, functools.partial(_wanted, run))
    _, label = pick_run(stubs, run, where)  # its errors, as for the whole log
    return picked, label


def log_runs(path: str | Path) -> int:
    """How many runs the event log at ``path`` holds (a run continued as new counted
    once, as :func:`replay` numbers them), read as a stream. ``ReplayError`` when the log
    cannot be read."""
    try:
        stubs, _ = _walk(iter_event_log(path), lambda number, run_id, found: False)
    except OSError as exc:
        raise ReplayError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    return len(stubs)


def _walk(
    lines: Iterator[dict[str, Any]], keep: Callable[[int, Any, bool], bool]
) -> tuple[list[list[Mapping[str, Any]]], list[Mapping[str, Any]]]:
    """A stub (type and id) of each run of ``lines``, and the lines a replay reads of the
    last run ``keep(number, run_id, found_before)`` keeps."""
    stubs: list[list[Mapping[str, Any]]] = []
    picked: list[Mapping[str, Any]] = []
    keeping = found = open_run = False
    last_type: Any = "finished"
    entered: Any = None
    for line in lines:
        kind = line.get("type")
        if not open_run or kind == "run_started":
            open_run = True
            if _continues(line, last_type, entered):
                continue  # the same run, going on: its run_started is not kept
            run_id = line.get("run_id") if kind == "run_started" else None
            stubs.append([{"type": kind, "run_id": run_id}])
            entered = None
            keeping = keep(len(stubs), run_id, found)
            if keeping:
                found, picked = True, []
        last_type = kind
        if kind == "transition":
            entered = line.get("target")
        elif kind == "finished":
            open_run = False
        if keeping and (kind in _READ or kind == "child_event"):
            picked.append(line)
    return stubs, picked


def _joined(runs: list[list[Mapping[str, Any]]]) -> list[list[Mapping[str, Any]]]:
    """``runs`` with each run that goes on where the one before stopped unfinished (a
    durable workflow continued as new: a ``run_started`` with ``resumed`` at the state
    the last transition entered) joined to it, as the one run it is."""
    joined: list[list[Mapping[str, Any]]] = []
    for events in runs:
        first = events[0] if events else {}
        before = joined[-1] if joined else []
        entered = next(
            (e.get("target") for e in reversed(before) if e.get("type") == "transition"), None
        )
        if _continues(first, before[-1].get("type") if before else "finished", entered):
            joined[-1] = [*before, *events[1:]]
        else:
            joined.append(list(events))
    return joined


# -- a stored run ---------------------------------------------------------------------------


def _stored(source: str | Checkpointer, run: int | str) -> Recording:
    if isinstance(source, str):
        try:
            store = open_checkpointer(source)
        except store_errors() as exc:
            raise ReplayError(f"cannot open {source}: {exc}") from None
        try:
            return _from_store(store, run, source)
        finally:
            store.close()
    return _from_store(source, run, "the store given")


def _from_store(store: Checkpointer, run: int | str, where: str) -> Recording:
    run_id = str(run)
    if run == "last":
        runs = store.runs()
        if not runs:
            raise ReplayError(f"{where} holds no run")
        run_id = runs[0].run_id
    label = f"run {run_id} of {where}"
    try:
        checkpoints = [decode(store.rows(run_id, info.seq)) for info in store.checkpoints(run_id)]
    except store_errors() as exc:
        raise ReplayError(f"cannot replay {label}: {exc}") from None
    if not checkpoints:
        raise ReplayError(f"{where} has no run {run_id!r}")
    for before, after in itertools.pairwise(checkpoints):
        if after.info.source != before.info.state:
            raise ReplayError(
                f"cannot replay {label}: it was not checkpointed at every transition (from "
                f"{before.info.state!r} the next checkpoint is {after.info.state!r}); record "
                "it with Harness(checkpoint_every='transition'), the default"
            )
    return _stored_recording(store, run_id, label, checkpoints)


def _stored_recording(
    store: Checkpointer, run_id: str, label: str, checkpoints: Sequence[Checkpoint[Any]]
) -> Recording:
    machine = store.machine(run_id)
    if machine is None:
        raise ReplayError(
            f"cannot replay {label}: it was stored before runs recorded their machine; "
            "record it again with this innerloop"
        )
    first, last = checkpoints[0], checkpoints[-1].state
    if last.final_state is None:
        raise ReplayError(
            f"cannot replay {label}: it has not ended (it is in {checkpoints[-1].info.state!r}); "
            "replay a run that ended"
        )
    started = RunStarted(
        machine.name,
        machine.fingerprint,
        machine.import_path,
        first.info.state,
        run_id,
        None,
        tuple(first.state.history),
        first.state.turns,
        first.state.usage,
        first.state.cost_usd,
        tuple(first.state.tasks),
    )
    finished = Finished(
        last.exit_reason or "",
        last.final_state,
        last.turns,
        last.usage,
        last.cost_usd,
        history_fingerprint(last.history),
        None if last.interrupt is None else unstructure(last.interrupt, Interrupt),
    )
    transitions = tuple(
        Transition(c.info.source or "", c.info.state, c.info.guard) for c in checkpoints[1:]
    )
    host_abort = last.abort.reason if last.abort is not None else None
    return Recording(
        label,
        started,
        _stored_calls(checkpoints),
        _stored_tools(checkpoints),
        transitions,
        finished,
        host_abort,
    )


def _stored_calls(checkpoints: Sequence[Checkpoint[Any]]) -> tuple[Call, ...]:
    """Each model call, read off the outcome of the phase before each checkpoint: opened
    (its request: the history then), a response, or a failure at open or mid-stream."""
    calls: list[Call] = []
    opened = False
    for c in checkpoints[1:]:
        state, outcome = c.state, c.state.outcome
        if outcome is Outcome.OPENED:
            calls.append(Call(None, history=tuple(state.history)))
        elif outcome is Outcome.RESPONSE and opened and state.last_response is not None:
            calls[-1] = attrs.evolve(calls[-1], response=state.last_response)
        elif outcome is Outcome.FAILED and state.error is not None:
            if opened:
                calls[-1] = attrs.evolve(calls[-1], error=ModelError(state.error, "stream"))
            else:
                calls.append(
                    Call(None, error=ModelError(state.error, "open"), history=tuple(state.history))
                )
        opened = outcome is Outcome.OPENED
    return tuple(calls)


def _stored_tools(checkpoints: Sequence[Checkpoint[Any]]) -> dict[str, ToolExecuted]:
    """Each tool call's result, from the history after each execute (and after an abort:
    the calls of the batch it cut off that had finished)."""
    results: dict[str, ToolExecuted] = {}
    for c in checkpoints:
        history = c.state.history
        aborted = c.state.abort is not None
        if (c.state.outcome is not Outcome.EXECUTED and not aborted) or len(history) < 2:
            continue
        names = {u.id: u.name for u in history[-2].tool_uses}
        for block in history[-1].content:
            if isinstance(block, ToolResultBlock) and not (
                aborted and block.content == ABORTED_TOOL
            ):
                name = names.get(block.tool_use_id, "")
                results[block.tool_use_id] = ToolExecuted(
                    block.tool_use_id, name, block.is_error, False, 0.0, block.content
                )
    return results
