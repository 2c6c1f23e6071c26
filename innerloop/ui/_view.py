"""What the page shows of one run, folded from its event dicts (the lines of an event log).

Pure functions over plain data: no file, no server. A run's view is JSON data: its status,
the transitions with their times, the tool calls with durations and outcomes (the
provider's own server-tool calls and results among them, outcome ``server`` and ``server
result``), the messages its events hold, the tokens and cost of each model turn, and its
child runs (``child_event`` lines), each folded into a view of its own by its path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
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
from innerloop._messages import (
    Message,
    ModelResponse,
    ServerToolBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from innerloop.recovery._pricing import DEFAULT_PRICES, cost_usd

__all__ = [
    "CHILDREN_PAGE",
    "LISTS",
    "MAX_CHILDREN",
    "MESSAGE_CHARS",
    "OUTPUT_CHARS",
    "RECOVERY_EVENTS",
    "RunFold",
    "asked",
    "cut",
    "fold",
    "message_text",
    "run_detail",
    "run_summary",
]

OUTPUT_CHARS = 300
"""A tool's output is cut to this many characters on the page."""

MESSAGE_CHARS = 2000
"""A message is cut to this many characters on the page."""

CHILDREN_PAGE = 500
"""The child runs a run's view lists at most (``children_total`` counts them all)."""

MAX_CHILDREN = 10_000
"""The child runs a run's view keeps at most: the lines of any further one are its error
(a log may be hostile; each child kept is a view of its own)."""

RECOVERY_EVENTS = ("backoff", "fallback", "compacted", "alert", "abort")

PROMPT_CHARS = 80
"""The first words of a run's prompt the run list shows."""


