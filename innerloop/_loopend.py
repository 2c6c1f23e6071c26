"""Closing what an event loop opened while that loop still runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

__all__ = ["close_at_loop_end"]


def close_at_loop_end(close: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
    """A task on the running loop that waits for the loop's end and then runs ``close``.
    ``asyncio.run`` (and ``asyncio.Runner``) cancel the tasks left at their end while the
    loop still runs, so connections are closed by the loop that opened them, instead of
    being left to the garbage collector once it is closed (``ResourceWarning: unclosed
    transport``, ``Event loop is closed``). Cancel the task to drop the duty."""
    loop = asyncio.get_running_loop()

    async def wait() -> None:
        try:
            await loop.create_future()
        finally:
            with contextlib.suppress(Exception):  # nothing is left to report it to
                await close()

    return loop.create_task(wait(), name="innerloop: close connections at the loop's end")
