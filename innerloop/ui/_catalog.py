"""The runs the page can show: those of a folder of event logs and those of a checkpoint
store, each under one id (``log:FILE:N``, the N-th run of a log; ``db:RUN_ID``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from innerloop._eventlog import split_runs
from innerloop.checkpoint import Checkpointer, RunInfo
from innerloop.diagrams import build_diagram, render
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._locate import MachineNotFound, MachineRecord, find_machine
from innerloop.fsm._spec import MachineSpec
from innerloop.ui._logs import LogFile, is_log
from innerloop.ui._store import store_detail, store_summary
from innerloop.ui._view import run_detail, run_summary

__all__ = ["Catalog", "UnknownRun"]

SVG_CACHE = 32
"""Rendered diagrams kept (the oldest goes first)."""


class UnknownRun(LookupError):
    """No run with that id in the folder or the store."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(
            f"no run {run_id!r}: ids are log:FILE:N (the N-th run of an event log in the "
            "runs folder) or db:RUN_ID (a run of the checkpoint store); GET /api/runs lists them"
        )


def _initial(events: Sequence[Any]) -> str:
    """Where a logged run started (its ``run_started`` line says; else the default
    machine's initial state)."""
    first = events[0] if events else {}
    state = first.get("state") if first.get("type") == "run_started" else None
    return state if isinstance(state, str) else DEFAULT_SPEC.initial


