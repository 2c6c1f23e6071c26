"""Token counting with a per-message cache, so appending costs only the new message."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from innerloop._messages import (
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = ["ApproxTokenCounter", "MessageTokenCache", "TokenCounter", "message_text"]

MESSAGE_OVERHEAD = 4
"""Tokens charged per message for role and framing."""
IMAGE_TOKENS = 1600
"""A flat estimate for an image block."""


class TokenCounter(Protocol):
    def count_text(self, text: str) -> int: ...


class ApproxTokenCounter:
    """About four characters a token. Deterministic and dependency-free; for tests and
    for hosts that do not want tiktoken."""

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4


def message_text(message: Message) -> Iterable[str]:
    """The countable text of a message, block by block."""
    for block in message.content:
        if isinstance(block, TextBlock):
            yield block.text
        elif isinstance(block, ThinkingBlock):
            yield block.thinking
        elif isinstance(block, RedactedThinkingBlock):
            yield block.data
        elif isinstance(block, ToolUseBlock):
            yield block.name
            yield json.dumps(block.input, separators=(",", ":"))
        elif isinstance(block, ToolResultBlock):
            yield block.content


def count_message(counter: TokenCounter, message: Message) -> int:
    total = MESSAGE_OVERHEAD
    for block in message.content:
        if isinstance(block, ImageBlock):
            total += IMAGE_TOKENS
    for text in message_text(message):
        total += counter.count_text(text)
    return total


class MessageTokenCache:
    """Counts messages once each: messages are immutable, so a count never goes stale."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._counts: dict[int, tuple[Message, int]] = {}

    def count(self, message: Message) -> int:
        hit = self._counts.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        n = count_message(self.counter, message)
        self._counts[id(message)] = (message, n)
        return n

    def count_history(self, history: Sequence[Message]) -> int:
        return sum(self.count(m) for m in history)

    def count_static(self, system: str, tools: Sequence[dict[str, Any]]) -> int:
        """System prompt and tool definitions."""
        total = self.counter.count_text(system) if system else 0
        for tool in tools:
            total += self.counter.count_text(json.dumps(tool, separators=(",", ":")))
        return total

    def forget_missing(self, history: Sequence[Message]) -> None:
        """Drop cached counts of messages no longer in ``history`` (after compaction)."""
        alive = {id(m) for m in history}
        for key in [k for k in self._counts if k not in alive]:
            del self._counts[key]
