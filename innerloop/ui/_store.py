"""Runs of a checkpoint store, in the shapes the page reads (the same as a log's).

A store keeps a run's checkpoints (one per transition by default), not its events: the
timeline comes from the checkpoints, each turn's tokens from the checkpoint written as the
run left ``stream`` (its ``last_response``), the tool calls from the history (without
durations, which a store does not keep).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from innerloop import _convert
from innerloop._errors import ConversionError
from innerloop._messages import ToolResultBlock, ToolUseBlock
from innerloop.checkpoint import Checkpointer, CheckpointInfo, RunInfo, decode
from innerloop.fsm._interrupts import CHILD_RUNS
from innerloop.fsm._state import HarnessState
from innerloop.recovery._pricing import DEFAULT_PRICES, cost_usd
from innerloop.ui._view import (
    CHILDREN_PAGE,
    LISTS,
    MESSAGE_CHARS,
    OUTPUT_CHARS,
    asked,
    message_text,
)

__all__ = ["StoredChild", "store_children", "store_detail", "store_summary"]

NOTES = "children"
"""The key of ``state.notes`` where ``innerloop.fsm`` notes how its children ended (see
``innerloop.fsm._child``); the runs it keeps going are under ``CHILD_RUNS``."""


def store_summary(info: RunInfo) -> dict[str, Any]:
    """A stored run's line in the list."""
    return {
        "status": info.status,
        "exit_reason": info.exit_reason,
        "current": info.state,
        "turns": info.turns,
        "cost_usd": info.cost_usd,
        "checkpoints": info.checkpoints,
        "updated": info.updated,
    }


def _turns(store: Checkpointer, run_id: str, infos: list[CheckpointInfo]) -> list[dict[str, Any]]:
    turns = []
    for info in infos:
        if info.source != "stream":
            continue
        state = decode(store.rows(run_id, info.seq)).state
        response = state.last_response
        if response is None:
            continue
        turns.append(
            {
                "turn": state.turns,
                "t": info.created - infos[0].created,
                "model": response.model,
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
                "cache_read_tokens": response.usage.cache_read_tokens,
                "cost_usd": cost_usd(response.usage, response.model, DEFAULT_PRICES),
                "stop_reason": response.stop_reason,
            }
        )
    return turns


def _tools(state: HarnessState) -> list[dict[str, Any]]:
    results = {
        b.tool_use_id: b for m in state.history for b in m.content if isinstance(b, ToolResultBlock)
    }
    tools = []
    for message in state.history:
        for block in message.content:
            if not isinstance(block, ToolUseBlock):
                continue
            result = results.get(block.id)
            outcome = "pending" if result is None else "error" if result.is_error else "ok"
            output = result.content if result is not None else ""
            tools.append(
                {
                    "id": block.id,
                    "name": block.name,
                    "started": None,
                    "t": None,
                    "duration": None,
                    "outcome": outcome,
                    "output": output[:OUTPUT_CHARS] + ("…" if len(output) > OUTPUT_CHARS else ""),
                }
            )
    return tools


def _messages(state: HarnessState) -> list[dict[str, Any]]:
    rows = []
    for message in state.history:
        text = message_text(message)
        cut = text[:MESSAGE_CHARS] + ("…" if len(text) > MESSAGE_CHARS else "")
        rows.append({"t": None, "role": message.role, "text": cut})
    return rows


@attrs.frozen
class StoredChild:
    """A child run as its parent's stored state keeps it: its row in the run's tree,
    and its page's detail."""

    row: dict[str, Any]
    detail: dict[str, Any]


def _ended(path: str, ended: Any) -> StoredChild:
    """A child that ended, from what its parent noted (exit reason, turns, answer)."""
    note = ended if isinstance(ended, dict) else {}
    exit_reason, turns = note.get("exit_reason"), note.get("turns")
    summary = {
        "status": "finished",
        "exit_reason": exit_reason if isinstance(exit_reason, str) else None,
        "current": exit_reason if isinstance(exit_reason, str) else None,
        "turns": turns if type(turns) is int else 0,
        "input_tokens": None,
        "output_tokens": None,
        "cost_usd": None,
    }
    output = note.get("output")
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    messages = [{"t": None, "role": "assistant", "text": text[:MESSAGE_CHARS]}] if text else []
    lists: dict[str, list[Any]] = {kind: [] for kind in LISTS} | {"messages": messages}
    return StoredChild({"path": path, **summary, "machine": _name(note)}, {**summary, **lists})


