"""Rerun a stored run from one of its checkpoints with other params (another model,
prompt, tools or machine) and compare the two: path, output, turns, tokens, cost,
recoveries."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from innerloop._errors import ResumeError
from innerloop._harness import Harness
from innerloop.checkpoint import (
    Checkpointer,
    CheckpointInfo,
    UnknownRunError,
    decode,
    open_checkpointer,
)
from innerloop.evals._report import render_text
from innerloop.evals._summary import RunSummary, Step, transitions
from innerloop.evals._sync import run_outside_a_loop
from innerloop.fsm._state import HarnessState

__all__ = ["RunComparison", "compare_fork", "rerun", "rerun_sync"]


def _steps(infos: Sequence[CheckpointInfo]) -> tuple[Step, ...]:
    return tuple(Step(i.source, i.state, i.guard) for i in infos if i.source is not None)


@attrs.frozen
class RunComparison:
    """A stored run and its rerun from checkpoint ``at``, side by side. Both summaries
    count turns, tokens and cost from the run's start (the part before the checkpoint is
    the same in both); their paths start at the checkpoint."""

    run_id: str
    at: int
    state: str
    """The state checkpoint ``at`` entered."""
    shared: tuple[Step, ...]
    """The path up to the checkpoint, which both runs took."""
    original: RunSummary
    rerun: RunSummary

    def divergence(self) -> int | None:
        """The index in both paths of the first step that differs (None when the paths
        are the same)."""
        a, b = self.original.path, self.rerun.path
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return i
        return None if len(a) == len(b) else min(len(a), len(b))

    @property
    def same_output(self) -> bool:
        return bool(self.original.output == self.rerun.output)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "at": self.at,
            "state": self.state,
            "shared": [[s.source, s.target, s.guard] for s in self.shared],
            "divergence": self.divergence(),
            "same_output": self.same_output,
            "original": self.original.to_dict(),
            "rerun": self.rerun.to_dict(),
        }

    def __rich__(self) -> RenderableType:
        title = (
            f"rerun of {self.run_id} from checkpoint {self.at} (entering {self.state!r}, "
            f"after {len(self.shared)} shared transitions)"
        )
        table = Table(title=title, title_justify="left")
        table.add_column("")
        table.add_column(f"original ({self.original.run_id})", overflow="fold")
        table.add_column(f"rerun ({self.rerun.run_id})", overflow="fold")
        a, b = self.original, self.rerun
        rows = [
            ("exit reason", a.exit_reason or "-", b.exit_reason or "-"),
            ("turns", str(a.turns), str(b.turns)),
            ("tokens", _tokens(a), _tokens(b)),
            ("cost", _cost(a.cost_usd), _cost(b.cost_usd)),
            ("seconds", _secs(a.seconds), _secs(b.seconds)),
            ("recoveries", str(a.recoveries), str(b.recoveries)),
            ("output", _clip(a.output), _clip(b.output)),
        ]
        for name, left, right in rows:
            style = "" if left == right else "yellow"
            table.add_row(name, Text(left, style=style), Text(right, style=style))
        at = self.divergence()
        table.add_row("path", _path(a.path, at), _path(b.path, at))
        verdict = (
            "same path" if at is None else f"paths differ from step {at + 1} after the checkpoint"
        )
        return Group(
            table, Text(verdict + ("; same output" if self.same_output else "; outputs differ"))
        )

    def __str__(self) -> str:
        return render_text(self)


def _tokens(s: RunSummary) -> str:
    u = s.usage
    return f"{u.total_tokens:,} (in {u.input_tokens:,}, out {u.output_tokens:,})"


def _cost(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:.4f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _clip(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _path(path: Sequence[Step], at: int | None) -> Text:
    if not path:
        return Text("-")
    lines = [
        Text(f"{i + 1}. {step}", style="bold yellow" if i == at else "")
        for i, step in enumerate(path)
    ]
    return Text("\n").join(lines)


def _stored(store: Checkpointer, run_id: str, at: int) -> tuple[RunSummary, list[CheckpointInfo]]:
    """A stored run from its checkpoint ``at`` on (its path after it, its latest state),
    and its checkpoints."""
    infos = store.checkpoints(run_id)
    if not 1 <= at <= len(infos):
        raise UnknownRunError(run_id, at, len(infos))
    last = decode(store.rows(run_id))
    took = infos[-1].created - infos[at - 1].created
    return RunSummary.of(last.state, _steps(infos[at:]), seconds=took, run_id=run_id), infos


def compare_fork(store: Checkpointer | str | Path, run_id: str) -> RunComparison:
    """A stored fork (a rerun, ``Harness.fork``) beside the run it was forked from, both
    read from ``store``: nothing runs. ``UnknownRunError`` when the store lacks it,
    ``ValueError`` when it is no fork."""
    if isinstance(store, str | Path):
        store = open_checkpointer(store)
    info = next((r for r in store.runs() if r.run_id == run_id), None)
    if info is None:
        raise UnknownRunError(run_id)
    if info.parent_run_id is None or info.parent_seq is None:
        raise ValueError(
            f"run {run_id!r} is no fork (it has no parent run); compare a run made by "
            "rerun or fork, or rerun this one"
        )
    at = info.parent_seq
    original, infos = _stored(store, info.parent_run_id, at)
    again, _ = _stored(store, run_id, 1)
    shared = _steps(infos[:at])
    return RunComparison(info.parent_run_id, at, infos[at - 1].state, shared, original, again)


def _on_store(harness: Harness[Any], store: Checkpointer) -> Harness[Any]:
    """``harness`` built again on ``store``: each other ``Harness.__init__`` argument is
    read back from the attribute of its name (params, providers, machine, services), so a
    new argument kept under its own name is carried without a change here."""
    names = list(inspect.signature(Harness.__init__).parameters)[1:]  # after self
    given = {name: getattr(harness, name) for name in names}
    return Harness(**{**given, "checkpointer": store})


async def rerun(
    harness: Harness[Any],
    run_id: str,
    *,
    at: int = 1,
    edit: Callable[[HarnessState[Any]], HarnessState[Any] | None] | None = None,
    store: Checkpointer | str | Path | None = None,
    new_run_id: str | None = None,
) -> RunComparison:
    """Run ``run_id`` again from its checkpoint ``at`` (1, the first, by default: the
    whole run) on ``harness`` (built with the params to try: another model, system prompt,
    tools or machine), and compare it with the stored run. ``edit(state)`` may change the
    state first (another user prompt). The run is read from ``store`` (default: the
    harness's checkpoint store); the rerun is stored there as a fork of it. The stored
    run's path is what its checkpoints recorded (every transition with the default
    ``checkpoint_every="transition"``)."""
    if isinstance(store, str | Path):
        store = open_checkpointer(store)
    if store is not None and store is not harness.checkpointer:
        harness = _on_store(harness, store)
    if harness.checkpointer is None:
        raise ResumeError(
            run_id,
            "a rerun reads the run from a checkpoint store; pass store='sqlite:///runs.db' "
            "(or a Checkpointer), or build the Harness with checkpointer=",
        )
    original, infos = _stored(harness.checkpointer, run_id, at)
    started = time.perf_counter()
    run = harness.fork(run_id, at=at, edit=edit, new_run_id=new_run_id)
    path = await transitions(run)
    again = RunSummary.of(run.state, path, seconds=time.perf_counter() - started, run_id=run.run_id)
    return RunComparison(run_id, at, infos[at - 1].state, _steps(infos[:at]), original, again)


def rerun_sync(
    harness: Harness[Any],
    run_id: str,
    *,
    at: int = 1,
    edit: Callable[[HarnessState[Any]], HarnessState[Any] | None] | None = None,
    store: Checkpointer | str | Path | None = None,
    new_run_id: str | None = None,
) -> RunComparison:
    """:func:`rerun` for code without an event loop (it raises inside one: there,
    ``await rerun(...)``)."""
    return run_outside_a_loop(
        rerun(harness, run_id, at=at, edit=edit, store=store, new_run_id=new_run_id), "rerun"
    )
