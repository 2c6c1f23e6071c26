"""The runs the page can show: those of a folder of event logs and those of a checkpoint
store, each under one id (``log:FILE:N``, the N-th run of a log; ``db:RUN_ID``), and the
child runs of each (machines inside machines), each under its run's id and its path
(``survey/web#2``)."""

from __future__ import annotations

import math
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from innerloop.checkpoint import Checkpointer, RunInfo, decode, store_errors
from innerloop.diagrams import build_diagram, render
from innerloop.diagrams._model import child_machines
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._locate import MachineNotFound, MachineRecord, find_machine
from innerloop.fsm._spec import MachineSpec
from innerloop.ui._logs import LogFile, is_log
from innerloop.ui._store import StoredChild, store_detail, store_summary
from innerloop.ui._view import LISTS, PROMPT_CHARS, RunFold, cut, message_text

__all__ = ["Catalog", "UnknownChild", "UnknownRun"]

PROMPTS_KEPT = 10_000
"""The stored runs' first words kept (read once each)."""

SVG_CACHE = 32
"""Rendered diagrams kept (the oldest goes first)."""

PAGE = 500
"""The rows of each list a run's detail carries (its latest ones); the API pages the rest."""


class UnknownRun(LookupError):
    """No run with that id in the folder or the store."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(
            f"no run {run_id!r}: ids are log:FILE:N (the N-th run of an event log in the "
            "runs folder) or db:RUN_ID (a run of the checkpoint store); GET /api/runs lists them"
        )


class UnknownChild(UnknownRun):
    """The run has no child run at that path."""

    def __init__(self, run_id: str, path: str) -> None:
        self.run_id = run_id
        self.path = path
        LookupError.__init__(
            self,
            f"run {run_id!r} has no child run {path!r}: ?child= names the path of one of "
            "its child runs (the run's detail lists them under children)",
        )


def _nested(spec: MachineSpec) -> list[MachineSpec]:
    """The machines ``spec``'s states run as children (and theirs, all the way down)."""
    found: list[MachineSpec] = []
    for state in spec.handlers:
        for _, compiled in child_machines(spec, state):
            if compiled.spec not in found:
                found.append(compiled.spec)
                found += [s for s in _nested(compiled.spec) if s not in found]
    return found


def _named_child(spec: MachineSpec, path: str) -> MachineSpec | None:
    """The machine of ``spec``'s child that the last level of ``path`` names (a fan-out
    branch ``web#2`` by ``web``; each child of a fan-out over several by its own name),
    looked for all the way down."""
    last = path.rpartition("/")[2].partition("#")[0]
    for state in spec.handlers:
        for name, compiled in child_machines(spec, state):
            if name == last:
                return compiled.spec
            deeper = _named_child(compiled.spec, path)
            if deeper is not None:
                return deeper
    return None


class StoredView:
    """A stored run's detail, read the way a log's :class:`RunFold` is."""

    def __init__(self, detail: dict[str, Any]) -> None:
        self.lists = {kind: detail.get(kind, []) for kind in LISTS}
        self._summary = {k: v for k, v in detail.items() if k not in LISTS}
        self.error: str | None = None

    def summary(self) -> dict[str, Any]:
        return self._summary

    def count(self, kind: str) -> int:
        return len(self.lists[kind])

    def items(self, kind: str, start: int, stop: int) -> list[Any]:
        return list(self.lists[kind][start:stop])


View = RunFold | StoredView


def _paged(view: View, limit: int = PAGE) -> dict[str, Any]:
    """The summary, the latest ``limit`` rows of each list and each list's ``total``."""
    lists = {k: view.items(k, max(0, view.count(k) - limit), view.count(k)) for k in LISTS}
    return {**view.summary(), **lists, "totals": {k: view.count(k) for k in LISTS}}


