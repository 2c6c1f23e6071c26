"""A fake clock: sleeping advances time instantly, and every sleep is recorded."""

from __future__ import annotations

import asyncio

__all__ = ["FakeClock"]


class FakeClock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now}, sleeps={len(self.sleeps)})"
