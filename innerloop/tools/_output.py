"""Caps on what one tool result may put into the context: bytes and tokens."""

from __future__ import annotations

import attrs

from innerloop.recovery._tokens import TokenCounter

__all__ = ["OutputLimits", "cap_output"]


@attrs.frozen
class OutputLimits:
    """The most one tool result may hold, in UTF-8 bytes and in tokens. ``None`` disables a
    cap. Over a cap the middle of the output is cut and a notice says how much."""

    max_bytes: int | None = 64_000
    max_tokens: int | None = 8_000


def _cut_middle(text: str, keep: int) -> tuple[str, str]:
    """Head (two thirds) and tail (one third) of ``text`` totalling ``keep`` characters."""
    head = keep * 2 // 3
    tail = keep - head
    return text[:head], text[len(text) - tail :] if tail else ""


def _notice(text: str, kept: int, counter: TokenCounter, limits: OutputLimits) -> str:
    cut = len(text) - kept
    size = len(text.encode("utf-8"))
    caps = []
    if limits.max_bytes is not None:
        caps.append(f"{limits.max_bytes:,} bytes")
    if limits.max_tokens is not None:
        caps.append(f"{limits.max_tokens:,} tokens")
    return (
        f"\n[... output truncated: {cut:,} of {len(text):,} characters cut from the middle "
        f"(the full output was {size:,} bytes, about {counter.count_text(text):,} tokens; "
        f"limit {' / '.join(caps)}) ...]\n"
    )


def _fits(text: str, counter: TokenCounter, limits: OutputLimits) -> bool:
    if limits.max_bytes is not None and len(text.encode("utf-8")) > limits.max_bytes:
        return False
    if limits.max_tokens is None or len(text) <= limits.max_tokens:
        return True  # a token spans at least one character: no need to tokenize
    return counter.count_text(text) <= limits.max_tokens


def cap_output(text: str, counter: TokenCounter, limits: OutputLimits) -> str:
    """``text`` if it fits ``limits``, else its head and tail around a notice of the cut,
    the whole fitting the limits."""
    if _fits(text, counter, limits):
        return text
    keep = len(text)
    if limits.max_bytes is not None:
        keep = min(keep, limits.max_bytes)
    while keep > 0:
        head, tail = _cut_middle(text, keep)
        capped = head + _notice(text, keep, counter, limits) + tail
        if _fits(capped, counter, limits):
            return capped
        size = len(capped.encode("utf-8"))
        ratio = 1.0
        if limits.max_bytes is not None and size > limits.max_bytes:
            ratio = min(ratio, limits.max_bytes / size)
        if limits.max_tokens is not None:
            tokens = counter.count_text(capped)
            if tokens > limits.max_tokens:
                ratio = min(ratio, limits.max_tokens / tokens)
        keep = min(keep - 1, int(keep * ratio * 0.95))
    return _notice(text, 0, counter, limits)
