"""Scripted providers: play replies and faults through the same stream events a real
provider emits. For tests (yours and ours) and the offline demo."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import attrs

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import (
    MessageComplete,
    ServerToolEvent,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop._messages import (
    Block,
    Message,
    ModelResponse,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.providers._normalize import WireRequest

__all__ = [
    "FakeProvider",
    "Fault",
    "Reply",
    "ScriptStep",
    "ScriptedProvider",
    "reply",
    "script_steps",
    "text",
    "thinking",
    "tool_call",
]


class ScriptStep:
    """The base of every step a script plays: :class:`Reply`, :class:`Fault` and the
    loopback servers' own steps. A list that mixes them (``[Fault.server_error(503),
    reply("hi")]``) is then a list of steps to a type checker, not of ``object``."""

    __slots__ = ()


def script_steps(
    script: Iterable[ScriptStep], kinds: tuple[type[ScriptStep], ...], player: str
) -> list[Any]:
    """``script`` as a list whose every step is one of ``kinds``, which ``player`` plays;
    a TypeError names the first step that is not."""
    steps = list(script)
    for i, step in enumerate(steps):
        if not isinstance(step, kinds):
            names = ", ".join(k.__name__ for k in kinds)
            raise TypeError(
                f"{player} cannot play step {i} of its script ({type(step).__name__}); "
                f"its steps are {names}"
            )
    return steps


def text(value: str) -> TextBlock:
    return TextBlock(value)


def thinking(value: str, signature: str = "sig") -> ThinkingBlock:
    return ThinkingBlock(value, signature)


def tool_call(
    name: str, input: dict[str, Any] | None = None, id: str | None = None
) -> ToolUseBlock:
    return ToolUseBlock(id or "", name, input or {})


@attrs.frozen
class Reply(ScriptStep):
    """A scripted model turn."""

    blocks: tuple[Block, ...]
    stop_reason: str
    usage: Usage
    model: str = ""
    incomplete_tool: tuple[str, str] | None = None
    """(name, partial JSON) of a tool call cut off at max_tokens, streamed but never completed."""


def reply(
    *blocks: Block | str,
    stop_reason: str | None = None,
    usage: Usage | None = None,
    model: str = "",
    incomplete_tool: tuple[str, str] | None = None,
) -> Reply:
    """A reply; ``stop_reason`` defaults to ``tool_use`` when it calls tools, else
    ``end_turn``."""
    bs = tuple(TextBlock(b) if isinstance(b, str) else b for b in blocks)
    if stop_reason is None:
        stop_reason = "tool_use" if any(isinstance(b, ToolUseBlock) for b in bs) else "end_turn"
    return Reply(bs, stop_reason, usage or Usage(10, 5), model, incomplete_tool)


@attrs.frozen
class Fault(ScriptStep):
    """A scripted failure. Faults with an HTTP status fail when the call opens; the others
    (malformed, empty, dropped) fail while streaming."""

    kind: str
    status: int | None = None
    retry_after: float | None = None
    message: str = ""
    after_events: int = 0

    @classmethod
    def rate_limited(cls, retry_after: float | None = None) -> Fault:
        return cls("rate_limited", 429, retry_after, "rate limit exceeded")

    @classmethod
    def overloaded(cls, retry_after: float | None = None) -> Fault:
        return cls("overloaded", 529, retry_after, "Overloaded")

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        return cls("server_error", status, None, "internal server error")

    @classmethod
    def malformed(cls) -> Fault:
        return cls("malformed", None, None, "malformed JSON in the stream")

    @classmethod
    def empty(cls) -> Fault:
        return cls("empty", None, None, "empty response")

    @classmethod
    def dropped(cls, after_events: int = 2) -> Fault:
        return cls("dropped", None, None, "connection dropped mid-stream", after_events)

    @classmethod
    def context_overflow(cls) -> Fault:
        return cls("context_overflow", 400, None, "prompt is too long")

    @classmethod
    def fatal(cls, status: int = 401, message: str = "invalid x-api-key") -> Fault:
        return cls("fatal", status, None, message)

    @classmethod
    def hang(cls) -> Fault:
        """Never answers (until cancelled): for abort tests."""
        return cls("hang")

    @property
    def category(self) -> ErrorCategory:
        return {
            "rate_limited": ErrorCategory.RATE_LIMITED,
            "overloaded": ErrorCategory.OVERLOADED,
            "context_overflow": ErrorCategory.CONTEXT_OVERFLOW,
            "fatal": ErrorCategory.FATAL,
        }.get(self.kind, ErrorCategory.TRANSIENT)

    @property
    def at_open(self) -> bool:
        return self.status is not None

    def error(self, provider: str) -> ProviderError:
        return ProviderError(
            self.category,
            self.message,
            provider=provider,
            status=self.status,
            retry_after=self.retry_after,
        )


Step = Reply | Fault
Handler = Callable[[WireRequest], Step | Awaitable[Step]]


def _chunks(s: str, size: int) -> list[str]:
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


class _ScriptedStream:
    def __init__(self, events: list[StreamEvent], fault: Fault | None, provider: str) -> None:
        self._events = events
        self._fault = fault
        self._provider = provider
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        fault = self._fault
        for i, event in enumerate(self._events):
            if fault is not None and i == fault.after_events:
                raise fault.error(self._provider)
            yield event
        if fault is not None:
            raise fault.error(self._provider)

    async def aclose(self) -> None:
        self.closed = True


class FakeProvider:
    """A provider answering each request with ``handler(request)`` (sync or async), which
    returns a :class:`Reply` or a :class:`Fault`.

    ``requests`` holds the last ``keep_requests`` requests, oldest first (each holds its
    whole history, so keeping every one of a long conversation grows memory with the
    square of its length); ``keep_requests=None`` keeps them all."""

    def __init__(
        self,
        handler: Handler,
        *,
        name: str = "scripted",
        dialect: str = "anthropic",
        model: str = "scripted-model-20250101",
        chunk_size: int = 16,
        keep_requests: int | None = 100,
    ) -> None:
        if keep_requests is not None and keep_requests < 0:
            raise ValueError(f"keep_requests must be 0 or more, or None, not {keep_requests}")
        self.keep_requests = keep_requests
        self.name = name
        self.dialect = dialect
        self.model = model
        self.chunk_size = chunk_size
        self.handler = handler
        self.requests: list[WireRequest] = []
        self._ids = itertools.count(1)

    async def open(self, request: WireRequest) -> _ScriptedStream:
        kept = self.requests
        kept.append(request)
        if self.keep_requests is not None and len(kept) > self.keep_requests:
            del kept[: len(kept) - self.keep_requests]
        step = self.handler(request)
        if inspect.isawaitable(step):
            step = await step
        if isinstance(step, Fault):
            if step.kind == "hang":
                await asyncio.Event().wait()
            if step.at_open:
                raise step.error(self.name)
            if step.kind == "empty":
                return _ScriptedStream([], step, self.name)
            return _ScriptedStream(self._events(reply("partial answer ...")), step, self.name)
        return _ScriptedStream(self._events(step, request), None, self.name)

    async def aclose(self) -> None:
        return None

    def _events(self, r: Reply, request: WireRequest | None = None) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        blocks: list[Block] = []
        for index, block in enumerate(r.blocks):
            if isinstance(block, TextBlock):
                events += [TextDelta(index, c) for c in _chunks(block.text, self.chunk_size)]
            elif isinstance(block, ThinkingBlock):
                events += [
                    ThinkingDelta(index, c) for c in _chunks(block.thinking, self.chunk_size)
                ]
            elif isinstance(block, ToolUseBlock):
                block = attrs.evolve(block, id=block.id or f"toolu_{next(self._ids):04d}")
                raw = json.dumps(block.input)
                events.append(ToolUseStart(index, block.id, block.name))
                events += [
                    ToolInputDelta(index, block.id, c) for c in _chunks(raw, self.chunk_size)
                ]
                events.append(ToolUseComplete(index, block))
            elif isinstance(block, ServerToolBlock):
                events.append(ServerToolEvent(index, block))
            blocks.append(block)
        incomplete: tuple[str, ...] = ()
        if r.incomplete_tool is not None:
            name, partial = r.incomplete_tool
            tid = f"toolu_{next(self._ids):04d}"
            index = len(r.blocks)
            events.append(ToolUseStart(index, tid, name))
            events.append(ToolInputDelta(index, tid, partial))
            incomplete = (tid,)
        response = ModelResponse(
            Message("assistant", tuple(blocks)),
            r.stop_reason,
            r.usage,
            r.model or (request.model if request is not None else "") or self.model,
            self.name,
            incomplete,
        )
        events.append(MessageComplete(response))
        return events


class ScriptedProvider(FakeProvider):
    """Plays ``script`` in order, one step per request. Running out of script is a fatal
    error naming how many steps were played."""

    def __init__(
        self,
        script: Iterable[ScriptStep],
        *,
        name: str = "scripted",
        dialect: str = "anthropic",
        model: str = "scripted-model-20250101",
        chunk_size: int = 16,
        keep_requests: int | None = 100,
    ) -> None:
        self.script: list[Step] = script_steps(script, (Reply, Fault), type(self).__name__)
        self.played = 0
        super().__init__(
            self._next,
            name=name,
            dialect=dialect,
            model=model,
            chunk_size=chunk_size,
            keep_requests=keep_requests,
        )

    def _next(self, request: WireRequest) -> Step:
        if self.played >= len(self.script):
            return Fault.fatal(
                400, f"script exhausted: all {len(self.script)} scripted steps were played"
            )
        step = self.script[self.played]
        self.played += 1
        return step
