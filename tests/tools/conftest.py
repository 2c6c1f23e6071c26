"""Helpers for the tools tests: run calls without a model, pace a scripted stream, check
that a process is gone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from innerloop import HarnessParams, HarnessState
from innerloop._events import StreamEvent
from innerloop._messages import ToolUseBlock
from innerloop.fsm import PhaseContext
from innerloop.testing import FakeProvider, phase_context
from innerloop.tools import ToolCallResult, ToolRunner, ToolSpec


def fake_run(tools: Iterable[ToolSpec], **params: Any) -> PhaseContext:
    """A phase context over params with ``tools``, as the ``execute`` phase has one."""
    return phase_context(
        HarnessParams(model="scripted:m", tools=tuple(tools), **params), HarnessState()
    )


@pytest.fixture
def call_tools() -> Callable[..., list[ToolCallResult]]:
    """Run ``calls`` ((name, input) pairs) in one turn and return the results."""

    def call(
        tools: Iterable[ToolSpec],
        calls: Sequence[tuple[str, dict[str, Any]]],
        runner: ToolRunner | None = None,
        **params: Any,
    ) -> list[ToolCallResult]:
        run = fake_run(tools, **params)
        blocks = [ToolUseBlock(f"toolu_{i}", n, a) for i, (n, a) in enumerate(calls)]
        return list(asyncio.run((runner or ToolRunner()).run_calls(run, blocks)).results)

    return call


@pytest.fixture
def call_tool(call_tools: Callable[..., list[ToolCallResult]]) -> Callable[..., ToolCallResult]:
    """Run one call of ``name`` with ``args`` against ``tools``."""

    def call(
        tools: ToolSpec | Iterable[ToolSpec], name: str, args: dict[str, Any], **kw: Any
    ) -> ToolCallResult:
        specs = (tools,) if isinstance(tools, ToolSpec) else tuple(tools)
        return call_tools(specs, [(name, args)], **kw)[0]

    return call


class _PacedStream:
    def __init__(self, inner: Any, delay: float, log: list[tuple[str, float]]) -> None:
        self.inner, self.delay, self.log = inner, delay, log

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        async for event in self.inner:
            await asyncio.sleep(self.delay)
            self.log.append((event.type, time.monotonic()))
            yield event

    async def aclose(self) -> None:
        await self.inner.aclose()


class PacedProvider(FakeProvider):
    """A FakeProvider that waits ``delay`` seconds before each stream event and logs when
    each event was emitted, as a network stream would."""

    def __init__(self, handler: Any, delay: float, **kw: Any) -> None:
        super().__init__(handler, chunk_size=1 << 20, **kw)
        self.delay = delay
        self.log: list[tuple[str, float]] = []

    async def open(self, request: Any) -> Any:
        return _PacedStream(await super().open(request), self.delay, self.log)


@pytest.fixture
def paced() -> type[PacedProvider]:
    return PacedProvider


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


@pytest.fixture
def gone() -> Callable[[int], bool]:
    """``gone(pid)``: the process disappears within a second."""

    def check(pid: int) -> bool:
        deadline = time.monotonic() + 1.0
        while process_alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    return check
