"""A fake clock: sleeping advances time instantly, every sleep is recorded, and backoff
jitter is seeded (or off)."""

from __future__ import annotations

import asyncio
import random

__all__ = ["FakeClock"]


class FakeClock:
    def __init__(self, start: float = 0.0, *, seed: int | None = None) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._random = random.Random(seed) if seed is not None else None

    def jitter(self) -> float:
        """The share of a computed backoff wait to use: 1.0 (no jitter, the schedule as
        written) unless the clock was given a ``seed``, then a seeded draw in (0, 1]."""
        if self._random is None:
            return 1.0
        return 1.0 - self._random.random()

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now}, sleeps={len(self.sleeps)})"
