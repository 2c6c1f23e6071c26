"""Writing checkpoints at the transitions the host chose, and reading them back."""

from __future__ import annotations

import copy
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


FULL_EVERY = 64
"""A whole checkpoint every this many; those between store what changed since the one
before, so reading any checkpoint reads at most this many rows."""

_ATOMS = (str, int, float, bool, type(None))


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _fields() -> tuple[attrs.Attribute[Any], ...]:
    """The state's fields a checkpoint keeps: those of its JSON form (not ``init=False``
    ones such as the typed ``output``), the history apart."""
    attrs.resolve_types(HarnessState)
    return tuple(f for f in attrs.fields(HarnessState) if f.name != "history" and f.init)


_FIELDS = _fields()


def _snapshot(value: Any) -> Any:
    """A copy of a mutable value to compare the next checkpoint's against."""
    if isinstance(value, list):
        return list(value) if all(type(x) in _ATOMS for x in value) else copy.deepcopy(value)
    if isinstance(value, dict):
        if all(type(x) in _ATOMS for x in value.values()):
            return dict(value)
        return copy.deepcopy(value)
    return value  # immutable: attrs frozen classes, enums, scalars


def _same(value: Any, before: Any) -> bool:
    return value is before or (type(value) is type(before) and value == before)


class _StateCodec:
    """A run's state (without history) as JSON: whole, or as what changed since the last
    checkpoint. Only changed fields are converted, and a list that only grew stores its new
    items, so a checkpoint costs what the step changed."""

    def __init__(self) -> None:
        self._before: dict[str, Any] | None = None

    def reset(self) -> None:
        self._before = None

    def encode(self, state: HarnessState, whole: bool) -> tuple[str, bool]:
        before = self._before
        now = {f.name: getattr(state, f.name) for f in _FIELDS}
        self._before = {name: _snapshot(value) for name, value in now.items()}
        if whole or before is None:
            full = {f.name: unstructure(now[f.name], f.type) for f in _FIELDS}
            return _dumps({"full": full}), True
        changed: dict[str, Any] = {}
        grown: dict[str, Any] = {}
        for f in _FIELDS:
            value, old = now[f.name], before[f.name]
            if _same(value, old):
                continue
            if isinstance(value, list) and isinstance(old, list):
                n = len(old)
                if len(value) > n and value[:n] == old:
                    grown[f.name] = unstructure(value[n:], f.type)
                    continue
            changed[f.name] = unstructure(value, f.type)
        delta: dict[str, Any] = {}
        if changed:
            delta["set"] = changed
        if grown:
            delta["append"] = grown
        return _dumps(delta), False


def _apply(chain: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """The whole state data from a base checkpoint and the deltas after it."""
    data: dict[str, Any] | None = None
    for seq, text in chain:
        item = json.loads(text)
        if not isinstance(item, dict):
            raise TypeError(f"checkpoint {seq} holds JSON {type(item).__name__}, not an object")
        if data is None:
            if "full" not in item:
                raise ValueError(f"its base checkpoint {seq} is not a whole one")
            data = dict(item["full"])
            continue
        data.update(item.get("set", {}))
        for name, items in item.get("append", {}).items():
            data[name] = [*data.get(name, []), *items]
    if data is None:
        raise ValueError("its state row is missing")
    return data


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
        self._codec = _StateCodec()
        self._base = 0

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
        seq = self.seq + 1
        data, whole = self._codec.encode(state, whole=seq - self._base >= FULL_EVERY)
        base = seq if whole else self._base
        info = CheckpointInfo(self.run_id, seq, at, source, guard, start, len(history), time.time())
        try:
            self.store.write(
                CheckpointWrite(
                    info,
                    data,
                    base,
                    messages,
                    run_status(state),
                    state.exit_reason,
                    state.turns,
                    state.cost_usd,
                )
            )
        except BaseException:
            self._codec.reset()  # the next checkpoint is whole: nothing depends on this one
            raise
        self._base = base
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
        data = _apply(rows.data)
        if len(rows.messages) != info.history_len:
            raise ValueError(
                f"it names {info.history_len} messages from index {info.history_start}, "
                f"{len(rows.messages)} are stored"
            )
        history = [structure(json.loads(m), Message) for m in rows.messages]
        data["history"] = []
        state = structure(data, HarnessState)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CheckpointCorrupt(info.run_id, info.seq, f"{type(exc).__name__}: {exc}") from exc
    state.history = history
    return Checkpoint(info, state)
