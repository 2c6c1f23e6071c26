"""Fingerprints of what a run sends and keeps: pure functions, no I/O.

A model call is recorded in the event log by the fingerprint of its normalized request
(``model_call``), and a finished run by the fingerprint of its history (``finished``), so
a replay (``innerloop.testing.replay``) can check that it sends what was sent and ends
where the run ended, without the log holding every request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from innerloop._convert import unstructure
from innerloop._messages import Message
from innerloop.providers._normalize import WireRequest

__all__ = ["history_fingerprint", "request_fingerprint", "request_parts"]

_PART = 12
"""Hex digits kept of each part's hash: enough to tell parts apart, short in the log."""


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def request_fingerprint(request: WireRequest) -> str:
    """The sha256 (hex) of ``request``'s dialect and JSON body (model, system, messages,
    tools and every setting), keys sorted: equal for equal requests, in any process."""
    return _digest({"dialect": request.dialect, "payload": request.payload})


def request_parts(request: WireRequest) -> dict[str, str]:
    """A short hash of each top-level key of ``request``'s body (``model``, ``system``,
    ``messages``, ``tools``, ``max_tokens``...), so a changed request names what changed."""
    return {key: _digest(value)[:_PART] for key, value in sorted(request.payload.items())}


def history_fingerprint(history: Iterable[Message]) -> str:
    """The sha256 (hex) of a canonical history, in the event log's JSON form."""
    return _digest(unstructure(tuple(history), tuple[Message, ...]))
