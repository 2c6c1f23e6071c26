"""Event logs read as they grow: each refresh reads only the bytes added since the last one.

A log is read line by line, a few megabytes at a time; a line not yet ended by a newline is
kept back until it is (another process may be writing it). The lines are cut into runs (a
run starts at ``run_started``, ends at ``finished``; one that ended suspended goes on at
the ``run_started`` that resumes it with the answer, in the same run); of each run the
log keeps where its lines are (bytes and line numbers) and its summary
(:class:`~innerloop.ui._view.RunFold` without its lists: a few fields, however long the
run), so memory grows with the number
of runs, not with the log (a run's child runs are summaries too, by path). A run's lists
(transitions, tool calls, turns, recoveries, messages; its children's too) are read from
its bytes when it is opened (:meth:`LogFile.view`), and kept up to date as its lines
come, for the few runs opened last.

Each line is parsed by pydantic-core's JSON reader (a line it refuses is parsed again by
the standard one, so every error reads the same), each event structured as the page
needs it (:meth:`RunFold.add`). A line that cannot be read (not JSON, too deep, ``NaN``,
not a well-typed event) is its run's error, with its line, and the lines after it are
read on; what stops a log is its ``error``: a file that is not an innerloop log, another
schema, one that cannot be read, cut off in the middle of its last line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic_core import from_json

from innerloop._eventlog import header_problem
from innerloop._json import STORED_JSON_DEPTH, parse_json
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.ui._view import RunFold

__all__ = ["LogFile", "LogRun", "is_log"]

TAIL = 256
CHUNK = 4 * 1024 * 1024
"""The bytes read at a time."""
OPENED = 4
"""The runs whose lists are kept once opened (the one opened longest ago goes first)."""


class LogRun:
    """One run of a log: its summary, where its lines are, and its lists once opened."""

    def __init__(self, start: int, line: int) -> None:
        self.fold = RunFold(DEFAULT_SPEC.initial, lists=False)
        self.start = start
        """The byte offset of its first line."""
        self.stop = start
        """The byte offset after its last line read."""
        self.line = line
        """The number of its first line."""
        self.view: RunFold | None = None
        """Its lists too, while it is one of the runs opened last."""

    def add(self, data: dict[str, Any] | str, where: str) -> None:
        """Fold in one line: its event, or what is wrong with it."""
        _fold_line(self.fold, data, where)
        if self.view is not None:
            _fold_line(self.view, data, where)


def _fold_line(fold: RunFold, data: dict[str, Any] | str, where: str) -> None:
    if isinstance(data, str):
        fold.fail(where, data)
    else:
        fold.add(data, where)


class LogFile:
    """One JSONL event log, read incrementally by :meth:`refresh`, ``chunk`` bytes at a
    time."""

    def __init__(self, path: Path, *, chunk: int = CHUNK) -> None:
        self.path = path
        self.chunk = chunk
        self._stamp: tuple[int, int, int] | None = None
        self._reset()

    def _reset(self) -> None:
        self.header: dict[str, Any] | None = None
        self.runs: list[LogRun] = []
        """The runs read, in order (each starts at ``run_started``, ends at ``finished``)."""
        self._open: LogRun | None = None
        self._opened: list[LogRun] = []
        self.error: str | None = None
        self.truncated: str | None = None
        """The error of a last line without its newline, should no more bytes come."""
        self._offset = 0
        self._lineno = 0
        self._pending = b""
        self._tail = b""
        """The last bytes read, to tell a file written again from one that grew."""

    def refresh(self) -> bool:
        """Read what was added since the last call; True when anything changed."""
        try:
            stat = self.path.stat()
        except OSError as exc:
            message = f"cannot read {self.path.name}: {exc.strerror or exc}"
            changed = self.error != message
            self._stamp = None
            self._reset()
            self.error = message
            return changed
        stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp == self._stamp:
            return False
        anew = self._stamp is None or stat.st_ino != self._stamp[0] or stat.st_size < self._offset
        if anew:
            self._reset()  # new, or rewritten: read it from the start
        self._stamp = stamp
        read = anew
        try:
            with self.path.open("rb") as f:
                for data in self._read(f):
                    read = True
                    self._offset += len(data)
                    self._tail = (self._tail + data)[-TAIL:]
                    if not self._parse(self._pending + data):
                        break
        except OSError as exc:
            self.error = f"cannot read {self.path.name}: {exc.strerror or exc}"
            return True
        if read:
            self._check_pending()
        return read

    def _read(self, f: Any) -> Iterator[bytes]:
        """The bytes after those read, a chunk at a time; from the start again when the
        bytes read before are no longer there (the file was truncated and written again
        past its old size). Nothing after an error, which stays until the file is rewritten."""
        f.seek(self._offset - len(self._tail))
        if f.read(len(self._tail)) != self._tail:
            self._reset()
            f.seek(0)
        elif self.error is not None:
            return
        while data := f.read(self.chunk):
            yield data

    def _parse(self, data: bytes) -> bool:
        """Fold in the lines of ``data`` but its last, unfinished one; False when the log
        stops (its first line is not a header). The loop every line of a log goes through:
        kept flat."""
        *lines, self._pending = data.split(b"\n")
        at = self._offset - len(data)
        name = self.path.name
        run = self._open
        lineno = self._lineno
        for raw in lines:
            lineno += 1
            start, at = at, at + len(raw) + 1
            if not raw.strip():
                continue
            try:  # read_line's first step, here: a million calls fewer for a million lines
                event = from_json(raw, allow_inf_nan=False)
            except ValueError:
                event = read_line(raw)
            if type(event) is not dict:
                event = read_line(raw)
            where = f"{name}:{lineno}"
            if self.header is None:
                if not self._header(event, where):
                    self._lineno = lineno
                    return False
                continue
            if run is None or (
                type(event) is dict
                and event.get("type") == "run_started"
                and run.fold.events + run.fold.errors > 0
            ):
                run = self._open = self._next_run(run, event, start, lineno)
            if run.view is None and type(event) is dict:
                run.fold.add(event, where)
            else:
                run.add(event, where)
            run.stop = at
            if run.fold.end is not None:
                run = self._open = None
        self._lineno = lineno
        return True

    def _next_run(
        self, run: LogRun | None, event: dict[str, Any] | str, start: int, line: int
    ) -> LogRun:
        """The run a line that starts one goes to: the last run again when it resumes
        it after its answer (the same run), else a new one."""
        last = _goes_on(self.runs, event) if run is None else None
        if last is not None:
            return last
        new = LogRun(start, line)
        self.runs.append(new)
        return new

    def _header(self, event: dict[str, Any] | str, where: str) -> bool:
        """Read the first line; False when it is not a log's header (the log's error)."""
        problem = event if isinstance(event, str) else header_problem(event)
        if problem is not None or isinstance(event, str):
            self.error = f"{where}: {problem}"
            return False
        self.header = event
        return True

    def _check_pending(self) -> None:
        self.truncated = None
        if self.error is None and self._pending.strip():
            try:
                _parse(self._pending)
            except (ValueError, RecursionError):
                self.truncated = (
                    f"line {self._lineno + 1} is cut off (no newline, not JSON): a truncated "
                    "log, or one still being written"
                )

    def view(self, run: LogRun) -> RunFold:
        """``run`` with its lists, read from its lines (kept for the :data:`OPENED` runs
        opened last, and kept up to date as lines come)."""
        if run.view is None:
            view = run.view = RunFold(DEFAULT_SPEC.initial)
            n, pending, left = run.line, b"", run.stop - run.start
            with self.path.open("rb") as f:
                f.seek(run.start)
                while left > 0 and (data := f.read(min(self.chunk, left))):
                    left -= len(data)
                    *lines, pending = (pending + data).split(b"\n")
                    for raw in lines:
                        if raw.strip():
                            _fold_line(view, read_line(raw), f"{self.path.name}:{n}")
                        n += 1
        if run in self._opened:
            self._opened.remove(run)
        self._opened.append(run)
        for old in self._opened[:-OPENED]:
            old.view = None
        del self._opened[:-OPENED]
        return run.view

    @property
    def problem(self) -> str | None:
        """What is wrong with the log, if anything."""
        return self.error or self.truncated

    @property
    def mtime(self) -> float:
        return self._stamp[2] / 1e9 if self._stamp else 0.0


def _goes_on(runs: list[LogRun], event: dict[str, Any] | str) -> LogRun | None:
    """The log's last run when ``event`` is that run going on: a ``run_started`` that
    resumes (``resumed``) with the answer to the question the run ended suspended on
    (the same interrupt id, and the same store run id when it has one)."""
    if not runs or type(event) is not dict or event.get("type") != "run_started":
        return None
    last = runs[-1]
    end, resumed = last.fold.end, event.get("resumed")
    if end is None or end.final_state != "suspended" or not isinstance(resumed, dict):
        return None
    asked, answered = end.interrupt, resumed.get("interrupt")
    if not isinstance(asked, Mapping) or not isinstance(answered, dict):
        return None
    same = (last.fold.started or {}).get("run_id") == event.get("run_id")
    return last if same and asked.get("id") and asked.get("id") == answered.get("id") else None


def read_line(raw: bytes) -> dict[str, Any] | str:
    """A log line's event object, or what is wrong with the line."""
    try:
        data = from_json(raw, allow_inf_nan=False)  # most lines: fast
        if type(data) is dict:
            return data
    except ValueError:
        try:
            data = _parse(raw)  # the rest, read by the standard reader (its errors, and
        except ValueError as exc:  # a few lines only it reads: deeper than 201, lone
            return f"not JSON ({exc})"  # surrogates)
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an event object"
    return data


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _parse(raw: bytes) -> Any:
    """A line's JSON: too deep, ``NaN`` and ``Infinity`` are errors (ValueError)."""
    data = parse_json(raw, STORED_JSON_DEPTH)
    if b"NaN" in raw or b"Infinity" in raw:  # rare: parse again to tell a string from a number
        data = json.loads(raw, parse_constant=_refuse_constant)
    return data


def is_log(path: Path) -> bool:
    """A file the folder listing shows: ``*.jsonl``, not hidden."""
    return path.suffix == ".jsonl" and not path.name.startswith(".") and os.path.isfile(path)
