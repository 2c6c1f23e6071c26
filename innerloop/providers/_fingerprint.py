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
from innerloop._history import History, Link, chain_of, extends, link_at
from innerloop._messages import Message, encodable
from innerloop.providers._normalize import WireMessage, WireRequest

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
        value = request.payload[key]
        whole.update(b"," if i else b"")
        whole.update(_text(key).encode())
        whole.update(b":")
        if key in ("messages", "input") and isinstance(value, list) and value:
            whole, part = _hash_items(value, whole)
        else:
            text = _text(value).encode()
            part = hashlib.sha256(text)
            whole.update(text)
        parts[key] = part.hexdigest()[:_PART]
    whole.update(b"}}")
    return whole.hexdigest(), parts


def _item_text(item: Any) -> bytes:
    if type(item) is not WireMessage:
        return _text(item).encode()
    if item.json is None:
        item.json = _text(item).encode()
    return item.json


def _hash_items(items: list[Any], whole: Any) -> tuple[Any, Any]:
    """``whole`` having read the JSON text of the list ``items`` (wire messages), and a
    hasher of that text alone, going on from where the last request that began alike
    left them: the first wire message keeps, with the digest of what ``whole`` had read
    before, the mark of the items read then and both hashers' states (up to its last kept
    wire message: later calls send those as they are). So a conversation's call hashes
    only its new messages. The mark is the link of that last item when ``items`` is a
    history of wire messages with its chain at hand (as ``build_request`` makes it, see
    ``innerloop._history``): a request goes on from it when its own chain walked back over
    its new items meets it; for another list, the items themselves, compared."""
    first = items[0]
    before = whole.copy().digest()
    head = items.head() if type(items) is History and items.knows() else None
    kept = first.prefix if type(first) is WireMessage else None
    start = 0
    if kept is not None and kept[0] == before and _goes_on(items, head, kept[1]):
        start = kept[1].size if type(kept[1]) is Link else len(kept[1])
        whole_state, part_state = kept[2].copy(), kept[3].copy()
    else:
        whole_state, part_state = whole.copy(), hashlib.sha256()
    stable = len(items)
    while stable > start and type(items[stable - 1]) is not WireMessage:
        stable -= 1
    for n in range(start, len(items)):
        text = (b"," if n else b"[") + _item_text(items[n])
        whole_state.update(text)
        part_state.update(text)
        if n + 1 == stable and type(first) is WireMessage:
            mark = items[:stable] if head is None else link_at(head, stable)
            first.prefix = (before, mark, whole_state.copy(), part_state.copy())
    whole_state.update(b"]")
    part_state.update(b"]")
    return whole_state, part_state


def _goes_on(items: list[Any], head: Link[Any] | None, mark: Any) -> bool:
    """Whether ``items`` (whose chain ends at ``head``, None when not at hand) begin with
    the items ``mark`` stands for (their link, or the items themselves)."""
    if type(mark) is Link:
        return head is not None and extends(head, mark)
    return len(mark) <= len(items) and items[: len(mark)] == mark


def _message_text(message: Message) -> bytes:
    """``message``'s JSON text in the event log's form, made once per message."""
    memo = message._memo
    text: bytes | None = memo.get("fingerprint")
    if text is None:
        text = memo["fingerprint"] = _text(unstructure(message, Message)).encode()
    return text


def history_fingerprint(history: Iterable[Message]) -> str:
    """The sha256 (hex) of a canonical history, in the event log's JSON form. The text of
    a list is its items' texts joined, so each message is serialized once; and the first
    message keeps the last history hashed (what stands for its messages, and the hasher's
    state), so a conversation's next fingerprint hashes only the messages added since. A
    run's history (``HarnessState.history``) tells that it goes on from the last one
    without comparing the messages before; another list is compared with them."""
    messages = history if isinstance(history, list | tuple) else list(history)
    if not messages:
        return hashlib.sha256(b"[]").hexdigest()
    memo = messages[0]._memo
    head = chain_of(messages)
    kept: tuple[Link[Message], Any] | None = memo.get("fingerprint.history")
    if kept is not None and extends(head, kept[0]):
        hasher, start = kept[1].copy(), kept[0].size
    else:
        hasher, start = hashlib.sha256(), 0
    for n in range(start, len(messages)):
        hasher.update((b"," if n else b"[") + _message_text(messages[n]))
    memo["fingerprint.history"] = (head, hasher.copy())
    hasher.update(b"]")
    digest: str = hasher.hexdigest()
    return digest
