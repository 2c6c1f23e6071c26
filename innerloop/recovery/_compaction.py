"""Compaction: shrink the oldest history while keeping it valid for every provider.

``plan_cut`` is the pure planning step shared by every compactor: it picks where the kept
history starts. A cut lands only on a user message, so alternation survives; tool results
whose tool call was cut away are turned into plain text, so no tool_result is orphaned and
no tool_use loses its result. The newest messages are always kept verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from innerloop._messages import Block, Message, TextBlock, ToolResultBlock
from innerloop.recovery._tokens import MessageTokenCache

__all__ = [
    "CompactionRequest",
    "CompactionResult",
    "Compactor",
    "TruncatingCompactor",
    "apply_cut",
    "plan_cut",
]

MIN_KEEP = 2


@attrs.frozen
class CompactionRequest:
    history: tuple[Message, ...]
    target_tokens: int
    """What the history (not counting system prompt and tools) should fit in."""
    reason: str
    """``budget``, ``max_tokens`` or ``overflow``."""
    keep_recent: int = 4


@attrs.frozen
class CompactionResult:
    history: tuple[Message, ...]
    removed: int
    """Messages removed from the front (0: nothing could be removed)."""
    summary: str | None = None


class Compactor(Protocol):
    async def compact(
        self, request: CompactionRequest, tokens: MessageTokenCache
    ) -> CompactionResult: ...


def _orphans_to_text(message: Message) -> Message:
    """Tool results whose call was compacted away become text, keeping their content."""
    if not message.tool_results:
        return message
    blocks: list[Block] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            status = "error" if block.is_error else "result"
            blocks.append(TextBlock(f"[{status} of a compacted tool call]: {block.content}"))
        else:
            blocks.append(block)
    return Message("user", tuple(blocks))


def apply_cut(history: Sequence[Message], cut: int, marker: str) -> tuple[Message, ...]:
    """History from ``cut`` on, with ``marker`` opening the first kept (user) message."""
    first = _orphans_to_text(history[cut])
    head = Message("user", (TextBlock(marker), *first.content))
    return (head, *history[cut + 1 :])


def marker_text(removed: int, reason: str, summary: str | None = None) -> str:
    text = f"[Earlier conversation compacted ({reason}): {removed} messages removed.]"
    if summary:
        text += f"\nSummary of the removed part:\n{summary}"
    return text


def plan_cut(
    history: Sequence[Message],
    target_tokens: int,
    tokens: MessageTokenCache,
    keep_recent: int = 4,
) -> int:
    """Index where the kept history starts; 0 means nothing can be removed.

    The smallest cut that fits ``target_tokens`` wins; when none fits, the largest
    allowed cut (the most that can go while keeping the newest messages verbatim).
    """
    n = len(history)
    keep = max(keep_recent, MIN_KEEP)
    counts = [tokens.count(m) for m in history]
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + counts[i]
    best = 0
    for cut in range(1, n - keep + 1):
        if history[cut].role != "user":
            continue
        best = cut
        # the marker costs a few tokens; count the kept part with a small allowance
        if suffix[cut] + 32 <= target_tokens:
            return cut
    return best


@attrs.frozen
class TruncatingCompactor:
    """Deterministic: drops the oldest messages behind a marker message. No model call."""

    async def compact(
        self, request: CompactionRequest, tokens: MessageTokenCache
    ) -> CompactionResult:
        cut = plan_cut(request.history, request.target_tokens, tokens, request.keep_recent)
        if cut == 0:
            return CompactionResult(request.history, 0)
        marker = marker_text(cut, request.reason)
        return CompactionResult(apply_cut(request.history, cut, marker), cut)