class Catalog:
    """Runs from ``runs_dir`` (every ``*.jsonl`` below it, read as they grow), from the
    log ``files`` named (by their file name) and from ``store``. Each run is drawn on the
    machine it recorded: one of ``machines`` (matched by name and fingerprint), else the
    spec at the import path it recorded, else the default machine when it is that one;
    a run whose machine cannot be found says so (``machine_error``) and is not drawn.
    Safe to use from several threads."""

    def __init__(
        self,
        runs_dir: Path | None = None,
        store: Checkpointer | None = None,
        machines: Sequence[MachineSpec | CompiledMachine] = (),
        *,
        files: Sequence[Path] = (),
    ) -> None:
        self.runs_dir = runs_dir
        self.files = tuple(files)
        self.store = store
        self.machines = tuple(m.spec if isinstance(m, CompiledMachine) else m for m in machines)
        self.initial = DEFAULT_SPEC.initial
        self._logs: dict[Path, LogFile] = {}
        self._lock = threading.Lock()
        self._svg: dict[tuple[Any, ...], bytes] = {}
        self._stored: dict[tuple[Any, ...], dict[str, Any]] = {}
        """The last stored run's detail, read again only once it has a new checkpoint."""

    # -- logs ----------------------------------------------------------------------------

    def _log_paths(self) -> dict[str, Path]:
        """Every log by its name in run ids."""
        paths = {p.name: p for p in self.files}
        if self.runs_dir is not None:
            found = sorted(p for p in self.runs_dir.rglob("*.jsonl") if is_log(p))
            paths.update((p.relative_to(self.runs_dir).as_posix(), p) for p in found)
        return paths

    def _log_files(self) -> list[tuple[str, LogFile]]:
        return [(name, self._log(path)) for name, path in self._log_paths().items()]

    def _log(self, path: Path) -> LogFile:
        """The log at ``path``, read up to now."""
        with self._lock:
            log = self._logs.setdefault(path, LogFile(path))
            log.refresh()
            return log

    def _named_log(self, name: str) -> LogFile | None:
        """The log of a run id, found without listing the folder (a live stream asks
        for it ten times a second)."""
        named = {p.name: p for p in self.files}
        if name in named:
            return self._log(named[name])
        if self.runs_dir is None:
            return None
        path = self.runs_dir / name
        inside = path.resolve().is_relative_to(self.runs_dir.resolve())
        return self._log(path) if inside and is_log(path) else None

    def _log_entries(self, name: str, log: LogFile) -> list[dict[str, Any]]:
        runs = split_runs(log.events)
        base = {"source": "log", "file": name, "error": log.problem, "updated": log.mtime}
        if not runs:
            status = "error" if log.error else "running"
            empty = run_summary([], self.initial)
            return [{**empty, **base, "id": f"log:{name}:1", "status": status}]
        return [
            {**run_summary(events, _initial(events)), **base, "id": f"log:{name}:{n}"}
            for n, events in enumerate(runs, start=1)
        ]

    def _log_run(self, run_id: str) -> tuple[LogFile, list[Any]]:
        _, _, rest = run_id.partition(":")
        name, _, number = rest.rpartition(":")
        if not (number.isdigit() or number == "last"):
            raise UnknownRun(run_id)
        log = self._named_log(name)
        if log is None:
            raise UnknownRun(run_id)
        runs = split_runs(log.events) or [[]]
        n = len(runs) if number == "last" else int(number)
        if not 1 <= n <= len(runs):
            raise UnknownRun(run_id)
        return log, runs[n - 1]

    # -- the store -------------------------------------------------------------------------

    def _store_runs(self) -> list[RunInfo]:
        if self.store is None:
            return []
        with self._lock:
            return self.store.runs()

    def _store_run(self, run_id: str) -> RunInfo:
        found = [r for r in self._store_runs() if f"db:{r.run_id}" == run_id]
        if not found:
            raise UnknownRun(run_id)
        return found[0]

    # -- what the server asks --------------------------------------------------------------

    def runs(self) -> list[dict[str, Any]]:
        """Every run, logs first (by file, in order), then the store's (latest first)."""
        out = [e for name, log in self._log_files() for e in self._log_entries(name, log)]
        out += [
            {
                **store_summary(r),
                "id": f"db:{r.run_id}",
                "source": "db",
                "file": None,
                "error": None,
            }
            for r in self._store_runs()
        ]
        return out

    def detail(self, run_id: str) -> dict[str, Any]:
        """Everything the page shows of one run; :class:`UnknownRun` when there is none."""
        if run_id.startswith("log:"):
            log, events = self._log_run(run_id)
            detail = run_detail(events, _initial(events))
            if not events and log.error:
                detail["status"] = "error"
            machine = self._machine_fields(MachineRecord.from_events(events), run_id)
            return {**detail, **machine, "id": run_id, "source": "log", "error": log.problem}
        if run_id.startswith("db:") and self.store is not None:
            info = self._store_run(run_id)
            with self._lock:
                key = (info.run_id, info.checkpoints, info.updated)
                cached = self._stored.get(key)
                if cached is None:
                    record = self.store.machine(info.run_id)
                    machine = self._machine_fields(record, run_id)
                    cached = {**store_detail(self.store, info), **machine}
                detail = cached
                self._stored = {key: detail}
            return {**detail, "id": run_id, "source": "db", "error": None}
        raise UnknownRun(run_id)

    def _machine_fields(self, record: MachineRecord | None, run_id: str) -> dict[str, Any]:
        """What the page says of a run's machine: its name and fingerprint, and why it
        cannot be drawn (``machine_error``), if it cannot."""
        try:
            spec = find_machine(record, self.machines, what=f"run {run_id}")
        except MachineNotFound as exc:
            name = record.name if record else None
            return {"machine": name, "fingerprint": None, "machine_error": str(exc)}
        error = None
        if record is None and not self.machines:
            error = f"run {run_id} recorded no machine (an older innerloop): drawn on {spec.name!r}"
        return {"machine": spec.name, "fingerprint": spec.fingerprint, "machine_error": error}

    def _machine(self, run_id: str) -> MachineSpec:
        """The machine run ``run_id`` recorded; :class:`MachineNotFound` when not at hand."""
        if run_id.startswith("log:"):
            record = MachineRecord.from_events(self._log_run(run_id)[1])
        elif self.store is not None:
            record = self.store.machine(self._store_run(run_id).run_id)
        else:
            raise UnknownRun(run_id)
        return find_machine(record, self.machines, what=f"run {run_id}")

    def diagram(self, run_id: str) -> bytes:
        """The machine's SVG with the run's trace on it (edge counts, path to the exit)."""
        detail = self.detail(run_id)
        machine = self._machine(run_id)
        steps = [(s["source"], s["target"], s["guard"]) for s in detail["transitions"]]
        final = detail["current"] if detail["status"] == "finished" else None
        key = (machine.name, machine.fingerprint, tuple(steps), final, detail["exit_reason"])
        with self._lock:
            cached = self._svg.get(key)
        if cached is not None:
            return cached
        trace = [{"type": "transition", "source": s, "target": t, "guard": g} for s, t, g in steps]
        if final is not None:
            trace.append(
                {"type": "finished", "final_state": final, "exit_reason": detail["exit_reason"]}
            )
        svg = render(build_diagram(machine, trace=trace), "svg")
        with self._lock:
            self._svg[key] = svg
            while len(self._svg) > SVG_CACHE:  # a live run makes a new picture per step
                del self._svg[next(iter(self._svg))]
        return svg

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
