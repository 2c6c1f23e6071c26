"""What the page shows of one run, folded from its event dicts (the lines of an event log).

Pure functions over plain data: no file, no server. A run's view is JSON data: its status,
the transitions with their times, the tool calls with durations and outcomes (the
provider's own server-tool calls and results among them, outcome ``server`` and ``server
result``), and the tokens and cost of each model turn.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from sys import intern
from typing import Any

from innerloop._errors import ConversionError
from innerloop._events import (
    Abort,
    Alert,
    Backoff,
    Compacted,
    Event,
    Fallback,
    Finished,
    ModelResponseEvent,
    RunStarted,
    ToolExecuted,
    ToolUseStart,
    Transition,
)
from innerloop._messages import ModelResponse, ServerToolBlock
from innerloop.recovery._pricing import DEFAULT_PRICES, cost_usd

__all__ = [
    "LISTS",
    "OUTPUT_CHARS",
    "RECOVERY_EVENTS",
    "RunFold",
    "fold",
    "run_detail",
    "run_summary",
]

OUTPUT_CHARS = 300
"""A tool's output is cut to this many characters on the page."""

RECOVERY_EVENTS = ("backoff", "fallback", "compacted", "alert", "abort")


class RunFold:
    """One run's view kept as its events are read, one at a time (:meth:`add`): the
    summary in a few fields, the lists (transitions, tool calls, turns, recoveries) as
    compact rows, appended to, never recomputed. Each event is structured through the
    event classes (:meth:`Event.from_dict`) first: a line that is not a well-typed event
    is the run's ``error`` (the first one, with its line; ``errors`` counts them), and
    the lines after it are read on. With ``lists=False`` only the summary is kept."""

    def __init__(self, initial: str = "idle", *, lists: bool = True) -> None:
        self.initial = initial
        self.keep = lists
        """Whether the lists are kept (False: the summary alone, a few fields however long
        the run; the lists stay empty)."""
        self.started: dict[str, Any] | None = None
        self.end: Finished | None = None
        self.current = initial
        self.events = 0
        self.turns = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost: float | None = 0.0
        self.error: str | None = None
        self.errors = 0
        self.lists: dict[str, list[Any]] = {kind: [] for kind in LISTS}
        self._tool_starts: dict[str, float | None] = {}

    def fail(self, where: str, problem: str) -> None:
        """Line ``where`` of this run cannot be read: ``problem``."""
        self.errors += 1
        if self.error is None:
            self.error = f"{where}: {problem}"

    def add(self, data: Mapping[str, Any], where: str = "event") -> None:
        """Fold in one event (a log line's dict); what is wrong with it is the run's error."""
        kind = data.get("type")
        t = data.get("t")
        if not isinstance(kind, str):
            self.fail(where, "an event without a type")
            return
        if t is not None and (type(t) not in (int, float) or not math.isfinite(t)):
            self.fail(where, f"a {kind} event whose time t is {t!r}, not a number of seconds")
            return
        self.events += 1
        cls = VIEWED.get(kind)
        if cls is None:
            return  # an event the page does not show (a stream delta, a custom state's)
        quick = QUICK.get(cls)
        try:  # the plain shapes of the frequent events without the converter (same result)
            event = (quick(data) if quick is not None else None) or cls.from_dict(data)
        except ConversionError as exc:
            self.events -= 1
            self.fail(where, str(exc))
            return
        self._fold(event, data, t)

    def _fold(self, event: Event, data: Mapping[str, Any], t: float | None) -> None:
        lists = self.lists
        match event:
            case RunStarted():
                if self.events == 1:
                    self.started = dict(data)
                    self.current = self.initial = event.state
            case Transition(source=source, target=target, guard=guard):
                self.current = target
                if self.keep:
                    lists["transitions"].append((t, intern(source), intern(target), guard))
            case Finished():
                self.end = event
                self.current = event.final_state
            case ModelResponseEvent(response=response, turn=turn):
                self._turn(response, turn, t)
            case _ if not self.keep:
                pass  # the rest is rows of the lists
            case ToolUseStart(id=tool_id):
                self._tool_starts[tool_id] = t
            case ToolExecuted():
                output = event.output[:OUTPUT_CHARS] + (
                    "…" if len(event.output) > OUTPUT_CHARS else ""
                )
                outcome = "timeout" if event.timed_out else "error" if event.is_error else "ok"
                started = self._tool_starts.pop(event.tool_use_id, None)
                row = (
                    event.tool_use_id,
                    intern(event.name),
                    started,
                    t,
                    event.duration,
                    outcome,
                    output,
                )
                lists["tools"].append(row)
            case _:
                lists["recoveries"].append(
                    {k: v for k, v in data.items() if k not in ("seq", "diagnostic")}
                )

    def _turn(self, response: ModelResponse, turn: int, t: float | None) -> None:
        usage = response.usage
        price = cost_usd(usage, response.model, DEFAULT_PRICES)
        self.turns += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cost = None if price is None or self.cost is None else self.cost + price
        if self.keep:
            self.lists["tools"] += _server_rows(response.message.server_tools, t)
            self.lists["turn_usage"].append(
                (
                    turn,
                    t,
                    intern(response.model),
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_tokens,
                    price,
                    response.stop_reason,
                )
            )

    def count(self, kind: str) -> int:
        return len(self.lists[kind])

    def items(self, kind: str, start: int, stop: int) -> list[Any]:
        """Rows ``start:stop`` of list ``kind``, as the page reads them."""
        rows = self.lists[kind][start:stop]
        if kind == "recoveries":
            return rows
        names = ROW_FIELDS[kind]
        return [dict(zip(names, row, strict=True)) for row in rows]

    def summary(self) -> dict[str, Any]:
        """The run's line in the list: status, exit reason, turns, tokens, cost, state."""
        end = self.end
        if end is not None:
            return {
                "status": "finished",
                "exit_reason": end.exit_reason,
                "current": end.final_state,
                "turns": end.turns,
                "input_tokens": end.usage.input_tokens,
                "output_tokens": end.usage.output_tokens,
                "cost_usd": end.cost_usd,
                "events": self.events,
            }
        return {
            "status": "running",
            "exit_reason": None,
            "current": self.current,
            "turns": self.turns,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost,
            "events": self.events,
        }

    def detail(self) -> dict[str, Any]:
        """The summary and every list in full."""
        return {**self.summary(), **{k: self.items(k, 0, self.count(k)) for k in LISTS}}


