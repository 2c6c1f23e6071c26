"""Closing what an event loop opened while that loop still runs."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable

__all__ = ["close_at_loop_end"]


def close_at_loop_end(
    owner: object, close: Callable[[], Awaitable[object]]
) -> asyncio.Task[None]:
    """A task on the running loop that waits for the loop's end, or for ``owner`` to be
    collected, whichever comes first, and then runs ``close``. ``asyncio.run`` (and
    ``asyncio.Runner``) cancel the tasks left at their end while the loop still runs, so
    connections are closed by the loop that opened them, instead of being left to the
    garbage collector once it is closed (``ResourceWarning: unclosed transport``, ``Event
    loop is closed``). Cancel the task to drop the duty (``aclose`` does).

    A loop keeps only a weak reference to its tasks: the task is held by a finalizer of
    ``owner`` while ``owner`` lives. An owner dropped without ``aclose`` (a provider
    built per request in a long-lived loop) has its task cancelled on its loop when it is
    collected, so ``close`` runs then and the task ends, instead of being destroyed
    pending (``Task was destroyed but it is pending!``, ``coroutine ignored
    GeneratorExit``). ``close`` must not hold ``owner`` (a bound method of it would keep
    it alive until the loop's end)."""
    loop = asyncio.get_running_loop()

    async def wait() -> None:
        try:
            await loop.create_future()
        finally:
            with contextlib.suppress(Exception):  # nothing is left to report it to
                await close()

    task = loop.create_task(wait(), name="innerloop: close connections at the loop's end")
    ending = weakref.finalize(owner, _cancel_on_its_loop, loop, task)
    ending.atexit = False  # at exit the loop is gone: nothing to run close on
    task.add_done_callback(lambda _: ending.detach())
    return task


def _cancel_on_its_loop(loop: asyncio.AbstractEventLoop, task: asyncio.Task[None]) -> None:
    """Cancel ``task`` from wherever the collector runs: the loop's ready queue holds it
    until it has run ``close``."""
    if task.done() or loop.is_closed():
        return
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(task.cancel)
