"""Terminal views of a run: a live rich view for terminals, plain lines otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from innerloop._events import Event
from innerloop._messages import Usage
from innerloop.fsm._state import HarnessState

__all__ = ["LiveView", "PlainView", "describe"]

_QUIET = frozenset(
    {
        "text_delta",
        "thinking_delta",
        "tool_input_delta",
        "tool_use_start",
        "message_complete",
        "output_delta",
    }
)


def describe(event: Event) -> str | None:
    """One line for an event, or None for the chatty stream deltas."""
    data = event.to_dict()
    kind = data.pop("type")
    if kind in _QUIET:
        return None
    if kind == "transition":
        guard = f"  [{data['guard']}]" if data["guard"] else ""
        return f"  {data['source']:>9} -> {data['target']}{guard}"
    if kind == "model_response":
        r = data["response"]
        text = "".join(b.get("text", "") for b in r["message"]["content"] if b["type"] == "text")
        short = (text[:60] + "...") if len(text) > 60 else text
        return (
            f"  * model turn {data['turn']} ({r['provider']}:{r['model']}): "
            f"stop_reason={r['stop_reason']} {short!r}"
        )
    if kind == "tool_use_complete":
        u = data["tool_use"]
        return f"  * tool call {u['name']}({u['input']}) id={u['id']}"
    if kind == "tool_executed":
        status = "timed out" if data["timed_out"] else ("error" if data["is_error"] else "ok")
        out = data["output"][:70]
        return f"  * tool {data['name']} {status} in {data['duration'] * 1000:.0f} ms: {out!r}"
    line = _LINES.get(kind)
    if line is not None:
        return line(kind, data)
    if kind == "abort" and data.get("diagnostic"):
        data["diagnostic"] = "{...}"
    for long in ("params", "messages"):  # run_started's replay record
        data.pop(long, None)
    if data.get("history"):
        data["history"] = data["history"][:12]
    body = ", ".join(f"{k}={_short(v)}" for k, v in data.items())
    return f"  * {kind}: {body}"


_VALUE_CHARS = 80
"""The most of one value a console line shows (a log keeps it whole)."""


def _short(value: Any) -> str:
    text = format(value, ".6g") if isinstance(value, float) else repr(value)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def _so_far(data: dict[str, Any]) -> str:
    """The turns, tokens and cost a run's event reports."""
    usage = Usage(**data["usage"])
    cost, turns = data["cost_usd"], data["turns"]
    price = f"${cost:.6f}" if cost is not None else "cost unknown"
    return f"{turns} turn{'' if turns == 1 else 's'}, {usage.total_tokens} tokens, {price}"


def _run_started(kind: str, data: dict[str, Any]) -> str:
    """Where a run starts; a resumed one says so and what it had spent (its state, the
    whole conversation included, stays in the log)."""
    run_id = f" run_id={data['run_id']}" if data.get("run_id") else ""
    line = f"  * run_started: machine={data['machine']!r} from {data['state']!r}{run_id}"
    return line + (f" (resumed after {_so_far(data)})" if data.get("resumed") else "")


def _finished(kind: str, data: dict[str, Any]) -> str:
    waits = data.get("interrupt") or {}
    asks = f", waits on {waits['kind']}" if waits else ""
    asks += f" from {waits['path']!r}" if waits.get("path") else ""
    return f"  * finished: exit_reason={data['exit_reason']!r} after {_so_far(data)}{asks}"


def _model_call(kind: str, data: dict[str, Any]) -> str:
    """A model call about to be sent, or how it failed."""
    if kind == "model_call":
        return (
            f"  * model call {data['provider']}:{data['model']}: {data['messages']} messages, "
            f"request {data['fingerprint'][:12]}"
        )
    e = data["error"]
    status = f" {e['status']}" if e["status"] is not None else ""
    return f"  * model call failed ({data['stage']}): {e['category']}{status}: {e['message']}"


_LINES: Mapping[str, Callable[[str, dict[str, Any]], str]] = MappingProxyType(
    {
        "model_call": _model_call,
        "model_error": _model_call,
        "run_started": _run_started,
        "finished": _finished,
    }
)
"""The events with a line of their own, by kind."""

_NOTED_GUARDS = frozenset({"transient_retry", "context_overflow", "cannot_shrink", "failed"})


@attrs.define
class PlainView:
    """Prints one line per interesting event."""

    write: Callable[[str], None] = print

    def handle(self, event: Event) -> None:
        line = describe(event)
        if line is not None:
            self.write(line)

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@attrs.define
class _ToolRow:
    name: str
    args: str
    start: float
    end: float | None = None
    status: str = "running"


class LiveView:
    """A live rich view: current state, streaming text, tool calls with a spinner and their
    duration, running token and cost counters."""

    def __init__(self, state: HarnessState, console: Console | None = None) -> None:
        self.state = state
        self.console = console or Console()
        self.current = "idle"
        self.text = ""
        self.tools: dict[str, _ToolRow] = {}
        self.started = time.monotonic()
        self.notes: list[str] = []
        self.path: list[str] = ["idle"]
        self._live = Live(self, console=self.console, refresh_per_second=12, transient=False)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._live.__exit__(*exc)

    def handle(self, event: Event) -> None:
        data = event.to_dict()
        kind = data["type"]
        if kind == "transition":
            self.current = data["target"]
            self.path.append(data["target"])
            if data["guard"] in _NOTED_GUARDS:
                self.notes.append(f"* {data['source']} -> {data['target']} [{data['guard']}]")
        elif kind == "text_delta":
            self.text += data["text"]
        elif kind == "model_response":
            self.text += "\n"
        elif kind == "tool_use_complete":
            u = data["tool_use"]
            self.tools[u["id"]] = _ToolRow(u["name"], str(u["input"])[:60], time.monotonic())
        elif kind == "tool_executed":
            row = self.tools.get(data["tool_use_id"])
            if row is not None:
                row.end = row.start + data["duration"]
                row.status = (
                    "timed out" if data["timed_out"] else "error" if data["is_error"] else "ok"
                )
        elif kind in ("backoff", "fallback", "compacted", "alert", "abort"):
            line = describe(event)
            if line:
                self.notes.append(line.strip())

    def __rich__(self) -> RenderableType:
        s = self.state
        cost = f"${s.cost_usd:.4f}" if s.cost_usd is not None else "n/a"
        header = Text.assemble(
            ("state ", "dim"),
            (self.current, "bold cyan"),
            (f"   turn {s.turns}", ""),
            (f"   tokens in {s.usage.input_tokens} out {s.usage.output_tokens}", ""),
            (f"   cost {cost}", ""),
            (f"   {time.monotonic() - self.started:.1f}s", "dim"),
        )
        tools = Table(show_header=False, box=None, padding=(0, 1))
        for row in list(self.tools.values())[-8:]:
            if row.end is None:
                icon: RenderableType = Spinner("dots")
                took = f"{time.monotonic() - row.start:.1f}s"
            else:
                icon = Text(
                    "✓" if row.status == "ok" else "✗", "green" if row.status == "ok" else "red"
                )
                took = f"{(row.end - row.start) * 1000:.0f} ms {row.status}"
            tools.add_row(icon, Text(row.name, "bold"), Text(row.args, "dim"), Text(took))
        tail = "\n".join(self.text.splitlines()[-10:])
        notes = Text("\n".join(self.notes[-10:]), "yellow")
        trail = Text("path: … → " + " → ".join(self.path[-12:]), "cyan")
        return Group(header, trail, Text(tail), tools, notes)
