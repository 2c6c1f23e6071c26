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
from innerloop._messages import Message, encodable
from innerloop.providers._normalize import WireRequest

__all__ = ["history_fingerprint", "request_digests", "request_fingerprint", "request_parts"]

_PART = 12
"""Hex digits kept of each part's hash: enough to tell parts apart, short in the log."""


def _text(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return encodable(text)  # a lone surrogate (a model's "\\ud800") hashed as its escape


def _digest(data: Any) -> str:
    return hashlib.sha256(_text(data).encode()).hexdigest()


def request_fingerprint(request: WireRequest) -> str:
    """The sha256 (hex) of ``request``'s dialect and JSON body (model, system, messages,
    tools and every setting), keys sorted: equal for equal requests, in any process."""
    return request_digests(request)[0]


def request_parts(request: WireRequest) -> dict[str, str]:
    """A short hash of each top-level key of ``request``'s body (``model``, ``system``,
    ``messages``, ``tools``, ``max_tokens``...), so a changed request names what changed."""
    return request_digests(request)[1]


def request_digests(request: WireRequest) -> tuple[str, dict[str, str]]:
    """``(request_fingerprint(request), request_parts(request))`` serializing the body
    once: the whole request's JSON text is its keys' texts joined, so each value's text
    serves its part's hash and the whole's (the same digests as hashing each apart)."""
    whole = hashlib.sha256(b'{"dialect":')
    whole.update(_text(request.dialect).encode())
    whole.update(b',"payload":{')
    parts: dict[str, str] = {}
    for i, key in enumerate(sorted(request.payload)):
        text = _text(request.payload[key]).encode()
        parts[key] = hashlib.sha256(text).hexdigest()[:_PART]
        whole.update(b"," if i else b"")
        whole.update(_text(key).encode())
        whole.update(b":")
        whole.update(text)
    whole.update(b"}}")
    return whole.hexdigest(), parts


def history_fingerprint(history: Iterable[Message]) -> str:
    """The sha256 (hex) of a canonical history, in the event log's JSON form."""
    return _digest(unstructure(tuple(history), tuple[Message, ...]))
