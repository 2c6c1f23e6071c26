"""Event logs read as they grow: each refresh reads only the bytes added since the last one.

A log is read line by line; a line not yet ended by a newline is kept back until it is
(another process may be writing it). What cannot be read becomes the log's ``error``, and
the runs read before it stay listed: a log that is not an innerloop log, a line that is not
JSON, a file cut off in the middle of its last line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from innerloop._eventlog import header_problem

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
        self.events: list[dict[str, Any]] = []
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
                json.loads(self._pending)
            except ValueError:
                self.truncated = (
                    f"line {self._lineno + 1} is cut off (no newline, not JSON): a truncated "
                    "log, or one still being written"
                )

    def _line(self, raw: bytes) -> bool:
        where = f"{self.path.name}:{self._lineno}"
        try:
            data = json.loads(raw)
        except ValueError as exc:
            self.error = f"{where}: not JSON ({exc})"
            return False
        if not isinstance(data, dict):
            self.error = f"{where}: a JSON {type(data).__name__}, not an event object"
            return False
        if self.header is None:
            return self._header(data, where)
        problem = _shape_problem(data)
        if problem is not None:
            self.error = f"{where}: {problem}"
            return False
        self.events.append(data)
        return True

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


REQUIRED = {
    "transition": ("source", "target"),
    "tool_use_start": ("id",),
    "tool_executed": ("name",),
}
"""The fields the page reads of an event, by type, that have no sensible default."""


def _shape_problem(event: dict[str, Any]) -> str | None:
    """What makes ``event`` unreadable as an event, if anything."""
    kind = event.get("type")
    if not isinstance(kind, str):
        return "an event without a type"
    missing = [f for f in REQUIRED.get(kind, ()) if not isinstance(event.get(f), str)]
    if missing:
        return f"a {kind} event without {' or '.join(missing)}"
    return None


def is_log(path: Path) -> bool:
    """A file the folder listing shows: ``*.jsonl``, not hidden."""
    return path.suffix == ".jsonl" and not path.name.startswith(".") and os.path.isfile(path)
