"""Writing checkpoints at the transitions the host chose, and reading them back."""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import operator
import time
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from innerloop._convert import structure, unstructure
from innerloop._history import History, Link, chain_of, extends, link_at
from innerloop._json import STORED_JSON_DEPTH, parse_json
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
from innerloop.fsm import _phases as phases
from innerloop.fsm._spec import TransitionSpec
from innerloop.fsm._state import HarnessState

if TYPE_CHECKING:
    from innerloop.fsm._compile import CompiledMachine
    from innerloop.fsm._driver import Run

__all__ = [
    "DEFERRED_PHASES",
    "CheckpointCommit",
    "CheckpointEvery",
    "CheckpointWriter",
    "decode",
    "run_status",
]

CheckpointEvery = Literal["transition", "turn", "final"]
"""When to write: at every transition; when a turn starts (entering ``assemble``) and at
the end; or only at the end (a final state, ``suspended`` included)."""

CheckpointCommit = Literal["barrier", "each"]
"""When a checkpoint is committed: ``"barrier"``, together with the next ones before the
next step with an external effect (group commit; see :class:`CheckpointWriter`), or
``"each"``, on its own before the next step starts."""

FULL_EVERY = 64
"""A whole checkpoint every this many; those between store what changed since the one
before, so reading any checkpoint reads at most this many rows."""

_ATOMS = (str, int, float, bool, type(None))


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""Compact JSON text (one encoder for every checkpoint: ``json.dumps`` with options builds
a new one per call)."""


def _holds_container(kind: Any) -> bool:
    """Is a value of type ``kind`` possibly a list or a dict (changed in place)?"""
    origin = typing.get_origin(kind)
    if origin in (list, dict):
        return True
    return origin in (typing.Union, types.UnionType) and any(
        _holds_container(arg) for arg in typing.get_args(kind)
    )


def _fields() -> tuple[attrs.Attribute[Any], ...]:
    """The state's fields a checkpoint keeps: those of its JSON form (not ``init=False``
    ones such as the typed ``output``), the history apart; those holding immutable values
    first, then those holding lists or dicts."""
    attrs.resolve_types(HarnessState)
    fields = [f for f in attrs.fields(HarnessState) if f.name != "history" and f.init]
    return tuple(sorted(fields, key=lambda f: _holds_container(f.type)))


_FIELDS = _fields()
_NAMES = tuple(f.name for f in _FIELDS)
_TYPES = tuple(f.type for f in _FIELDS)
_FIXED = range(sum(not _holds_container(t) for t in _TYPES))
_MUTABLE = range(len(_FIXED), len(_NAMES))
_VALUES = operator.attrgetter(*_NAMES)
"""The fields read in one call, as a tuple."""


def _snapshot(value: Any) -> Any:
    """A copy of a mutable value to compare the next checkpoint's against."""
    if isinstance(value, list):
        return list(value) if all(type(x) in _ATOMS for x in value) else copy.deepcopy(value)
    if isinstance(value, dict):
        if all(type(x) in _ATOMS for x in value.values()):
            return dict(value)
        return copy.deepcopy(value)
    return value  # immutable: attrs frozen classes, enums, scalars


class _StateCodec:
    """A run's state (without history) as JSON: whole, or as what changed since the last
    checkpoint. Only changed fields are converted, and a list that only grew stores its new
    items, so a checkpoint costs what the step changed: a step that changed nothing but
    the machine's state is an empty object.

    The fields are read in one ``attrgetter`` call and compared with what the last
    checkpoint saw (identity first: an unchanged scalar or frozen value is the same
    object); only a changed mutable value is copied again. This work was most of a
    checkpoint's Python time before (every field copied and compared by name each time).
    """

    def __init__(self) -> None:
        self._before: tuple[Any, ...] | None = None

    def reset(self) -> None:
        self._before = None

    def encode(self, state: HarnessState, whole: bool) -> tuple[str, bool]:
        now: tuple[Any, ...] = _VALUES(state)
        before = self._before
        if whole or before is None:
            self._before = tuple(map(_snapshot, now))
            full = {n: unstructure(v, t) for n, t, v in zip(_NAMES, _TYPES, now, strict=True)}
            return _dumps({"full": full}), True
        delta: dict[str, dict[str, Any]] = {}
        seen: list[Any] | None = None
        # C loops pick the candidates: the immutable values that are not the same object
        # as last time, and the lists and dicts unequal to their copies
        changed: Iterable[int] = itertools.compress(_FIXED, map(operator.is_not, now, before))
        k = len(_FIXED)
        if now[k:] != before[k:]:
            grown = itertools.compress(_MUTABLE, map(operator.ne, now[k:], before[k:]))
            changed = itertools.chain(changed, grown)
        for i in changed:
            value, old = now[i], before[i]
            if type(value) is type(old) and value == old:
                continue
            if seen is None:
                seen = list(before)
            seen[i] = _snapshot(value)
            name, kind = _NAMES[i], _TYPES[i]
            if isinstance(value, list) and isinstance(old, list):
                n = len(old)
                if len(value) > n and value[:n] == old:
                    delta.setdefault("append", {})[name] = unstructure(value[n:], kind)
                    continue
            delta.setdefault("set", {})[name] = unstructure(value, kind)
        if seen is not None:
            self._before = tuple(seen)
        return _dumps(delta), False