class Catalog:
    """Runs from ``runs_dir`` (every ``*.jsonl`` below it, read as they grow), from the
    log ``files`` named (by their file name) and from ``store``. Each run is drawn on the
    machine it recorded: one of ``machines`` (matched by name and fingerprint), else the
    default machine when it is that one. Logs and stores are data: the import path a run
    recorded is never imported, only named in the ``machine_error`` of a run whose machine
    is not at hand (the page says which ``--spec`` to pass), and that run is not drawn.
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
        self._prompts: dict[str, str | None] = {}
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
        base = {"source": "log", "file": name, "updated": log.mtime}
        if not log.runs:
            status = "error" if log.error else "running"
            empty = RunFold(self.initial).summary()
            entry = {**empty, **base, "error": log.problem, "status": status, "started": None}
            return [{**entry, "id": f"log:{name}:1"}]
        return [
            {
                **r.summary(),
                **base,
                "started": _started(log, r),
                "error": r.error or log.problem,
                "id": f"log:{name}:{n}",
            }
            for n, r in enumerate((run.fold for run in log.runs), start=1)
        ]

    def _log_run(self, run_id: str) -> tuple[LogFile, int, RunFold]:
        """The log, number and view of a log's run (the latest for ``:last``)."""
        _, _, rest = run_id.partition(":")
        name, _, number = rest.rpartition(":")
        if not (number.isdigit() or number == "last"):
            raise UnknownRun(run_id)
        log = self._named_log(name)
        if log is None:
            raise UnknownRun(run_id)
        if not log.runs:
            if number not in ("1", "last"):
                raise UnknownRun(run_id)
            return log, 1, RunFold(self.initial)
        n = len(log.runs) if number == "last" else int(number)
        if not 1 <= n <= len(log.runs):
            raise UnknownRun(run_id)
        with self._lock:
            return log, n, log.view(log.runs[n - 1])

    # -- the store -------------------------------------------------------------------------

    def _store_runs(self) -> list[RunInfo]:
        if self.store is None:
            return []
        with self._lock:
            try:
                return self.store.runs()
            except store_errors():
                return []  # the page lists the logs' runs; the store's error is each run's

    def _store_run(self, run_id: str) -> RunInfo:
        found = [r for r in self._store_runs() if f"db:{r.run_id}" == run_id]
        if not found:
            raise UnknownRun(run_id)
        return found[0]

    # -- what the server asks --------------------------------------------------------------

    def runs(self, offset: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs ``offset`` to ``offset + limit`` (all by default), logs first (by file, in
        order), then the store's (latest first)."""
        out = [e for name, log in self._log_files() for e in self._log_entries(name, log)]
        out += [self._store_entry(r) for r in self._store_runs()]
        return out[offset : None if limit is None else offset + limit]

    def _store_entry(self, info: RunInfo) -> dict[str, Any]:
        """A stored run's line in the list: its summary, machine, start and prompt."""
        return {
            **store_summary(info),
            "id": f"db:{info.run_id}",
            "source": "db",
            "file": None,
            "error": None,
            "machine": info.machine,
            "started": info.created,
            "prompt": self._stored_prompt(info.run_id),
        }

    def _stored_prompt(self, run_id: str) -> str | None:
        """The first words of a stored run's prompt (its first checkpoint's first user
        message), read once per run."""
        with self._lock:
            if run_id in self._prompts:
                return self._prompts[run_id]
        assert self.store is not None
        try:
            first = self.store.checkpoints(run_id)[:1]
            state = decode(self.store.rows(run_id, first[0].seq)).state if first else None
        except store_errors():
            return None
        said = next((m for m in state.history if m.role == "user"), None) if state else None
        prompt = cut(" ".join(message_text(said).split()), PROMPT_CHARS) if said else None
        with self._lock:
            if len(self._prompts) >= PROMPTS_KEPT:
                del self._prompts[next(iter(self._prompts))]
            self._prompts[run_id] = prompt
        return prompt

    def _view(self, run_id: str, child: str | None = None) -> tuple[View, dict[str, Any], str]:
        """A run's view (or its child's at path ``child``), what goes with it (source,
        machine, error, child runs) and a key that changes with it (the stream's event
        id)."""
        if run_id.startswith("log:"):
            return self._log_view(run_id, child)
        if run_id.startswith("db:") and self.store is not None:
            info = self._store_run(run_id)
            key = (info.run_id, info.checkpoints, info.updated)
            with self._lock:
                cached = self._stored.get(key)
                if cached is None:
                    cached = self._read_stored(info, run_id)
                self._stored = {key: cached}
            extra: dict[str, Any] = {
                "id": run_id,
                "source": "db",
                "child": child,
                "above": [],
                "started": info.created,
                "prompt": self._stored_prompt(info.run_id),
            }
            stamp = f"db:{info.checkpoints}:{info.updated}"
            if child is None:
                view = StoredView({k: v for k, v in cached.items() if k != "child_views"})
                return view, {**extra, "error": cached.get("error")}, stamp
            views: dict[str, StoredChild] = cached.get("child_views") or {}
            if child not in views:
                raise UnknownChild(run_id, child)
            fields = self._child_machine(None, run_id, child)
            nothing = {"children": [], "children_total": 0, "error": None}
            extra |= _asked_here(cached, child)
            return StoredView(views[child].detail), {**fields, **extra, **nothing}, stamp
        raise UnknownRun(run_id)

    def _log_view(self, run_id: str, child: str | None) -> tuple[View, dict[str, Any], str]:
        log, n, top = self._log_run(run_id)
        run = top
        if child is not None:
            found = top.children.get(child)
            if found is None:
                raise UnknownChild(run_id, child)
            run = found
        record = MachineRecord.from_events([run.started] if run.started else [])
        if child is None:
            machine = self._machine_fields(record, run_id)
        else:
            machine = self._child_machine(record, run_id, child)
        error = run.error or (log.problem if child is None else None)
        extra = {
            **machine,
            "id": run_id,
            "source": "log",
            "child": child,
            "above": top.above(child) if child is not None else [],
            "error": error,
            "children": top.tree(child),
            "children_total": top.count_below(child),
            "started": _started(log, run),
        }
        if child is not None:
            extra |= _asked_here(top.summary(), child)
        if not run.events and log.error:
            extra["status"] = "error"
        counts = ".".join(str(run.count(k)) for k in LISTS)
        problem = zlib.crc32(str(extra["error"]).encode())  # an id is one line
        return run, extra, f"{n}:{counts}.{top.events}.{top.errors}.{problem}"

    def _read_stored(self, info: RunInfo, run_id: str) -> dict[str, Any]:
        """A stored run's detail; one that cannot be read (a corrupt row, a broken
        store) is its summary with the one line saying why."""
        assert self.store is not None
        try:
            machine = self._machine_fields(self.store.machine(info.run_id), run_id)
            return {**store_detail(self.store, info), **machine}
        except store_errors() as exc:
            line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return {
                **store_summary(info),
                "machine": None,
                "fingerprint": None,
                "machine_error": None,
                "error": f"run {info.run_id!r} cannot be read from the store: {line}",
                "children": [],
                "children_total": 0,
            }

    def detail(self, run_id: str, limit: int = PAGE, child: str | None = None) -> dict[str, Any]:
        """What the page shows of one run (or of its child at path ``child``): the
        summary, the latest ``limit`` rows of each list, the lists' ``totals`` and the
        child runs; :class:`UnknownRun` when there is none."""
        view, extra, _ = self._view(run_id, child)
        return {**_paged(view, limit), **extra}

    def page(
        self, run_id: str, kind: str, offset: int, limit: int, child: str | None = None
    ) -> dict[str, Any]:
        """Rows ``offset`` to ``offset + limit`` of one of a run's lists (``LISTS``)."""
        view, _, _ = self._view(run_id, child)
        rows = view.items(kind, offset, offset + limit)
        return {"list": kind, "offset": offset, "total": view.count(kind), kind: rows}

    def update(
        self, run_id: str, last: str | None, child: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The stream's next message for a client whose last event id is ``last``: its
        id, and the summary with the rows added since ``last`` (``"append": true``), or
        the paged detail when ``last`` is not an earlier state of the same run."""
        view, extra, key = self._view(run_id, child)
        since = _counts(last, key)
        if since is None or not isinstance(view, RunFold):
            return key, {**_paged(view), **extra, "append": False}
        lists = {k: view.items(k, since[i], view.count(k)) for i, k in enumerate(LISTS)}
        totals = {k: view.count(k) for k in LISTS}
        return key, {**view.summary(), **lists, "totals": totals, **extra, "append": True}

    def kept_as(self, run_id: str) -> tuple[str | None, Path | None]:
        """The id run ``run_id`` has in a checkpoint store (None: no store keeps it; a
        log's run says which one its ``run_started`` recorded) and, for the last run of
        a log, that log (where its events go on once it is answered)."""
        if run_id.startswith("db:") and self.store is not None:
            return self._store_run(run_id).run_id, None
        if not run_id.startswith("log:"):
            raise UnknownRun(run_id)
        log, n, run = self._log_run(run_id)
        stored = (run.started or {}).get("run_id")
        if not isinstance(stored, str):
            return None, None
        return stored, log.path if n == len(log.runs) else None

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

    def _child_machine(
        self, record: MachineRecord | None, run_id: str, path: str
    ) -> dict[str, Any]:
        """:meth:`_machine_fields` of the child at ``path``: its machine looked for among
        ``machines`` and the machines the run's own machine runs as children."""
        try:
            spec = self._find_child_machine(record, run_id, path)
        except MachineNotFound as exc:
            name = record.name if record else None
            return {"machine": name, "fingerprint": None, "machine_error": str(exc)}
        return {"machine": spec.name, "fingerprint": spec.fingerprint, "machine_error": None}

    def _find_child_machine(
        self, record: MachineRecord | None, run_id: str, path: str
    ) -> MachineSpec:
        what = f"child {path!r} of run {run_id}"
        try:
            parent = self._machine(run_id)
        except MachineNotFound:
            parent = None
        if record is None:  # a stored child: the machine its parent's state runs by its name
            named = _named_child(parent, path) if parent is not None else None
            return named if named is not None else find_machine(None, (), what=what)
        inside = _nested(parent) if parent is not None else []
        return find_machine(record, [*self.machines, *inside], what=what)

    def _machine(self, run_id: str, child: str | None = None) -> MachineSpec:
        """The machine run ``run_id`` (or its child at path ``child``) recorded;
        :class:`MachineNotFound` when not at hand."""
        if run_id.startswith("log:"):
            run = self._log_run(run_id)[2]
            if child is not None:
                run = run.children[child]
            started = run.started
            record = MachineRecord.from_events([started] if started else [])
        elif self.store is not None:
            info = self._store_run(run_id)
            record = self.store.machine(info.run_id) if child is None else None
        else:
            raise UnknownRun(run_id)
        if child is not None:
            return self._find_child_machine(record, run_id, child)
        return find_machine(record, self.machines, what=f"run {run_id}")

    def diagram(
        self,
        run_id: str,
        child: str | None = None,
        open: frozenset[str] | None = None,
        *,
        taken: bool = False,
    ) -> bytes:
        """The machine's SVG with the run's trace on it (edge counts, path to the exit),
        its child runs' traces on the clusters of the states that ran them; of the child
        at path ``child`` when given. ``open``: the child clusters drawn open, the others
        one node each (``None``: all open; see :func:`~innerloop.diagrams.to_dot`);
        ``taken``: only the states and edges the run used (:meth:`Diagram.taken`)."""
        view, _, _ = self._view(run_id, child)
        detail = view.summary()
        machine = self._machine(run_id, child)
        rows = view.items("transitions", 0, view.count("transitions"))
        steps = [(s["source"], s["target"], s["guard"]) for s in rows]
        final = detail["current"] if detail["status"] != "running" else None
        below = _child_steps(self._log_run(run_id)[2], child) if run_id.startswith("log:") else []
        key: tuple[Any, ...] = (machine.name, machine.fingerprint, tuple(steps), tuple(below))
        key += (final, detail["exit_reason"], open, taken)
        with self._lock:
            cached = self._svg.get(key)
        if cached is not None:
            return cached
        trace: list[dict[str, Any]] = [
            {"type": "transition", "source": s, "target": t, "guard": g} for s, t, g in steps
        ]
        for path, source, target, guard in below:
            step = {"type": "transition", "source": source, "target": target, "guard": guard}
            trace.append({"type": "child_event", "path": path, "event": step})
        if final is not None:
            trace.append(
                {"type": "finished", "final_state": final, "exit_reason": detail["exit_reason"]}
            )
        drawn = build_diagram(machine, trace=trace)
        svg = render(drawn.taken() if taken else drawn, "svg", open=open)
        with self._lock:
            self._svg[key] = svg
            while len(self._svg) > SVG_CACHE:  # a live run makes a new picture per step
                del self._svg[next(iter(self._svg))]
        return svg

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def _started(log: LogFile, run: RunFold) -> float | None:
    """When ``run`` started (seconds since the epoch): its log's ``started`` (the header
    of a log written by this innerloop) plus the run's first ``t``."""
    opened = (log.header or {}).get("started")
    if not isinstance(opened, int | float) or isinstance(opened, bool):
        return None
    return float(opened) + (run.t0 or 0.0) if math.isfinite(opened) else None


def _asked_here(top: dict[str, Any], child: str) -> dict[str, Any]:
    """What a child's page says it waits on: the run's question when this child asks it
    (with the run's interrupt id, the one an answer names), else the questions the
    child waits to ask next."""
    return {"interrupts": [a for a in top.get("interrupts") or [] if a.get("path") == child]}


def _child_steps(top: RunFold, under: str | None) -> list[tuple[str, str, str, str | None]]:
    """The transitions of the child runs below a log's run (or below its child at path
    ``under``), each with its path from there, for the diagram's clusters."""
    steps = []
    for path, fold in top.children.items():
        if under is not None:
            if not path.startswith(under + "/"):
                continue
            path = path[len(under) + 1 :]
        steps += [(path, row[1], row[2], row[3]) for row in fold.lists["transitions"]]
    return steps


def _counts(last: str | None, key: str) -> list[int] | None:
    """The list lengths a stream's last event id ``last`` names, when it is an earlier
    state of the run ``key`` names (same run, no list longer than now); else None."""
    if not last or not key[0].isdigit():
        return None
    run, _, rest = last.partition(":")
    now_run, _, now = key.partition(":")
    try:
        since = [int(x) for x in rest.split(".")[: len(LISTS)]]
        counts = [int(x) for x in now.split(".")[: len(LISTS)]]
    except ValueError:
        return None
    if run != now_run or len(since) != len(counts):
        return None
    gaps = [b - a for a, b in zip(since, counts, strict=True)]
    if min(gaps) < 0 or sum(gaps) > PAGE:
        return None  # too far behind: the latest page instead
    return since
