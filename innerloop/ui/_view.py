"""What the page shows of one run, folded from its event dicts (the lines of an event log).

Pure functions over plain data: no file, no server. A run's view is JSON data: its status,
the transitions with their times, the tool calls with durations and outcomes, and the
tokens and cost of each model turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from innerloop._messages import Usage
from innerloop.recovery._pricing import DEFAULT_PRICES, cost_usd

__all__ = ["OUTPUT_CHARS", "RECOVERY_EVENTS", "run_detail", "run_summary"]

OUTPUT_CHARS = 300
"""A tool's output is cut to this many characters on the page."""

RECOVERY_EVENTS = ("backoff", "fallback", "compacted", "alert", "abort")


def _finished(events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return events[-1] if events and events[-1].get("type") == "finished" else None


def _current(events: Sequence[Mapping[str, Any]], initial: str) -> str:
    for event in reversed(events):
        if event.get("type") == "transition":
            return str(event["target"])
    return initial


def _turns(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for event in events:
        if event.get("type") != "model_response":
            continue
        response = event.get("response")
        response = response if isinstance(response, Mapping) else {}
        usage = _usage(response.get("usage"))
        model = str(response.get("model") or "")
        turns.append(
            {
                "turn": event.get("turn", len(turns) + 1),
                "t": event.get("t"),
                "model": model,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cost_usd": cost_usd(usage, model, DEFAULT_PRICES),
                "stop_reason": response.get("stop_reason"),
            }
        )
    return turns


def _usage(data: object) -> Usage:
    """A response's usage; fields missing or not whole numbers count 0."""
    fields = data if isinstance(data, Mapping) else {}
    known = attrs.fields_dict(Usage)
    return Usage(**{k: v for k, v in fields.items() if k in known and type(v) is int})


def _tools(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    started: dict[str, Any] = {}
    tools = []
    for event in events:
        kind = event.get("type")
        if kind == "tool_use_start":
            started[str(event["id"])] = event.get("t")
        elif kind == "tool_executed":
            output = str(event.get("output", ""))
            outcome = (
                "timeout" if event.get("timed_out") else "error" if event.get("is_error") else "ok"
            )
            tools.append(
                {
                    "id": event.get("tool_use_id"),
                    "name": event.get("name"),
                    "started": started.get(str(event.get("tool_use_id"))),
                    "t": event.get("t"),
                    "duration": event.get("duration"),
                    "outcome": outcome,
                    "output": output[:OUTPUT_CHARS] + ("…" if len(output) > OUTPUT_CHARS else ""),
                }
            )
    return tools


def _transitions(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"t": e.get("t"), "source": e["source"], "target": e["target"], "guard": e.get("guard")}
        for e in events
        if e.get("type") == "transition"
    ]


def _recoveries(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in e.items() if k not in ("seq", "diagnostic")}
        for e in events
        if e.get("type") in RECOVERY_EVENTS
    ]


def run_summary(events: Sequence[Mapping[str, Any]], initial: str = "idle") -> dict[str, Any]:
    """A run's line in the list: status, exit reason, turns, tokens, cost, current state."""
    end = _finished(events)
    turns = _turns(events)
    if end is not None:
        usage = end.get("usage") or {}
        return {
            "status": "finished",
            "exit_reason": end.get("exit_reason"),
            "current": end.get("final_state"),
            "turns": end.get("turns", len(turns)),
            "input_tokens": usage.get("input_tokens", 0),
            "output_tokens": usage.get("output_tokens", 0),
            "cost_usd": end.get("cost_usd"),
            "events": len(events),
        }
    costs = [t["cost_usd"] for t in turns]
    return {
        "status": "running",
        "exit_reason": None,
        "current": _current(events, initial),
        "turns": len(turns),
        "input_tokens": sum(t["input_tokens"] for t in turns),
        "output_tokens": sum(t["output_tokens"] for t in turns),
        "cost_usd": None if None in costs else sum(costs),
        "events": len(events),
    }


def run_detail(events: Sequence[Mapping[str, Any]], initial: str = "idle") -> dict[str, Any]:
    """Everything the run's page shows: the summary, the transition timeline, the tool
    calls, the recoveries and the tokens and cost per model turn."""
    return {
        **run_summary(events, initial),
        "transitions": _transitions(events),
        "tools": _tools(events),
        "turn_usage": _turns(events),
        "recoveries": _recoveries(events),
    }
