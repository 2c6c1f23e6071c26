"""Answering from the page: a suspended run's question answered by the person looking at it.

An answer lands where ``innerloop runs resume RUN_ID --interrupt ID --answer JSON`` lands:
``harness.resume(run_id, Answer(interrupt_id, value))`` on the checkpoint store that keeps
the run, so it is bound to the question's id (an answer to another question, or to one no
longer asked, is refused) and taken once (the store's claim is atomic: a second answer to
the same question, from the page, the command line or another process, is refused). The
run then goes on, driven on a thread of its own to its end or its next question, writing
its checkpoints to the store (and, for a run of an event log, its events to the log), where
the page follows it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from innerloop._eventlog import EventLog
from innerloop._harness import Harness
from innerloop.fsm import Answer, Run

__all__ = ["Answers"]

STOP_SECONDS = 10.0
"""How long :meth:`Answers.close` waits for an answered run to stop once aborted."""


class Answers:
    """Resumes the runs ``harness``'s checkpoint store keeps with the answers the page
    sends: each lands in ``harness.resume(run_id, Answer(interrupt_id, value))``, bound to
    the question's id and taken once (the store's claim), and the run goes on, driven on a
    thread of its own to its end or its next question. ``harness`` is built as for
    ``innerloop runs resume``: the params, tools and providers the run was started with,
    its machine, and the store (``checkpointer=``)."""

    def __init__(self, harness: Harness[Any]) -> None:
        if harness.checkpointer is None:
            raise ValueError(
                "the live view answers a run through its checkpoint store: build the harness "
                "with checkpointer= the store the runs are kept in (e.g. 'sqlite:///runs.db')"
            )
        self.harness = harness
        self._lock = threading.Lock()
        self._going: list[tuple[Run[Any], threading.Thread]] = []

    def answer(self, run_id: str, interrupt_id: str, value: Any, log: Path | None = None) -> None:
        """Answer question ``interrupt_id`` of stored run ``run_id`` with ``value`` and let
        the run go on (its events appended to ``log`` when given);
        :class:`~innerloop.ResumeError` saying why when it cannot be (nothing answered)."""
        run = self.harness.resume(run_id, Answer(interrupt_id, value))
        thread = threading.Thread(
            target=_drive, args=(run, log), name=f"innerloop-ui-answer-{run_id}", daemon=True
        )
        with self._lock:
            self._going = [(r, t) for r, t in self._going if t.is_alive()]
            self._going.append((run, thread))
        thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every answered run stopped (ended or asked again); False when one
        still goes on after ``timeout`` seconds."""
        with self._lock:
            going = list(self._going)
        for _, thread in going:
            thread.join(timeout)
        return not any(t.is_alive() for _, t in going)

    def close(self) -> None:
        """Abort the answered runs still going (the server stops) and wait for them."""
        with self._lock:
            going = list(self._going)
        for run, _ in going:
            run.abort("the live view stopped")
        self.wait(STOP_SECONDS)


def _drive(run: Run[Any], log: Path | None) -> None:
    """Drive ``run`` to its end (or its next question); its events to ``log``."""
    if log is None:
        run.run_sync()
        return
    with EventLog(log, append=True) as events:
        for event in run.iter_sync():
            events.write(event)
