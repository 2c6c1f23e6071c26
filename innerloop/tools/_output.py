"""Caps on what one tool result may put into the context: bytes and tokens.

Bytes are capped first, by slicing the head and the tail of the text (a character is at
most four UTF-8 bytes, so the slices are bounded by the cap, whatever the size of the
whole); tokens are counted only on that capped text. A 200 MB result costs a few
milliseconds and no copy of itself. The runner calls :func:`cap_output` off the event
loop.
"""

from __future__ import annotations

import attrs

from innerloop.recovery._tokens import TokenCounter

__all__ = ["OutputLimits", "cap_output"]

_EXACT_SIZE = 1 << 20
"""Up to this many characters a non-ASCII text is encoded to tell its exact size in bytes;
a longer one is reported in characters (encoding it all would cost time and memory)."""


@attrs.frozen
class OutputLimits:
    """The most one tool result may hold, in UTF-8 bytes and in tokens. ``None`` disables a
    cap. Over a cap the middle of the output is cut and a notice says how much."""

    max_bytes: int | None = 64_000
    max_tokens: int | None = 8_000


def _size(text: str) -> int | None:
    """``text``'s size in UTF-8 bytes, or None when finding out means encoding a long
    non-ASCII text."""
    if text.isascii():  # a flag of the string object: O(1)
        return len(text)
    if len(text) <= _EXACT_SIZE:
        return len(text.encode("utf-8"))
    return None


def _over_bytes(text: str, limits: OutputLimits) -> bool:
    if limits.max_bytes is None:
        return False
    if len(text) > limits.max_bytes:  # every character is at least one byte
        return True
    return len(text.encode("utf-8")) > limits.max_bytes


def _tokens_over(text: str, counter: TokenCounter, limits: OutputLimits) -> int | None:
    """``text``'s token count when it is over the token cap, else None."""
    if limits.max_tokens is None or len(text) <= limits.max_tokens:
        return None  # a token spans at least one character: no need to tokenize
    tokens = counter.count_text(text)
    return tokens if tokens > limits.max_tokens else None


def _cut_middle(text: str, keep: int) -> tuple[str, str]:
    """Head (two thirds) and tail (one third) of ``text`` totalling ``keep`` characters."""
    head = keep * 2 // 3
    tail = keep - head
    return text[:head], text[len(text) - tail :] if tail else ""


def _notice(text: str, kept: int, limits: OutputLimits) -> str:
    size = _size(text)
    whole = f"{size:,} bytes" if size is not None else f"{len(text):,} characters"
    caps = []
    if limits.max_bytes is not None:
        caps.append(f"{limits.max_bytes:,} bytes")
    if limits.max_tokens is not None:
        caps.append(f"{limits.max_tokens:,} tokens")
    return (
        f"\n[... output truncated: {len(text) - kept:,} of {len(text):,} characters cut "
        f"from the middle (the full output was {whole}; limit {' / '.join(caps)}) ...]\n"
    )


def cap_output(text: str, counter: TokenCounter, limits: OutputLimits) -> str:
    """``text`` if it fits ``limits``, else its head and tail around a notice of the cut,
    the whole fitting the limits. The work is bounded by the caps, not by ``text``."""
    size, most_bytes, most_tokens = len(text), limits.max_bytes, limits.max_tokens
    if (most_bytes is None or size * 4 <= most_bytes) and (
        most_tokens is None or size <= most_tokens
    ):
        return text  # fits by its length alone: four UTF-8 bytes a character at most,
        # one character a token at least
    if not _over_bytes(text, limits) and _tokens_over(text, counter, limits) is None:
        return text
    keep = len(text)
    if limits.max_bytes is not None:
        keep = min(keep, limits.max_bytes)
    while keep > 0:
        head, tail = _cut_middle(text, keep)
        capped = head + _notice(text, keep, limits) + tail
        size = len(capped.encode("utf-8"))
        if limits.max_bytes is not None and size > limits.max_bytes:
            ratio = limits.max_bytes / size
        else:
            tokens = _tokens_over(capped, counter, limits)
            if tokens is None:
                return capped
            ratio = (limits.max_tokens or 0) / tokens
        keep = min(keep - 1, int(keep * ratio * 0.95))
    return _notice(text, 0, limits)