class RunFold:
    """One run's view kept as its events are read, one at a time (:meth:`add`): the
    summary in a few fields, the lists (transitions, tool calls, turns, recoveries,
    messages) as compact rows, appended to, never recomputed, and the views of its child
    runs. Each event is structured through the event classes (:meth:`Event.from_dict`)
    first: a line that is not a well-typed event is the run's ``error`` (the first one,
    with its line; ``errors`` counts them), and the lines after it are read on. With
    ``lists=False`` only the summary is kept (its child runs' summaries too, by path,
    without their lists)."""

    def __init__(self, initial: str = "idle", *, lists: bool = True) -> None:
        self.initial = initial
        self.keep = lists
        """Whether the lists are kept (False: the summary alone, a few fields however long
        the run; the lists stay empty)."""
        self.started: dict[str, Any] | None = None
        self.t0: float | None = None
        """The time (``t``) of its ``run_started`` line."""
        self.prompt: str | None = None
        """The first words of its first user message."""
        self.resumptions = 0
        """How many times it went on after it ended suspended (answered)."""
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
        self.children: dict[str, RunFold] = {}
        """The views of the child runs, by their path (``survey/web#2``), in the order
        their first event came (a grandchild's too: its path is the whole one); with
        their lists when this view keeps its own."""

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
        if kind == "child_event":
            self._child(data, where, t)
            return
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

    def _child(self, data: Mapping[str, Any], where: str, t: float | None) -> None:
        """Fold a child's event into the view of the child its path names."""
        path, inner = data.get("path"), data.get("event")
        if not isinstance(path, str) or not path or not isinstance(inner, dict):
            self.events -= 1
            self.fail(where, "a child_event without a path (a string) and an event (an object)")
            return
        child = self.children.get(path)
        if child is None:
            if len(self.children) >= MAX_CHILDREN:
                self.events -= 1
                self.fail(where, f"a child run past the first {MAX_CHILDREN:,} (not kept)")
                return
            child = self.children[path] = RunFold(self.initial, lists=self.keep)
        child.add({**inner, "t": t}, f"{where} (child {path})")
        if self.keep and inner.get("type") == "finished":
            self._answered_by(path, child, t)

    def _answered_by(self, path: str, child: RunFold, t: float | None) -> None:
        """A child ended: its answer (its last assistant message, a typed answer's JSON
        too) is a message of the run above it (``[path] answer``), which has it in its
        history (a fan-out's joined answers, a handoff's last message) though no event
        of its own says so."""
        if child.end is None or child.end.final_state == "suspended":
            return
        said = [row for row in child.lists["messages"] if row[1] == "assistant"]
        if not said:
            return
        parent = _parent_path(path, self.children)
        above = self if parent is None else self.children[parent]
        name = path if parent is None else path[len(parent) + 1 :]
        above._message(t, "child", f"[{name}] {said[-1][2]}")

    def tree(self, under: str | None = None) -> list[dict[str, Any]]:
        """The child runs (those below the child ``under`` only, when given) in the
        tree's order (each after the child above it, siblings as they started), each
        with its path, its parent's path (None: this run) and depth, and its summary;
        the first :data:`CHILDREN_PAGE` of them."""
        below: dict[str | None, list[str]] = {}
        for path in self.children:
            if under is None or path.startswith(under + "/"):
                parent = _parent_path(path, self.children)
                below.setdefault(None if parent == under else parent, []).append(path)
        rows: list[dict[str, Any]] = []
        todo = [(path, 0) for path in reversed(below.get(None, []))]
        while todo and len(rows) < CHILDREN_PAGE:
            path, depth = todo.pop()
            child = self.children[path]
            machine = (child.started or {}).get("machine")
            rows.append(
                {
                    "path": path,
                    "parent": _parent_path(path, self.children),
                    "depth": depth,
                    "machine": machine if isinstance(machine, str) else None,
                    **child.summary(),
                    "error": child.error,
                }
            )
            todo += [(p, depth + 1) for p in reversed(below.get(path, []))]
        return rows

    def above(self, path: str) -> list[str]:
        """The paths of the child runs above the child at ``path``, from the top down."""
        chain = []
        parent = _parent_path(path, self.children)
        while parent is not None:
            chain.append(parent)
            parent = _parent_path(parent, self.children)
        return chain[::-1]

    def count_below(self, under: str | None = None) -> int:
        """How many child runs there are (below the child ``under``, when given)."""
        if under is None:
            return len(self.children)
        return sum(1 for path in self.children if path.startswith(under + "/"))

    def _message(self, t: float | None, role: str, text: str) -> None:
        self.lists["messages"].append((t, role, cut(text, MESSAGE_CHARS)))

    def _fold(self, event: Event, data: Mapping[str, Any], t: float | None) -> None:
        match event:
            case RunStarted():
                self._started(event, data, t)
            case Transition(source=source, target=target, guard=guard):
                self.current = target
                if self.keep:
                    self.lists["transitions"].append((t, intern(source), intern(target), guard))
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
                self._tool(event, t)
            case _:
                self.lists["recoveries"].append(
                    {k: v for k, v in data.items() if k not in ("seq", "diagnostic")}
                )

    def _started(self, event: RunStarted, data: Mapping[str, Any], t: float | None) -> None:
        """Its first event starts the run; a later one goes on with it (resumed)."""
        if self.events == 1:
            self._start(event, data, t)
        elif self.started is not None:
            self._resume(event, t)

    def _start(self, event: RunStarted, data: Mapping[str, Any], t: float | None) -> None:
        self.started = dict(data)
        self.t0 = t
        self.current = self.initial = event.state
        first = next((m for m in event.messages if m.role == "user"), None)
        if first is not None:
            self.prompt = cut(" ".join(message_text(first).split()), PROMPT_CHARS)
        if self.keep:
            for message in event.messages:
                self._message(t, message.role, message_text(message))

    def _resume(self, event: RunStarted, t: float | None) -> None:
        """The run goes on after it ended (suspended, answered): the same run, one row;
        the answer it got is a message."""
        self.end = None
        self.current = event.state
        self.resumptions += 1
        answered = (event.resumed or {}).get("interrupt")
        if self.keep and isinstance(answered, Mapping) and answered.get("answered") is True:
            value = json.dumps(answered.get("answer"), ensure_ascii=False, default=str)
            self._message(t, "answer", f"{answered.get('id')}: {value}")

    def _tool(self, event: ToolExecuted, t: float | None) -> None:
        outcome = "timeout" if event.timed_out else "error" if event.is_error else "ok"
        started = self._tool_starts.pop(event.tool_use_id, None)
        row = (
            event.tool_use_id,
            intern(event.name),
            started,
            t,
            event.duration,
            outcome,
            cut(event.output, OUTPUT_CHARS),
        )
        self.lists["tools"].append(row)
        self._message(t, "tool", f"{event.name}: {event.output}")

    def _turn(self, response: ModelResponse, turn: int, t: float | None) -> None:
        usage = response.usage
        price = cost_usd(usage, response.model, DEFAULT_PRICES)
        self.turns += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cost = None if price is None or self.cost is None else self.cost + price
        if self.keep:
            self._message(t, "assistant", message_text(response.message))
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
        """The run's line in the list: status (``suspended`` when it waits for an
        answer), exit reason, turns, tokens, cost, state, machine, the first words of its
        prompt (and ``interrupt``, the id of the question it waits on, and
        ``interrupts``, that question and those its other children wait to ask next)."""
        machine = (self.started or {}).get("machine")
        first = {
            "machine": machine if isinstance(machine, str) else None,
            "prompt": self.prompt,
            "resumptions": self.resumptions,
        }
        end = self.end
        if end is not None:
            waits: dict[str, Any] = {}
            if isinstance(end.interrupt, Mapping):
                now = asked(end.interrupt)
                waits = {
                    "interrupt": str(end.interrupt.get("id", "")),
                    "interrupts": [now, *self._asking_next(now["path"] or "")],
                }
            suspended = end.final_state == "suspended"
            return {
                **first,
                **waits,
                "status": "suspended" if suspended else "finished",
                "exit_reason": end.exit_reason,
                "current": end.final_state,
                "turns": end.turns,
                "input_tokens": end.usage.input_tokens,
                "output_tokens": end.usage.output_tokens,
                "cost_usd": end.cost_usd,
                "events": self.events,
            }
        return {
            **first,
            "status": "running",
            "exit_reason": None,
            "current": self.current,
            "turns": self.turns,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost,
            "events": self.events,
        }

    def _asking_next(self, asking: str) -> list[dict[str, Any]]:
        """The questions of the other child runs that wait too (a fan-out's branches
        ask one at a time: each once the one before is answered); no id yet."""
        found = []
        for path, child in self.children.items():
            end = child.end
            if end is None or end.final_state != "suspended":
                continue
            if path == asking or asking.startswith(path + "/"):
                continue  # the one asking now, or a child it runs
            if isinstance(end.interrupt, Mapping) and not end.interrupt.get("path"):
                found.append({**asked(end.interrupt), "id": None, "path": path, "next": True})
        return found

    def detail(self) -> dict[str, Any]:
        """The summary and every list in full."""
        return {**self.summary(), **{k: self.items(k, 0, self.count(k)) for k in LISTS}}


