"""The tree of runs: a run and its child runs (sub-agents, fan-out branches, agent tools,
handoffs, all the way down), each with its path, machine, the states it took, how it
ended, its turns, tokens and cost, and what it waits on when it is suspended.

One shape from three sources, which agree for the same run: a live :class:`Run` (the
child runs it ran, and the runs it was resumed from), a checkpoint store (each checkpoint
of the run, and the children's progress saved in its notes at each of their
transitions), and an event log (its ``run_started``, ``transition`` and ``finished``
events, a child's wrapped in ``child_event`` with its path). Stores and logs are data:
nothing named in them is imported or called; the tree holds names as text.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, final

import attrs

from innerloop import _convert
from innerloop._errors import ConversionError
from innerloop._eventlog import iter_event_log
from innerloop._events import Event
from innerloop._messages import Usage
from innerloop.checkpoint import Checkpointer, decode, open_checkpointer
from innerloop.fsm._child import ChildSnapshot, snapshot, states_taken
from innerloop.fsm._driver import Run
from innerloop.fsm._interrupts import CHILD_RUNS
from innerloop.fsm._state import HarnessState, Interrupt

__all__ = ["RunTree"]


@final
@attrs.frozen
class RunTree:
    """A run and its child runs, as data.

    Build it with :meth:`of` (a live ``Run``), :meth:`from_store` (a stored run) or
    :meth:`from_log` (an event log); print it with :meth:`format`."""

    path: str
    """The run's path from the top run down (``survey/web#2``); ``""`` for the top run."""
    machine: str
    """The name of the machine it ran on."""
    states: tuple[tuple[str, ...], ...]
    """The states it took, one tuple per stretch: its start, then each transition's
    target; a run resumed (after an answer, a crash, a conversation's next message)
    starts a new stretch where it went on."""
    exit_reason: str | None
    """How it ended; None while it has not (it runs, or it was cut off)."""
    turns: int
    usage: Usage
    cost_usd: float | None
    """Its cost in USD; None once a model without a price answered. A run's turns,
    usage and cost count its children's."""
    waits_on: Interrupt | None = None
    """What it waits for when it is suspended (an approval, a question; ``path`` names
    the child that asked); None otherwise."""
    children: tuple[RunTree, ...] = ()
    """Its child runs, by path (a fan-out's branches in input order)."""
    run_id: str | None = None
    """The top run's id in a checkpoint store (None without one, and for a child)."""

    @property
    def tokens(self) -> int:
        return self.usage.total_tokens

    def walk(self) -> Iterator[RunTree]:
        """This run, then each run below it, depth first, in order."""
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, path: str) -> RunTree:
        """The run at ``path`` in this tree (``""``: this one); ``KeyError`` naming the
        paths there are otherwise."""
        for run in self.walk():
            if run.path == path:
                return run
        there = ", ".join(repr(r.path) for r in self.walk())
        raise KeyError(f"no run at path {path!r} in this tree; its paths: {there}")

    # -- the three sources -------------------------------------------------------------------

    @classmethod
    def of(cls, run: Run[Any]) -> RunTree:
        """The tree of a live run (one from ``harness.start``, ``resume`` or a session),
        ended or suspended: its own transitions and those of the runs it was resumed
        from (``harness.resume(run, ...)`` given the ``Run``), and every child run it
        ran, as they stand now."""
        chain: list[Run[Any]] = []
        at: Run[Any] | None = run
        while at is not None:
            chain.append(at)
            at = at.resumed_from
        fold = _Fold(run.run_id)
        for each in reversed(chain):
            fold.stretch("", each.machine.name, states_taken(each.path))
            _live_children(fold, each)
        fold.ended("", run.state)
        return fold.tree()

    @classmethod
    def from_store(cls, store: Checkpointer | str | Path, run_id: str) -> RunTree:
        """The tree of a stored run, read from its checkpoints (a store, or a URL or
        path for :func:`~innerloop.checkpoint.open_checkpointer`, opened and closed
        here). Its states and its children's are those its checkpoints saw: all of them
        with ``checkpoint_every="transition"`` (the default); with ``"turn"`` or
        ``"final"``, fewer. A stored conversation holds one stretch per message."""
        if not isinstance(store, str | Path):
            return _stored(store, run_id)
        opened = open_checkpointer(store)
        try:
            return _stored(opened, run_id)
        finally:
            opened.close()

    @classmethod
    def from_log(
        cls,
        log: str | Path | Iterable[Mapping[str, Any] | Event],
        run: int | str | None = None,
    ) -> RunTree:
        """The tree of a run of an event log (a path, the dicts of
        :func:`~innerloop.read_event_log`, or events). A log may hold several runs
        (``innerloop demo`` writes three to one): ``run`` picks one (its number from 1,
        ``"last"`` or its run id); a resumed run's events (a ``run_started`` of the
        same run id, or one going on after an answer) belong to the run they continue.
        A run that has not ended shows the totals it started with."""
        where = str(log) if isinstance(log, str | Path) else "the events"
        lines = iter_event_log(log) if isinstance(log, str | Path) else log
        runs: list[_Fold] = []
        for item in lines:
            line = item.to_dict() if isinstance(item, Event) else item
            if line.get("type") == "run_started" and not _continues(runs, line):
                runs.append(_Fold(_text_or_none(line.get("run_id"))))
            if runs:
                runs[-1].read("", line)
        return _picked(runs, run, where).tree()

    # -- the printer -------------------------------------------------------------------------

    def format(self, *, name: str | None = None, width: int = 100) -> str:
        """The tree as text: per run, a line with its label, machine, how it ended, its
        turns, tokens and cost, then its states (a line per stretch, wrapped at
        ``width``) and what it waits on, each child indented under its parent::

            research [research]: model_complete, 6 turns, 90 tokens, $0.000198
              states: idle -> survey -> suspended
              resumed: survey -> assemble -> normalize -> call -> stream -> check ->
                write -> model_complete
              scout#1 [scout]: model_complete, 2 turns, 30 tokens, $0.000009
                states: idle -> assemble -> ...

        ``name`` labels the top run (default: its run id, else ``run``); a child is
        labelled by its path's last level."""
        lines: list[str] = []
        for run in self.walk():
            pad = "  " * (run.path.count("/") + 1 if run.path else 0)
            label = run.path.rpartition("/")[2] if run.path else (name or self.run_id or "run")
            end = run.exit_reason or "not ended"
            turns = f"{run.turns} turn{'' if run.turns == 1 else 's'}"
            cost = f"${run.cost_usd:.6f}" if run.cost_usd is not None else "cost unknown"
            lines.append(
                f"{pad}{label} [{run.machine}]: {end}, {turns}, {run.tokens} tokens, {cost}"
            )
            for i, states in enumerate(run.states or (("(no transition)",),)):
                lines += textwrap.wrap(
                    f"{'resumed' if i else 'states'}: {' -> '.join(states)}",
                    width,
                    initial_indent=f"{pad}  ",
                    subsequent_indent=f"{pad}    ",
                    break_on_hyphens=False,
                )
            asked = run.waits_on
            if asked is not None:
                who = f" (asked by {asked.path})" if asked.path else ""
                named = f" {asked.id!r}" if asked.id else ""
                lines.append(f"{pad}  waits on: {asked.kind}{named} in {asked.state}{who}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


# -- folding a source into the tree ----------------------------------------------------------


@attrs.define
class _Node:
    machine: str = "?"
    states: list[list[str]] = attrs.Factory(list)
    end: tuple[str | None, int, Usage, float | None, Interrupt | None] = (
        None,
        0,
        Usage(),
        0.0,
        None,
    )


class _Fold:
    """The runs of a tree by path, as a source tells them."""

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.nodes: dict[str, _Node] = {}

    def _node(self, path: str, machine: str | None = None) -> _Node:
        node = self.nodes.setdefault(path, _Node())
        if machine is not None:
            node.machine = machine
        return node

    def stretch(self, path: str, machine: str, states: Sequence[str]) -> None:
        """A stretch of the run at ``path`` (one that took no transition is none)."""
        node = self._node(path, machine)
        if len(states) > 1:
            node.states.append(list(states))

    def seen(self, path: str, machine: str, states: Sequence[str]) -> None:
        """The current stretch of the run at ``path`` as a checkpoint saw it: the same
        stretch gone further, or a new one."""
        node = self._node(path, machine)
        last = node.states[-1] if node.states else None
        if last is not None and states[: len(last)] == last:
            last[:] = states
        elif len(states) > 1:
            node.states.append(list(states))

    def ended(self, path: str, state: HarnessState[Any] | ChildSnapshot) -> None:
        """What the run at ``path`` stands at: ``state`` (or a child's snapshot)."""
        asked = state.interrupt if state.final_state == "suspended" else None
        self._node(path).end = (
            state.exit_reason if state.final_state is not None else None,
            state.turns,
            state.usage,
            state.cost_usd,
            _plain(asked),
        )

    def read(self, path: str, line: Mapping[str, Any]) -> None:
        """One line of an event log (a child's, unwrapped, at its ``path``)."""
        kind = line.get("type")
        if kind == "child_event":
            inner, below = line.get("event"), line.get("path")
            if isinstance(inner, Mapping) and isinstance(below, str) and below:
                self.read(f"{path}/{below}" if path else below, inner)
        elif kind == "run_started":
            node = self._node(path, str(line.get("machine", "?")))
            node.states.append([str(line.get("state", "?"))])
            if node.end[0] is None:  # not ended: what it started with
                node.end = (None, _int(line.get("turns")), _usage(line), _cost(line), None)
        elif kind == "transition" and path in self.nodes and self.nodes[path].states:
            self.nodes[path].states[-1].append(str(line.get("target", "?")))
        elif kind == "finished":
            final = line.get("final_state")
            asked = line.get("interrupt") if final == "suspended" else None
            self._node(path).end = (
                _text_or_none(line.get("exit_reason")),
                _int(line.get("turns")),
                _usage(line),
                _cost(line),
                _interrupt(asked),
            )

    def tree(self, path: str = "") -> RunTree:
        node = self.nodes.get(path) or _Node()
        below = [p for p in self.nodes if p and p.rpartition("/")[0] == path]
        exit_reason, turns, usage, cost, asked = node.end
        return RunTree(
            path,
            node.machine,
            tuple(tuple(s) for s in node.states if len(s) > 1),
            exit_reason,
            turns,
            usage,
            cost,
            asked,
            tuple(self.tree(p) for p in sorted(below, key=_natural)),
            self.run_id if not path else None,
        )


def _live_children(fold: _Fold, run: Run[Any]) -> None:
    for child in run.scope.children or ():
        _snapshot(fold, snapshot(child))


def _snapshot(fold: _Fold, child: ChildSnapshot) -> None:
    """A child run as its parent keeps it once it ended (or as it stands), and its own."""
    fold.stretch(child.path, child.machine, child.taken)
    fold.ended(child.path, child)
    for below in child.children:
        _snapshot(fold, below)


def _stored(store: Checkpointer, run_id: str) -> RunTree:
    record = store.machine(run_id)
    if record is not None:
        machine = record.name
    else:  # a run stored before runs recorded their machine
        machine = next((r.machine for r in store.runs() if r.run_id == run_id), "?")
    fold = _Fold(run_id)
    root = fold._node("", machine)
    state: HarnessState[Any] | None = None
    for info in store.checkpoints(run_id):
        state = decode(store.rows(run_id, info.seq)).state
        last = root.states[-1] if root.states else None
        if last is not None and info.source == last[-1]:
            last.append(info.state)
        elif info.source is not None:  # it went on from elsewhere: resumed
            root.states.append([info.source, info.state])
        elif last is None or info.state != last[-1]:  # started (a run, a message)
            root.states.append([info.state])
        _saved_children(fold, "", state.notes)
    if state is not None:
        fold.ended("", state)
    return fold.tree()


def _saved_children(fold: _Fold, above: str, notes: Mapping[str, Any]) -> None:
    """The children's runs saved in ``notes`` (and theirs, all the way down)."""
    kept = notes.get(CHILD_RUNS)
    for segment, saved in (kept if isinstance(kept, Mapping) else {}).items():
        if not isinstance(saved, Mapping):
            continue
        try:
            child: HarnessState[Any] = _convert.structure(saved.get("state"), HarnessState)
        except (ConversionError, TypeError, ValueError):
            continue  # damaged: left out
        path = f"{above}/{segment}" if above else str(segment)
        taken = saved.get("taken")
        states = [str(s) for s in taken] if isinstance(taken, list) else []
        fold.seen(path, str(saved.get("machine", "?")), states)
        fold.ended(path, child)
        _saved_children(fold, path, child.notes)


def _continues(runs: list[_Fold], line: Mapping[str, Any]) -> bool:
    """Does this top-level ``run_started`` go on with the log's last run (its run id,
    or, without ids, a run going on after an answer or a stop)?"""
    if not runs:
        return False
    run_id, last = _text_or_none(line.get("run_id")), runs[-1].run_id
    if run_id is not None or last is not None:
        return run_id == last
    return line.get("resumed") is not None


def _picked(runs: list[_Fold], run: int | str | None, where: str) -> _Fold:
    count = len(runs)
    if not runs:
        raise ValueError(f"{where} holds no run (no run_started event)")
    ids = [f.run_id for f in runs]
    if run is None and count > 1:
        raise ValueError(
            f"{where} holds {count} runs; pick one with run=N (1 to {count}), run='last' "
            "or its run id"
        )
    if run is None or run == "last":
        return runs[-1]
    if isinstance(run, int) and 1 <= run <= count:
        return runs[run - 1]
    if isinstance(run, str) and run in ids:
        return runs[ids.index(run)]
    raise ValueError(f"{where} has no run {run!r}: its runs are 1 to {count}, 'last' or an id")


def _natural(path: str) -> list[Any]:
    """Sort key: ``web#2`` before ``web#10``, level by level."""
    return [
        [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", level)]
        for level in path.split("/")
    ]


def _plain(asked: Interrupt | None) -> Interrupt | None:
    """``asked`` as its JSON form reads back (lists, not tuples), as a store or a log
    holds it, so a live tree and a read one compare equal."""
    if asked is None:
        return None
    return _interrupt(json.loads(json.dumps(_convert.unstructure(asked, Interrupt))))


def _interrupt(data: Any) -> Interrupt | None:
    if not isinstance(data, Mapping):
        return None
    try:
        return _convert.structure(data, Interrupt)
    except (ConversionError, TypeError, ValueError):
        return None


def _usage(line: Mapping[str, Any]) -> Usage:
    try:
        return _convert.structure(line.get("usage"), Usage)
    except (ConversionError, TypeError, ValueError):
        return Usage()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _cost(line: Mapping[str, Any]) -> float | None:
    value = line.get("cost_usd")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