LISTS = ("transitions", "tools", "turn_usage", "recoveries")
"""The lists of a run's detail, each appended to as the run goes (and paged by the API)."""

ROW_FIELDS = {
    "transitions": ("t", "source", "target", "guard"),
    "tools": ("id", "name", "started", "t", "duration", "outcome", "output"),
    "turn_usage": (
        "turn",
        "t",
        "model",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cost_usd",
        "stop_reason",
    ),
}
"""The fields of a row of each list but ``recoveries`` (kept as the events' dicts)."""

VIEWED: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RunStarted,
        Transition,
        ToolUseStart,
        ToolExecuted,
        ModelResponseEvent,
        Finished,
        Backoff,
        Fallback,
        Compacted,
        Alert,
        Abort,
    )
}
"""The events the page shows, by type; the others are counted, not kept."""


def _transition(data: Mapping[str, Any]) -> Transition | None:
    source, target, guard = data.get("source"), data.get("target"), data.get("guard")
    if type(source) is str and type(target) is str and (type(guard) is str or guard is None):
        if "guard" in data:
            return Transition(source=source, target=target, guard=guard)
    return None


def _tool_use_start(data: Mapping[str, Any]) -> ToolUseStart | None:
    index, tool_id, name = data.get("index"), data.get("id"), data.get("name")
    if type(index) is int and type(tool_id) is str and type(name) is str:
        return ToolUseStart(index=index, id=tool_id, name=name)
    return None


def _tool_executed(data: Mapping[str, Any]) -> ToolExecuted | None:
    d = data.get
    tool_use_id, name, output, duration = d("tool_use_id"), d("name"), d("output"), d("duration")
    is_error, timed_out = d("is_error"), d("timed_out")
    if (
        type(tool_use_id) is str
        and type(name) is str
        and type(output) is str
        and type(is_error) is bool
        and type(timed_out) is bool
        and (type(duration) is float or type(duration) is int)
    ):
        return ToolExecuted(
            tool_use_id=tool_use_id,
            name=name,
            is_error=is_error,
            timed_out=timed_out,
            duration=float(duration),
            output=output,
        )
    return None


QUICK: dict[type[Event], Callable[[Mapping[str, Any]], Event | None]] = {
    Transition: _transition,
    ToolUseStart: _tool_use_start,
    ToolExecuted: _tool_executed,
}
"""For the events most frequent in a log, the event built straight from a dict of the
plain shape (every field there, of its exact JSON type), which the converter reads the
same way; None for any other dict (the converter then reads it, or says what is wrong)."""


def _server_rows(blocks: Iterable[ServerToolBlock], t: float | None) -> list[tuple[Any, ...]]:
    """Rows of the tool list for the provider's own tool calls and results of a turn
    (outcome ``server``, or ``server result``): what was asked, or what came back."""
    rows = []
    for b in blocks:
        data = {k: v for k, v in b.data.items() if k not in ("type", "id", "tool_use_id", "name")}
        text = json.dumps(data.get("input", data), ensure_ascii=False, default=str)
        output = text[:OUTPUT_CHARS] + ("…" if len(text) > OUTPUT_CHARS else "")
        outcome = "server result" if b.is_result else "server"
        rows.append((b.id, intern(b.name), None, t, None, outcome, output))
    return rows


def fold(events: Iterable[Mapping[str, Any]], initial: str = "idle") -> RunFold:
    """The view of a run's events."""
    run = RunFold(initial)
    for n, event in enumerate(events, start=1):
        run.add(event, f"event {n}")
    return run


def run_summary(events: Sequence[Mapping[str, Any]], initial: str = "idle") -> dict[str, Any]:
    """A run's line in the list: status, exit reason, turns, tokens, cost, current state."""
    return fold(events, initial).summary()


def run_detail(events: Sequence[Mapping[str, Any]], initial: str = "idle") -> dict[str, Any]:
    """Everything the run's page shows: the summary, the transition timeline, the tool
    calls, the recoveries and the tokens and cost per model turn."""
    return fold(events, initial).detail()
