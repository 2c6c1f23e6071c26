"""Closing what an event loop opened while that loop still runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

__all__ = ["close_at_loop_end"]


def close_at_loop_end(
    close: Callable[[], Awaitable[object]], keep: set[asyncio.Task[None]]
) -> asyncio.Task[None]:
    """A task on the running loop that waits for the loop's end and then runs ``close``.
    ``asyncio.run`` (and ``asyncio.Runner``) cancel the tasks left at their end while the
    loop still runs, so connections are closed by the loop that opened them, instead of
    being left to the garbage collector once it is closed (``ResourceWarning: unclosed
    transport``, ``Event loop is closed``). Cancel the task to drop the duty.

    A loop keeps only a weak reference to its tasks: the task is held in ``keep`` (its
    owner's) until it is done, so a collection while its loop still runs (a ``with
    harness:`` block's loop between runs, when another loop was adopted since) cannot
    destroy it pending and drop the duty."""
    loop = asyncio.get_running_loop()

    async def wait() -> None:
        try:
            await loop.create_future()
        finally:
            with contextlib.suppress(Exception):  # nothing is left to report it to
                await close()

    task = loop.create_task(wait(), name="innerloop: close connections at the loop's end")
    keep.add(task)
    task.add_done_callback(keep.discard)
    return task
