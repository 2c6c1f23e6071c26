"""Prompt-cache control: where cache breakpoints go and how long they live.

Anthropic caches the prefix of a request up to each block marked with ``cache_control``
(at most four marks a request, in prefix order tools, system, messages; a mark with a
one-hour lifetime may not follow a five-minute one). OpenAI caches prefixes by itself and
takes a ``prompt_cache_key`` (requests sharing it are routed to the same cache) and a
``prompt_cache_retention`` (``in_memory`` or ``24h``).
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from innerloop._errors import ParamsError
from innerloop._messages import Usage
from innerloop._validators import Check, boolean, integer, optional, string

__all__ = [
    "ANTHROPIC_MAX_BREAKPOINTS",
    "RETENTIONS",
    "TTLS",
    "CacheTTL",
    "PromptCache",
    "anthropic_cache_control",
    "mark_messages",
    "openai_cache_fields",
    "openai_usage",
]

CacheTTL: TypeAlias = Literal["5m", "1h"]
TTLS = ("5m", "1h")
"""Anthropic's cache lifetimes: five minutes (its default) and one hour."""
RETENTIONS = ("in_memory", "24h")
"""OpenAI's ``prompt_cache_retention`` values."""
ANTHROPIC_MAX_BREAKPOINTS = 4
"""Anthropic refuses a request with more ``cache_control`` marks than this."""
_P = "prompt_cache."
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
"""Block types Anthropic refuses a ``cache_control`` on."""


_TTL = Check(
    "'5m', '1h' or None (Anthropic's default, five minutes)", lambda v: v is None or v in TTLS, _P
)
_RETENTION = Check(
    "'in_memory', '24h' or None (OpenAI's default)", lambda v: v is None or v in RETENTIONS, _P
)


@attrs.frozen(kw_only=True)
class PromptCache:
    """Prompt caching for every request of a run (``HarnessParams(prompt_cache=...)``).

    Anthropic (``cache_control`` breakpoints):

    - ``system``: a breakpoint after the system prompt (on by default);
    - ``tools``: a breakpoint after the last tool definition;
    - ``last_messages``: a breakpoint on each of the last N messages (on its last block
      that can take one), so a growing conversation reads its earlier turns from cache;
    - ``ttl``: the lifetime of the system and tools breakpoints, ``"5m"`` or ``"1h"``
      (None: Anthropic's default, five minutes, and no ``ttl`` is sent);
    - ``messages_ttl``: the lifetime of the message breakpoints (None: the default).

    OpenAI (Chat Completions and Responses; it places breakpoints itself):

    - ``key``: ``prompt_cache_key``, shared by requests that should hit the same cache;
    - ``retention``: ``prompt_cache_retention``, ``"in_memory"`` or ``"24h"``.

    Checked here: at most four Anthropic breakpoints, and a one-hour breakpoint never after
    a five-minute one (Anthropic refuses both)."""

    system: bool = attrs.field(default=True, validator=boolean(prefix=_P))
    tools: bool = attrs.field(default=False, validator=boolean(prefix=_P))
    last_messages: int = attrs.field(default=0, validator=integer(ge=0, prefix=_P))
    ttl: CacheTTL | None = attrs.field(default=None, validator=_TTL)
    messages_ttl: CacheTTL | None = attrs.field(default=None, validator=_TTL)
    key: str | None = attrs.field(
        default=None, validator=optional(string(non_empty=True, prefix=_P))
    )
    retention: Literal["in_memory", "24h"] | None = attrs.field(default=None, validator=_RETENTION)

    def __attrs_post_init__(self) -> None:
        marks = int(self.system) + int(self.tools) + self.last_messages
        if marks > ANTHROPIC_MAX_BREAKPOINTS:
            raise ParamsError(
                _P + "last_messages",
                f"asks for {marks} cache breakpoints (system {int(self.system)}, tools "
                f"{int(self.tools)}, last_messages {self.last_messages}) but Anthropic takes at "
                f"most {ANTHROPIC_MAX_BREAKPOINTS} a request; lower last_messages",
                self.last_messages,
            )
        prefix = self.system or self.tools
        if prefix and self.last_messages and self.messages_ttl == "1h" and self.ttl != "1h":
            raise ParamsError(
                _P + "messages_ttl",
                f"'1h' message breakpoints would follow {self.ttl or 'default'} (5-minute) "
                "system/tools breakpoints, and Anthropic requires longer-lived breakpoints "
                "first; set ttl='1h' too, or messages_ttl='5m'",
                self.messages_ttl,
            )

    @property
    def anthropic_breakpoints(self) -> int:
        """How many ``cache_control`` marks an Anthropic request carries at most."""
        return int(self.system) + int(self.tools) + self.last_messages


def anthropic_cache_control(ttl: str | None) -> dict[str, str]:
    """The ``cache_control`` of a breakpoint with lifetime ``ttl`` (None: the default)."""
    return {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}


def mark_messages(messages: list[dict[str, Any]], count: int, ttl: str | None) -> None:
    """Put a breakpoint on each of the last ``count`` Anthropic wire messages, on the last
    block of each that can take one (thinking blocks cannot). A marked message is a copy
    (with a copy of the block): the messages given may be kept from call to call."""
    for i in range(max(len(messages) - count, 0), len(messages)) if count else ():
        content = list(messages[i]["content"])
        marks = [n for n, b in enumerate(content) if b.get("type") not in _UNMARKABLE]
        if marks:
            last = marks[-1]
            content[last] = {**content[last], "cache_control": anthropic_cache_control(ttl)}
            messages[i] = {**messages[i], "content": content}


def openai_cache_fields(cache: PromptCache) -> dict[str, str]:
    """The request fields of OpenAI's prompt caching (Chat Completions and Responses)."""
    out: dict[str, str] = {}
    if cache.key is not None:
        out["prompt_cache_key"] = cache.key
    if cache.retention is not None:
        out["prompt_cache_retention"] = cache.retention
    return out


def openai_usage(
    prompt_tokens: Any, details: Any, output_tokens: Any, reasoning_tokens: Any
) -> Usage:
    """Usage from OpenAI's figures: the prompt's total, whose ``cached_tokens`` (read from
    cache) and ``cache_write_tokens`` (written to it) are split out of ``input_tokens``, as
    Anthropic reports them."""
    details = details or {}
    read = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)
    return Usage(
        int(prompt_tokens or 0) - read - written,
        int(output_tokens or 0),
        read,
        written,
        int(reasoning_tokens or 0),
    )
