"""Runs of a checkpoint store, in the shapes the page reads (the same as a log's).

A store keeps a run's checkpoints (one per transition by default), not its events: the
timeline comes from the checkpoints, each turn's tokens from the checkpoint written as the
run left ``stream`` (its ``last_response``), the tool calls from the history (without
durations, which a store does not keep).
"""

from __future__ import annotations

from typing import Any

from innerloop._messages import ToolResultBlock, ToolUseBlock
from innerloop.checkpoint import Checkpointer, CheckpointInfo, RunInfo, decode
from innerloop.fsm._state import HarnessState
from innerloop.recovery._pricing import DEFAULT_PRICES, cost_usd
from innerloop.ui._view import OUTPUT_CHARS

__all__ = ["store_detail", "store_summary"]


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


def store_detail(store: Checkpointer, info: RunInfo) -> dict[str, Any]:
    """Everything the run's page shows, read from the store's checkpoints."""
    infos = store.checkpoints(info.run_id)
    state = decode(store.rows(info.run_id)).state
    start = infos[0].created if infos else info.created
    transitions = [
        {"t": i.created - start, "source": i.source, "target": i.state, "guard": i.guard}
        for i in infos
        if i.source is not None
    ]
    return {
        **store_summary(info),
        "input_tokens": state.usage.input_tokens,
        "output_tokens": state.usage.output_tokens,
        "transitions": transitions,
        "tools": _tools(state),
        "turn_usage": _turns(store, info.run_id, infos),
        "recoveries": [],
    }