def _kept(path: str, saved: Any) -> StoredChild | None:
    """A child kept going in its parent's notes (one waiting for an answer, or stopped
    with its parent), from its whole state kept there."""
    if not isinstance(saved, dict):
        return None
    kept = saved.get("state")
    try:
        state: HarnessState = _convert.structure(kept, HarnessState)
    except (ConversionError, TypeError, ValueError):
        return None
    question = state.interrupt
    summary = {
        "status": "suspended" if state.final_state == "suspended" else "stopped",
        "exit_reason": state.exit_reason,
        "current": question.state if question is not None else saved.get("at"),
        "turns": state.turns,
        "input_tokens": state.usage.input_tokens,
        "output_tokens": state.usage.output_tokens,
        "cost_usd": state.cost_usd,
    }
    lists: dict[str, list[Any]] = {kind: [] for kind in LISTS}
    lists |= {"tools": _tools(state), "messages": _messages(state)}
    waits = _asks(state) if summary["status"] == "suspended" else []
    row = {"path": path, **summary, "machine": _name(saved)}
    return StoredChild(row, {**summary, **lists, "interrupts": waits})


def _name(recorded: dict[str, Any]) -> str | None:
    """The machine name a child's record holds (None in one written before records named
    it, or a damaged one): data, shown as text."""
    machine = recorded.get("machine")
    return machine if isinstance(machine, str) else None


def _asks(state: HarnessState) -> list[dict[str, Any]]:
    """What a suspended state waits on, as the page shows it."""
    question = state.interrupt
    return [asked(_convert.unstructure(question))] if question is not None else []


def _waiting(children: dict[str, StoredChild], asking: str) -> list[dict[str, Any]]:
    """The questions the run's other children wait to ask, once the one asked now is
    answered (one at a time); no id yet."""
    found = []
    for path, child in children.items():
        if path == asking or asking.startswith(path + "/"):
            continue
        found += [
            {**question, "id": None, "path": path, "next": True}
            for question in child.detail.get("interrupts") or []
            if question["path"] is None
        ]
    return found


def store_children(state: HarnessState) -> dict[str, StoredChild]:
    """The child runs ``state`` keeps, by path (a fan-out's as ``name#n``), in order."""
    found: dict[str, StoredChild] = {}
    notes = state.notes.get(NOTES)
    for name, ended in (notes if isinstance(notes, dict) else {}).items():
        if isinstance(ended, list):
            for n, one in enumerate(ended, start=1):
                found[f"{name}#{n}"] = _ended(f"{name}#{n}", one)
        else:
            found[str(name)] = _ended(str(name), ended)
    kept = state.notes.get(CHILD_RUNS)
    for path, saved in (kept if isinstance(kept, dict) else {}).items():
        child = _kept(str(path), saved)
        if child is not None:
            found[str(path)] = child
    return dict(list(found.items())[:CHILDREN_PAGE])


def store_detail(store: Checkpointer, info: RunInfo) -> dict[str, Any]:
    """Everything the run's page shows, read from the store's checkpoints; its children's
    pages under ``child_views`` (by path)."""
    infos = store.checkpoints(info.run_id)
    state = decode(store.rows(info.run_id)).state
    children = store_children(state)
    start = infos[0].created if infos else info.created
    transitions = [
        {"t": i.created - start, "source": i.source, "target": i.state, "guard": i.guard}
        for i in infos
        if i.source is not None
    ]
    question = state.interrupt if state.final_state == "suspended" else None
    waits: dict[str, Any] = {}
    if question is not None:
        now = _asks(state)
        waits = {"interrupt": question.id, "interrupts": now + _waiting(children, question.path)}
    return {
        **store_summary(info),
        **waits,
        "input_tokens": state.usage.input_tokens,
        "output_tokens": state.usage.output_tokens,
        "transitions": transitions,
        "tools": _tools(state),
        "turn_usage": _turns(store, info.run_id, infos),
        "recoveries": [],
        "messages": _messages(state),
        "children": [
            {**c.row, "parent": None, "depth": 0, "error": None} for c in children.values()
        ],
        "children_total": len(children),
        "child_views": children,
    }
