"""The typed answer as it streams: :class:`PartialOutput` follows one model turn and
turns its answer's prefix into :class:`~innerloop.events.OutputDelta` events.

The answer is the turn's text (native structured output) or the input of a
``final_result`` call (the final-result tool). Its prefix is parsed by pydantic's partial
JSON mode (``pydantic_core.from_json(..., allow_partial="trailing-strings")``, jiter inside):
what is complete so far, plus the string being written, cut where it stands; an unfinished
literal or key is left out until it is whole, and a prefix ending in a digit is not parsed
(the number may go on: jiter would read ``21`` of ``21.5``).

Cost: parsing the whole prefix at every delta would be quadratic in the answer's length
(a 3.4 kB answer streamed in 4-byte deltas: about 15 µs a delta). The prefix is parsed
only once the bytes not parsed yet reach ``max(FIRST_STEP, parsed // STEP_FRACTION)``, so
each received byte pays for at most about ``STEP_FRACTION`` bytes of parsing (linear in
the answer), small answers are still parsed every ``FIRST_STEP`` bytes, and the end of the
answer is always parsed (the complete call's input, or the text when the turn ends). A
delta is yielded only when the parsed data differ from the last one yielded.

The final value is not this: ``check`` validates the whole answer as before.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import pydantic_core

from innerloop._events import (
    OutputDelta,
    StreamEvent,
    TextDelta,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop._json import unreadable_reason
from innerloop.providers._normalize import OUTPUT_TOOL

__all__ = ["FIRST_STEP", "STEP_FRACTION", "PartialOutput"]

FIRST_STEP: Final = 16
"""Bytes of answer received before the first parse, and the least between two parses."""
STEP_FRACTION: Final = 16
"""A parse waits for at least ``1/STEP_FRACTION`` of what was parsed before to arrive."""


class PartialOutput:
    """Follows one model turn's answer; :meth:`feed` each stream event, then
    :meth:`finish` when the turn is complete. Each returns an :class:`OutputDelta` when
    the answer parsed so far changed, else None.

    ``text``: the turn's text is the answer (the model was asked natively).
    ``tool``: a ``final_result`` call is the answer (a model of the chain is asked through
    the tool); once one starts, the turn's text is no longer followed.
    """

    __slots__ = ("_call", "_index", "_last", "_next", "_parsed", "_parts", "_size", "_text")

    def __init__(self, *, text: bool, tool: bool) -> None:
        self._text = text
        self._call: str | None = "" if tool else None
        """The followed final-result call's id; "" before one starts; None: not asked."""
        self._index = 0
        self._parts: list[str] = []
        self._size = 0
        self._parsed = 0
        self._next = FIRST_STEP
        self._last: dict[str, Any] | None = None

    def feed(self, event: StreamEvent) -> OutputDelta | None:
        """The delta ``event`` brings, if the answer parsed so far changed."""
        if isinstance(event, TextDelta):
            if self._text and not self._call:
                return self._add(event.index, event.text)
        elif isinstance(event, ToolInputDelta):
            if self._call and event.id == self._call:
                return self._add(event.index, event.partial_json)
        elif isinstance(event, ToolUseStart):
            if self._call is not None and event.name == OUTPUT_TOOL:
                self._start(event.index, event.id)
        elif isinstance(event, ToolUseComplete):
            call = event.tool_use
            if self._call and call.id == self._call:
                self._parts, self._size, self._parsed = [], 0, 0
                if unreadable_reason(call.input) is None:  # a copy: the history keeps its own
                    return self._changed(copy.deepcopy(call.input))
        return None

    def finish(self) -> OutputDelta | None:
        """The last delta of the turn: its whole answer parsed, if anything is left."""
        return self._parse() if self._size > self._parsed else None

    def _start(self, index: int, call_id: str) -> None:
        """Follow the final-result call ``call_id`` from now on (the last one is taken)."""
        self._call, self._index = call_id, index
        self._parts, self._size, self._parsed = [], 0, 0
        self._next, self._last = FIRST_STEP, None

    def _add(self, index: int, chunk: str) -> OutputDelta | None:
        self._index = index
        self._parts.append(chunk)
        self._size += len(chunk)
        if self._size < self._next or chunk[-1:].isdigit():
            return None  # a number at the end may go on: parsed at the next delta
        self._next = self._size + max(FIRST_STEP, self._size // STEP_FRACTION)
        return self._parse()

    def _parse(self) -> OutputDelta | None:
        text = "".join(self._parts)
        self._parts, self._parsed = [text], self._size
        try:
            data = pydantic_core.from_json(text, allow_partial="trailing-strings")
        except ValueError:  # not JSON (prose), or nested past jiter's own limit
            return None
        if not isinstance(data, dict):
            return None
        return self._changed(data)

    def _changed(self, data: dict[str, Any]) -> OutputDelta | None:
        if data == self._last:
            return None
        self._last = data
        return OutputDelta(self._index, data, self._call or None)
