"""Clocks: every wait in innerloop goes through one, so tests can skip time."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import attrs

__all__ = ["Clock", "ScaledClock", "SystemClock"]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; cancellable."""
        ...


@attrs.frozen
class SystemClock:
    """Real time."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


@attrs.frozen
class ScaledClock:
    """Real time, with every wait multiplied by ``factor`` (the demo uses 0.01)."""

    factor: float

    def monotonic(self) -> float:
        return time.monotonic() / self.factor

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0) * self.factor)