def _apply(chain: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """The whole state data from a base checkpoint and the deltas after it."""
    data: dict[str, Any] | None = None
    for seq, text in chain:
        item = parse_json(text, STORED_JSON_DEPTH)
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


DEFERRED_PHASES: frozenset[object] = frozenset(
    {
        phases.assemble,
        phases.normalize,
        phases.stream,
        phases.check,
        phases.backoff,
        phases.fallback,
    }
)
"""The handlers with no effect outside the run's state: a checkpoint on entering a state
one of them runs may wait for the next commit (``commit="barrier"``). ``assemble`` may ask
the provider to count tokens (a read); ``stream`` reads the answer of a call already made
(its checkpoint resumes at ``call`` anyway), and the tools it may start early are started
before any checkpoint names their call, as without deferral. Every other handler (a model
call, tools, a compactor, an abort, a custom state's) and every final state is a barrier."""


class CheckpointWriter:
    """A run's step hook (``Run(on_step=...)``) that writes a checkpoint to ``store`` at
    the transitions ``every`` picks.

    Only the messages added since the last checkpoint are written. When the history was
    rewritten (compaction), the whole new history is written once as a new segment and
    later checkpoints extend that one.

    ``commit="barrier"`` (the default) is group commit with a durability barrier: a
    checkpoint on entering a state whose handler has no external effect
    (:data:`DEFERRED_PHASES`) is encoded at once and committed together with the next
    ones, in one transaction, before the first handler that has one runs (a model call, a
    tool execution, a compaction, an abort, any custom state) and on entering a final
    state (``suspended`` included). So when such a handler starts, or ``run()`` returns,
    every checkpoint before it is committed (SQLite: durable across a crash of the process
    with ``synchronous=NORMAL``; PostgreSQL: a committed transaction); a crash loses only
    checkpoints of effect-free steps after the last barrier, which the resumed run makes
    again. On the default machine a turn commits twice (before ``call`` and before
    ``execute``) where ``commit="each"`` commits each of its six checkpoints: measured by
    ``bench/checkpoint.py``, the commits, not the encoding, were the cost (a round trip
    each on PostgreSQL). A failed commit raises from the step (the run fails with it);
    nothing of that group is stored.

    A store with an ``awrite`` (PostgreSQL) commits through it: the step hook returns the
    commit for the driver to await, so the event loop serves other runs during the round
    trip. Others (SQLite: a local commit) commit on the loop, in the step.
    """

    def __init__(
        self,
        store: Checkpointer,
        run_id: str,
        *,
        every: CheckpointEvery = "transition",
        commit: CheckpointCommit = "barrier",
        turn_state: str = "assemble",
        seq: int = 0,
        segment_start: int = 0,
        segment: Sequence[Message] = (),
    ) -> None:
        if commit not in ("barrier", "each"):
            raise ValueError(f"commit={commit!r}: use 'barrier' (group commit) or 'each'")
        self.store = store
        self.run_id = run_id
        self.every = every
        self.commit = commit
        self._awrite: Callable[[Sequence[CheckpointWrite]], Awaitable[None]] | None = getattr(
            store, "awrite", None
        )
        """The store's asynchronous write, when it has one: a run's step hook leaves the
        commit for the driver to await, the event loop free meanwhile."""
        self.turn_state = turn_state
        self.seq = seq
        self._start = segment_start
        self._segment = list(segment)
        self._link: Link[Message] | None = chain_of(segment) if segment else None
        """The link of the stored segment's last message: a history that goes on from it
        holds the segment unchanged (:meth:`_extends`)."""
        self._next = segment_start + len(self._segment)
        self._codec = _StateCodec()
        self._base = 0
        self._pending: list[CheckpointWrite] = []
        self._committed = self._mark()
        self._barrier: dict[str, bool] = {}

    def __call__(self, run: Run, transition: TransitionSpec) -> Awaitable[None] | None:
        target = transition.target
        final = target in run.machine.finals
        if (
            self.every == "transition"
            or final
            or (self.every == "turn" and target == self.turn_state)
        ):
            self._stage(run.state, target, transition.source, transition.guard)
        if self._pending and (final or self._is_barrier(run, target)):
            if self._awrite is not None:
                return self.aflush()
            self.flush()
        return None

    def within(
        self, run: Run, machine: CompiledMachine, transition: TransitionSpec
    ) -> Awaitable[None] | None:
        """A step of a child run of ``run`` (a child state's, a fan-out branch's, an agent
        tool's), whose ``machine`` took ``transition``; the child's state is already saved
        in ``run``'s notes. A checkpoint of ``run`` where it is, staged at the child's
        transitions ``every`` picks (every one, or its turns) and committed at the
        child's barriers (before its model calls and tool runs, and at its end), so a
        crash inside a child loses nothing and repeats none of its completed calls. Its
        ``source`` is None: it is no transition of ``run``'s own."""
        target = transition.target
        final = target in machine.finals
        if self.every == "transition" or (self.every == "turn" and target == self.turn_state):
            self._stage(run.state, run.current, None, None)
        if self._pending and (
            final or self.commit == "each" or machine.spec.handlers[target] not in DEFERRED_PHASES
        ):
            if self._awrite is not None:
                return self.aflush()
            self.flush()
        return None

    def _is_barrier(self, run: Run, state: str) -> bool:
        barrier = self._barrier.get(state)
        if barrier is None:
            barrier = (
                self.commit == "each" or run.machine.spec.handlers[state] not in DEFERRED_PHASES
            )
            self._barrier[state] = barrier
        return barrier

    def _extends(self, history: Sequence[Message]) -> bool:
        """Is ``history`` the stored segment plus new messages? Its chain going on from
        the segment's last link tells (a walk back over the messages added since); when
        the chains are not the same (a history made anew from equal messages, a resumed
        run's), the messages are compared by identity once and the chain taken on. Any
        change to a stored message, in place or by a rewrite (compaction, a merged user
        message, a host's redaction), makes it not so: a new segment is written."""
        seg, n = self._segment, len(self._segment)
        if n == 0:
            return True
        if len(history) < n:
            return False
        head = chain_of(history)
        if extends(head, self._link):
            return True
        if all(map(operator.is_, history, seg)):
            self._link = link_at(head, n)
            return True
        return False

    @property
    def pending(self) -> int:
        """Checkpoints encoded and not yet committed."""
        return len(self._pending)

    def save(
        self, state: HarnessState, at: str, source: str | None = None, guard: str | None = None
    ) -> CheckpointInfo:
        """Write a checkpoint of ``state`` at state ``at`` now (with any pending ones)."""
        info = self._stage(state, at, source, guard)
        self.flush()
        return info

    def flush(self) -> None:
        """Commit the pending checkpoints in one transaction. When that fails, none of
        them is stored and the writer goes back to the last committed one (the next
        checkpoint is a whole one), then the error is raised."""
        with self._committing() as pending:
            self.store.write(pending)

    async def aflush(self) -> None:
        """:meth:`flush` through the store's asynchronous write (its synchronous one when
        it has none)."""
        awrite = self._awrite
        if awrite is None:
            self.flush()
            return
        with self._committing() as pending:
            await awrite(pending)

    @contextlib.contextmanager
    def _committing(self) -> Iterator[list[CheckpointWrite]]:
        """The pending checkpoints, taken to be committed by the block: afterwards the
        last committed mark, or, when the block fails, the rollback to the one before."""
        pending, self._pending = self._pending, []
        try:
            yield pending
        except BaseException:
            self._rollback()
            raise
        self._committed = self._mark()

    def _mark(self) -> tuple[int, int, list[Message], int, Link[Message] | None, int, int]:
        segment = self._segment
        return (self.seq, self._start, segment, len(segment), self._link, self._next, self._base)

    def _rollback(self) -> None:
        self.seq, self._start, self._segment, n, self._link, self._next, self._base = (
            self._committed
        )
        del self._segment[n:]
        self._codec.reset()  # the next checkpoint is whole: nothing depends on a lost one

    def _stage(
        self, state: HarnessState, at: str, source: str | None, guard: str | None
    ) -> CheckpointInfo:
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
        self._pending.append(
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
        self._base = base
        if start != self._start or stored == 0:
            self._segment = []
        self._start = start
        self._segment.extend(new)
        self._link = chain_of(history) if history else None
        self._next = max(self._next, start + len(history))
        self.seq = seq
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
        history = [structure(parse_json(m, STORED_JSON_DEPTH), Message) for m in rows.messages]
        data["history"] = []
        state = structure(data, HarnessState)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CheckpointCorrupt(info.run_id, info.seq, f"{type(exc).__name__}: {exc}") from exc
    state.history = History(history)
    return Checkpoint(info, state)
