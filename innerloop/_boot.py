"""The command line's first moments: its abort signals handled before the heavy imports.

``innerloop run`` (or ``python -m innerloop run``) spends its first fraction of a second
importing the SDKs; a SIGINT then would print a ``KeyboardInterrupt`` traceback, a
SIGTERM would kill it with no word. The package imports this leaf module first, and
importing it calls :func:`early_signals`: when the process is innerloop's own command
line (``sys.argv`` is ``-m`` and one of its commands while Python locates
``innerloop.__main__``, or ``sys.argv[0]`` is the ``innerloop`` script), each abort
signal then prints one line and exits 4, as an interrupted run does. ``cli.main`` puts
its own handlers in their place once it starts. A process that merely imports
innerloop (a host, a durable worker) keeps its signal handlers.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Final

__all__ = ["ABORTED_EXIT", "ABORT_SIGNALS", "early_signals", "is_command_line"]

ABORT_SIGNALS: Final[tuple[signal.Signals, ...]] = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
)
"""The signals that abort a run (Ctrl-C, ``kill``, a closed terminal)."""
ABORTED_EXIT: Final = 4
"""The exit code of an aborted run (``innerloop.cli.EXIT_CODES["aborted"]``)."""
COMMANDS: Final = frozenset({"run", "runs", "demo", "diagram", "ui"})


def is_command_line(argv: Sequence[str]) -> bool:
    """Is this process innerloop's command line, judging by ``argv`` as the package is
    imported?"""
    if not argv:
        return False
    if argv[0] == "-m":  # python -m innerloop run ...: Python is locating innerloop.__main__
        return len(argv) > 1 and argv[1] in COMMANDS  # not -m innerloop.durable, say
    name = os.path.basename(argv[0])
    return name in ("innerloop", "innerloop.exe")


def _program(argv: Sequence[str]) -> str:
    command = argv[1] if len(argv) > 1 and argv[1] in COMMANDS else None
    return f"innerloop {command}" if command else "innerloop"


def _exit_now(signum: int, frame: FrameType | None) -> None:
    """Nothing is open yet: say which signal, and leave with the aborted exit code."""
    name = signal.Signals(signum).name
    os.write(2, f"{_program(sys.argv)}: interrupted by {name}\n".encode())
    os._exit(ABORTED_EXIT)


def early_signals(argv: Sequence[str] | None = None) -> bool:
    """On innerloop's command line, in the main thread, replace the default action of
    each abort signal (a handler of the host's own is left alone) with one line and exit
    4; True when it did."""
    argv = sys.argv if argv is None else argv
    if not is_command_line(argv) or threading.current_thread() is not threading.main_thread():
        return False
    for sig in ABORT_SIGNALS:
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _exit_now)
    return True


early_signals()
