"""Structural checks of a canonical history, for tests."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from innerloop._messages import Message

__all__ = ["assert_valid_history", "history_problems"]


def history_problems(history: Sequence[Message]) -> list[str]:
    """What makes ``history`` invalid for either provider (empty list: valid).

    Rules: starts with a user message; roles alternate; every tool_use of an assistant
    message is answered by exactly one tool_result in the next message; no tool_result
    answers anything else.
    """
    problems: list[str] = []
    if history and history[0].role != "user":
        problems.append("history does not start with a user message")
    for i, (a, b) in enumerate(pairwise(history)):
        if a.role == b.role:
            problems.append(f"messages {i} and {i + 1} are both {a.role!r}")
    for i, message in enumerate(history):
        if message.role == "user":
            problems += _result_problems(history, i)
        else:
            problems += _unanswered_problems(history, i)
    return sorted(set(problems), key=problems.index)


def _result_problems(history: Sequence[Message], i: int) -> list[str]:
    """Tool results of user message ``i`` that repeat or answer nothing asked just before."""
    answered = [r.tool_use_id for r in history[i].tool_results]
    asked = [u.id for u in history[i - 1].tool_uses] if i > 0 else []
    problems: list[str] = []
    for tid in answered:
        if answered.count(tid) > 1:
            problems.append(f"message {i} answers tool_use {tid!r} more than once")
        if tid not in asked:
            problems.append(f"message {i} has an orphan tool_result {tid!r}")
    return problems


def _unanswered_problems(history: Sequence[Message], i: int) -> list[str]:
    """Tool uses of assistant message ``i`` that the next message does not answer."""
    nxt = history[i + 1] if i + 1 < len(history) else None
    got = {r.tool_use_id for r in nxt.tool_results} if nxt is not None else set()
    return [
        f"tool_use {u.id!r} in message {i} has no tool_result"
        for u in history[i].tool_uses
        if u.id not in got
    ]


def assert_valid_history(history: Sequence[Message], *, complete: bool = True) -> None:
    """Raise AssertionError listing every problem. With ``complete=False`` a trailing
    assistant message may still wait for its tool results."""
    problems = history_problems(history)
    if not complete and history and history[-1].role == "assistant":
        pending = {
            f"tool_use {u.id!r} in message {len(history) - 1} has no tool_result"
            for u in history[-1].tool_uses
        }
        problems = [p for p in problems if p not in pending]
    if problems:
        raise AssertionError("invalid history:\n  " + "\n  ".join(problems))
