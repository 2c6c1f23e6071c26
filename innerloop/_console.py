"""What ``innerloop run`` and ``innerloop demo`` share: driving a run onto a view and a log,
the signals that abort it, and the screen's formatting.

SIGINT, SIGTERM and SIGHUP all mean "stop": while a run is driven they abort it (the run
cancels its tools, closes its history and ends in ``aborted``); outside a run (start-up,
the summary) :func:`signals_interrupt` turns them into :class:`Interrupted`, which the
command line reports in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from innerloop._boot import ABORT_SIGNALS

__all__ = [
    "ABORT_SIGNALS",
    "Interrupted",
    "drive",
    "format_cost",
    "signals_interrupt",
    "view_for",
]


class Interrupted(KeyboardInterrupt):
    """One of :data:`ABORT_SIGNALS` arrived while no run was being driven."""

    def __init__(self, signum: int) -> None:
        self.signame = signal.Signals(signum).name
        super().__init__(self.signame)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, the abort signals raise :class:`Interrupted` in the main thread
    (instead of killing the process, or a KeyboardInterrupt traceback); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in ABORT_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _abort_on_signals(
    loop: asyncio.AbstractEventLoop, abort: Callable[[str], None]
) -> dict[signal.Signals, Any]:
    """Route the abort signals to ``abort`` on ``loop``; returns the handlers replaced."""
    replaced: dict[signal.Signals, Any] = {}
    for sig in ABORT_SIGNALS:
        before = signal.getsignal(sig)
        try:
            loop.add_signal_handler(sig, abort, f"interrupted ({sig.name})")
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            break
        replaced[sig] = before
    return replaced


def _restore(loop: asyncio.AbstractEventLoop, replaced: dict[signal.Signals, Any]) -> None:
    for sig, handler in replaced.items():
        loop.remove_signal_handler(sig)  # this resets the signal to its default action
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


async def drive(
    run: Any, view: Any, log: Any, on_event: Callable[[Any], None] | None = None
) -> None:
    """Consume a run's events into a view and a log (and ``on_event``); SIGINT, SIGTERM
    and SIGHUP abort the run cleanly (its events, down to ``finished``, still arrive)."""
    loop = asyncio.get_running_loop()
    replaced = _abort_on_signals(loop, run.abort)
    try:
        async for event in run.events():
            if log is not None:
                log.write(event)
            view.handle(event)
            if on_event is not None:
                on_event(event)
    finally:
        _restore(loop, replaced)


def view_for(state: Any, no_live: bool) -> Any:
    """The live view in a terminal, plain lines otherwise (or with ``no_live``)."""
    from innerloop._live import LiveView, PlainView

    if no_live or not sys.stdout.isatty():
        return PlainView()
    return LiveView(state)


def format_cost(cost_usd: float | None) -> str:
    """A run's cost for the screen; unknown when a model had no price."""
    return f"${cost_usd:.6f}" if cost_usd is not None else "unknown (no price)"
