"""Event logs read as they grow: each refresh reads only the bytes added since the last one.

A log is read line by line; a line not yet ended by a newline is kept back until it is
(another process may be writing it). Each line is folded into its run's view as it is read
(:class:`~innerloop.ui._view.RunFold`) and then dropped: memory grows with the runs and
what the page lists of them, not with the log. A line that cannot be read (not JSON, too
deep, ``NaN``, not a well-typed event) is its run's error, with its line, and the lines
after it are read on; what stops a log is its ``error``: a file that is not an innerloop
log, another schema, one that cannot be read, cut off in the middle of its last line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from innerloop._eventlog import header_problem
from innerloop._json import STORED_JSON_DEPTH, parse_json
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.ui._view import RunFold

__all__ = ["LogFile", "is_log"]

TAIL = 256


class LogFile:
    """One JSONL event log, read incrementally by :meth:`refresh`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._reset()

    def _reset(self) -> None:
        self.header: dict[str, Any] | None = None
        self.runs: list[RunFold] = []
        """The runs read, in order (each starts at ``run_started``, ends at ``finished``)."""
        self._open: RunFold | None = None
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
        if self._stamp is None or stat.st_ino != self._stamp[0] or stat.st_size < self._offset:
            self._reset()  # new, or rewritten: read it from the start
        self._stamp = stamp
        try:
            data = self._read()
        except OSError as exc:
            self.error = f"cannot read {self.path.name}: {exc.strerror or exc}"
            return True
        if data is None:
            return False
        self._offset += len(data)
        self._tail = (self._tail + data)[-TAIL:]
        self._parse(self._pending + data)
        return True

    def _read(self) -> bytes | None:
        """The bytes after those read; from the start again when the bytes read before
        are no longer there (the file was truncated and written again past its old size).
        None after an error, which stays until the file is rewritten."""
        with self.path.open("rb") as f:
            f.seek(self._offset - len(self._tail))
            if f.read(len(self._tail)) != self._tail:
                self._reset()
                f.seek(0)
            elif self.error is not None:
                return None
            return f.read()

    def _parse(self, data: bytes) -> None:
        *lines, self._pending = data.split(b"\n")
        for raw in lines:
            self._lineno += 1
            if raw.strip() and not self._line(raw):
                return
        self.truncated = None
        if self._pending.strip():
            try:
                _parse(self._pending)
            except (ValueError, RecursionError):
                self.truncated = (
                    f"line {self._lineno + 1} is cut off (no newline, not JSON): a truncated "
                    "log, or one still being written"
                )

    def _line(self, raw: bytes) -> bool:
        """Fold in one line; False when it stops the log (a first line that is not a header)."""
        where = f"{self.path.name}:{self._lineno}"
        try:
            data = _parse(raw)
        except ValueError as exc:
            if self.header is None:
                self.error = f"{where}: not JSON ({exc})"
                return False
            self._run(None).fail(where, f"not JSON ({exc})")
            return True
        if not isinstance(data, dict):
            problem = f"a JSON {type(data).__name__}, not an event object"
            if self.header is None:
                self.error = f"{where}: {problem}"
                return False
            self._run(None).fail(where, problem)
            return True
        if self.header is None:
            return self._header(data, where)
        run = self._run(data.get("type"))
        run.add(data, where)
        if run.end is not None:
            self._open = None
        return True

    def _run(self, kind: object) -> RunFold:
        """The run a line of type ``kind`` belongs to (a new one at ``run_started``, or
        after ``finished``)."""
        run = self._open
        if run is None or (kind == "run_started" and run.events + run.errors > 0):
            run = self._open = RunFold(DEFAULT_SPEC.initial)
            self.runs.append(run)
        return run

    def _header(self, data: dict[str, Any], where: str) -> bool:
        problem = header_problem(data)
        if problem is not None:
            self.error = f"{where}: {problem}"
            return False
        self.header = data
        return True

    @property
    def problem(self) -> str | None:
        """What is wrong with the log, if anything."""
        return self.error or self.truncated

    @property
    def mtime(self) -> float:
        return self._stamp[2] / 1e9 if self._stamp else 0.0


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
