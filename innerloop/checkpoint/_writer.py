"""Writing checkpoints at the transitions the host chose, and reading them back."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from innerloop._convert import structure, unstructure
from innerloop._messages import Message
from innerloop.checkpoint._types import (
    Checkpoint,
    CheckpointCorrupt,
    Checkpointer,
    CheckpointInfo,
    CheckpointWrite,
    RunStatus,
    StoredRows,
)
from innerloop.fsm._spec import TransitionSpec
from innerloop.fsm._state import HarnessState

if TYPE_CHECKING:
    from innerloop.fsm._driver import Run

__all__ = ["CheckpointEvery", "CheckpointWriter", "decode", "run_status"]

CheckpointEvery = Literal["transition", "turn", "final"]
"""When to write: at every transition; when a turn starts (entering ``assemble``) and at
the end; or only at the end (a final state, ``suspended`` included)."""


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def run_status(state: HarnessState) -> RunStatus:
    if state.final_state is None:
        return "running"
    return "suspended" if state.final_state == "suspended" else "finished"


class CheckpointWriter:
    """A run's step hook (``Run(on_step=...)``) that writes a checkpoint to ``store`` at
    the transitions ``every`` picks.

    Only the messages added since the last checkpoint are written. When the history was
    rewritten (compaction), the whole new history is written once as a new segment and
    later checkpoints extend that one."""

    def __init__(
        self,
        store: Checkpointer,
        run_id: str,
        *,
        every: CheckpointEvery = "transition",
        turn_state: str = "assemble",
        seq: int = 0,
        segment_start: int = 0,
        segment: Sequence[Message] = (),
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.every = every
        self.turn_state = turn_state
        self.seq = seq
        self._start = segment_start
        self._segment = list(segment)
        self._next = segment_start + len(self._segment)

    def __call__(self, run: Run, transition: TransitionSpec) -> None:
        target = transition.target
        wanted = (
            self.every == "transition"
            or target in run.machine.finals
            or (self.every == "turn" and target == self.turn_state)
        )
        if wanted:
            self.save(run.state, target, transition.source, transition.guard)

    def _extends(self, history: Sequence[Message]) -> bool:
        """Is ``history`` the stored segment plus new messages? Messages are frozen, and
        every rewrite (compaction, a merged user message) makes new ones, so the first and
        the last stored message being the same objects tells."""
        seg, n = self._segment, len(self._segment)
        return len(history) >= n and (
            n == 0 or (history[0] is seg[0] and history[n - 1] is seg[n - 1])
        )

    def save(
        self, state: HarnessState, at: str, source: str | None = None, guard: str | None = None
    ) -> CheckpointInfo:
        """Write a checkpoint of ``state`` at state ``at`` now."""
        history = state.history
        start, stored = (
            (self._start, len(self._segment)) if self._extends(history) else (self._next, 0)
        )
        new = history[stored:]
        messages = [(start + stored + i, _dumps(unstructure(m))) for i, m in enumerate(new)]
        data = _dumps(unstructure(attrs.evolve(state, history=[])))
        info = CheckpointInfo(
            self.run_id, self.seq + 1, at, source, guard, start, len(history), time.time()
        )
        self.store.write(
            CheckpointWrite(
                info,
                data,
                messages,
                run_status(state),
                state.exit_reason,
                state.turns,
                state.cost_usd,
            )
        )
        if start != self._start or stored == 0:
            self._segment = []
        self._start = start
        self._segment.extend(new)
        self._next = max(self._next, start + len(history))
        self.seq = info.seq
        return info


def decode(rows: StoredRows) -> Checkpoint:
    """A checkpoint's rows read back; :class:`CheckpointCorrupt` naming what is wrong."""
    info = rows.info
    try:
        data = json.loads(rows.data)
        if not isinstance(data, dict):
            raise TypeError(f"its state is JSON {type(data).__name__}, not an object")
        if len(rows.messages) != info.history_len:
            raise ValueError(
                f"it names {info.history_len} messages from index {info.history_start}, "
                f"{len(rows.messages)} are stored"
            )
        history = [structure(json.loads(m), Message) for m in rows.messages]
        data["history"] = []
        state = structure(data, HarnessState)
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointCorrupt(info.run_id, info.seq, f"{type(exc).__name__}: {exc}") from exc
    state.history = history
    return Checkpoint(info, state)