LISTS = ("transitions", "tools", "turn_usage", "recoveries", "messages")
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
    "messages": ("t", "role", "text"),
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


def _parent_path(path: str, known: Container[str]) -> str | None:
    """The path of the nearest child run above ``path`` among ``known`` (None: the top
    run); found by the ``/`` of the path, nearest first, so a call id holding ``/`` is
    no level of its own."""
    end = path.rfind("/")
    while end > 0:
        if path[:end] in known:
            return path[:end]
        end = path.rfind("/", 0, end)
    return None


def _rows(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def asked(interrupt: Mapping[str, Any]) -> dict[str, Any]:
    """What the page shows of an interrupt (a ``finished`` line's, as JSON data): its
    ``id`` (what an answer names), ``kind``, the ``state`` that asked, the ``path`` of the
    child run that asks (None: the run itself), the ``calls`` it is about (each with
    ``id``, ``tool`` and ``arguments``, or a question's ``question``) and its
    ``payload``."""
    payload = interrupt.get("payload")
    calls: list[dict[str, Any]] = []
    if isinstance(payload, Mapping):
        calls += [
            {"id": c.get("id"), "tool": c.get("name"), "arguments": c.get("input")}
            for c in _rows(payload.get("calls"))
        ]
        calls += [
            {"id": q.get("tool_use_id"), "tool": q.get("tool"), "question": q.get("question")}
            for q in _rows(payload.get("questions"))
        ]
    kind, state, path = interrupt.get("kind"), interrupt.get("state"), interrupt.get("path")
    return {
        "id": str(interrupt.get("id") or "") or None,
        "kind": kind if isinstance(kind, str) else None,
        "state": state if isinstance(state, str) else None,
        "path": path if isinstance(path, str) and path else None,
        "calls": calls,
        "payload": payload,
    }


def message_text(message: Message) -> str:
    """What the page shows of a message: its text, a line per tool call (``→ name
    {args}``) and per tool result (``← output``)."""
    parts = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            args = json.dumps(dict(block.input), ensure_ascii=False, default=str)
            parts.append(f"→ {block.name} {args}")
        elif isinstance(block, ToolResultBlock):
            parts.append(f"← {block.content}")
    return "\n".join(parts)


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


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ``…`` marking a cut."""
    return text[:limit] + ("…" if len(text) > limit else "")


def _server_rows(blocks: Iterable[ServerToolBlock], t: float | None) -> list[tuple[Any, ...]]:
    """Rows of the tool list for the provider's own tool calls and results of a turn
    (outcome ``server``, or ``server result``): what was asked, or what came back."""
    rows = []
    for b in blocks:
        data = {k: v for k, v in b.data.items() if k not in ("type", "id", "tool_use_id", "name")}
        text = json.dumps(data.get("input", data), ensure_ascii=False, default=str)
        outcome = "server result" if b.is_result else "server"
        rows.append((b.id, intern(b.name), None, t, None, outcome, cut(text, OUTPUT_CHARS)))
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
