"""One parse for JSON read from outside (model output, tool arguments, event logs,
checkpoint rows, answers), with a depth limit.

``json.loads`` of text nested 100,000 deep raises ``RecursionError``, and data a few
hundred levels deep breaks the code that walks it later (validation, conversion,
hashing). :func:`parse_json` refuses text nested deeper than ``max_depth`` (default
:data:`MAX_JSON_DEPTH`) with :class:`JSONTooDeep`, a ``json.JSONDecodeError`` (so a
``ValueError``): every place that already treats bad JSON as an ordinary error treats
too-deep JSON the same way. :func:`json_depth` measures data already parsed, without
recursion. A leaf module: it imports nothing from innerloop.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_JSON_DEPTH_LIMIT",
    "STORED_JSON_DEPTH",
    "UNREADABLE",
    "WRAPPED_JSON_DEPTH",
    "JSONTooDeep",
    "json_depth",
    "parse_json",
    "unreadable_input",
    "unreadable_reason",
    "wrapped_depth",
]

MAX_JSON_DEPTH: Final = 100
"""The deepest nesting of arrays and objects accepted from outside (real model answers,
tool arguments and logs stay far below; the code that walks data keeps far from Python's
recursion limit)."""

WRAPPED_JSON_DEPTH: Final = MAX_JSON_DEPTH + 32
"""The limit for text that wraps such data in an envelope of its own (a provider's
response body or stream event, an event-log line, a checkpoint row): what was accepted
inside is still read back."""

MAX_JSON_DEPTH_LIMIT: Final = 200
"""The highest ``HarnessParams.max_json_depth`` accepted: pydantic's JSON parser (which
validates typed answers and tool arguments) reads no deeper than about 200 levels."""


STORED_JSON_DEPTH: Final = MAX_JSON_DEPTH_LIMIT + (WRAPPED_JSON_DEPTH - MAX_JSON_DEPTH)
"""The limit for what innerloop stored itself (an event-log line, a checkpoint row): a
run whose ``max_json_depth`` is the highest allowed still reads back what it accepted."""


def wrapped_depth(max_depth: int) -> int:
    """The limit for an envelope (a stream event, a response body) around data read with
    ``max_depth``."""
    return max_depth + (WRAPPED_JSON_DEPTH - MAX_JSON_DEPTH)


UNREADABLE: Final = "innerloop_unreadable_input"
"""The one key of a tool call's stand-in input when its arguments could not be read (too
deep): the call stays in the history, valid for every provider, and is answered with an
``is_error`` result (for ``final_result``: a repair), its tool never run."""

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
"""A string (skipped whole, brackets inside included) or a bracket."""
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_PAIRS = re.compile(r"\[\]|\{\}")


class JSONTooDeep(json.JSONDecodeError):
    """JSON text nested deeper than the limit; ``depth`` is how deep it got when refused
    (one past the limit), ``max_depth`` the limit."""

    def __init__(self, doc: str, pos: int, max_depth: int) -> None:
        self.max_depth = max_depth
        self.depth = max_depth + 1
        super().__init__(f"nested deeper than {max_depth} levels of arrays and objects", doc, pos)


def _too_deep_at(text: str, max_depth: int) -> int | None:
    """Where ``text`` first goes deeper than ``max_depth``; None if it never does."""
    if text.count("[") + text.count("{") <= max_depth:
        return None  # cannot go that deep: the common case costs two counts
    # the brackets alone; each pass takes away the innermost pairs, one level of all
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text) if '"' in text else text)
    for _ in range(max_depth):
        shorter = _PAIRS.sub("", brackets)
        if not shorter:
            return None
        if shorter == brackets:
            break  # unbalanced: the scan below says where, if anywhere
        brackets = shorter
    depth = 0
    for match in _TOKENS.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > max_depth:
                return match.start()
        elif char in "]}":
            depth -= 1
    return None


def parse_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, refusing text nested deeper than ``max_depth`` with
    :class:`JSONTooDeep` (a ``json.JSONDecodeError``); never a ``RecursionError``."""
    if isinstance(text, bytes | bytearray):
        text = text.decode()
    at = _too_deep_at(text, max_depth)
    if at is not None:
        raise JSONTooDeep(text, at, max_depth)
    try:
        return json.loads(text)
    except RecursionError:  # only with a limit near Python's own
        raise JSONTooDeep(text, 0, max_depth) from None


def json_depth(value: Any) -> int:
    """How deeply ``value``'s lists, tuples and mappings nest (a scalar is 0), without
    recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            deepest = max(deepest, depth)
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def unreadable_input(reason: str) -> dict[str, str]:
    """The stand-in input of a tool call whose arguments could not be read."""
    return {UNREADABLE: reason}


def unreadable_reason(arguments: Any) -> str | None:
    """Why a tool call's arguments could not be read, or None when they were."""
    if isinstance(arguments, dict) and len(arguments) == 1 and UNREADABLE in arguments:
        return str(arguments[UNREADABLE])
    return None
