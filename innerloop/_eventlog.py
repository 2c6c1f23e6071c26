"""The JSONL event log: one event per line, versioned, flushed as it goes.

Line 1 is a header ``{"type": "log_header", "schema": "innerloop.events/1", "started":
...}`` (``started``: when the log was opened, seconds since the epoch). Every
other line is ``event.to_dict()`` plus ``seq`` (0, 1, 2, ...) and ``t`` (seconds since the
run started). The schema is documented in ``docs/event-log.md``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from innerloop._events import Event
from innerloop._json import STORED_JSON_DEPTH, parse_json

__all__ = [
    "SCHEMA",
    "EventLog",
    "header_problem",
    "iter_event_log",
    "pick_run",
    "read_event_log",
    "split_runs",
]

SCHEMA = "innerloop.events/1"
CHUNK_BYTES = 1 << 20
"""The bytes read at a time counting a log's lines (when appending)."""


class EventLog:
    """Append events to ``path``; each line is flushed, so an interrupted run leaves a
    complete log up to its last event. The file is written anew, header first; with
    ``append=True`` an existing log goes on (its ``seq`` and ``t`` counting on), as a
    resumed run's events follow the run's."""

    def __init__(
        self, path: str | Path, header: Mapping[str, Any] | None = None, *, append: bool = False
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._start = time.monotonic()
        self._seq = 0
        if append and self.path.is_file() and self.path.stat().st_size > 0:
            opened, self._seq = _log_so_far(self.path)
            if opened is not None:  # ``t`` goes on counting from the header's start
                self._start -= time.time() - opened
            self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
            return
        self._file = self.path.open("w", encoding="utf-8")
        opened_at = {"type": "log_header", "schema": SCHEMA, "started": round(time.time(), 6)}
        self._write({**opened_at, **(header or {})})

    def _write(self, data: Mapping[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"event log {self.path} is closed")
        self._file.write(json.dumps(data, default=str, separators=(",", ":")) + "\n")
        self._file.flush()

    def write(self, event: Event) -> None:
        data = event.to_dict()
        data["seq"] = self._seq
        data["t"] = round(time.monotonic() - self._start, 6)
        self._seq += 1
        self._write(data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> EventLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _log_so_far(path: Path) -> tuple[float | None, int]:
    """An existing log's ``started`` (None: an older header) and the ``seq`` its next
    line takes; ValueError when it is not an event log this innerloop writes."""
    with path.open("rb") as f:
        header = parse_json(f.readline(), STORED_JSON_DEPTH)
        f.seek(0)
        problem = header_problem(header) if isinstance(header, dict) else "not an event log"
        if problem is not None:
            raise ValueError(f"{path}: {problem}; append to a log this innerloop wrote")
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(CHUNK_BYTES), b""))
    started = header.get("started")
    when = float(started) if isinstance(started, int | float) else None
    return when, max(0, lines - 1)  # one event a line after the header: the next seq


def header_problem(line: Mapping[str, Any]) -> str | None:
    """What keeps ``line``, a log's first line, from being the header of a log this
    innerloop reads; None when it is one."""
    if line.get("type") != "log_header":
        return "not an innerloop event log (no log_header line)"
    schema = line.get("schema")
    if schema != SCHEMA:
        return f"event log schema {schema!r} is not supported (this innerloop reads {SCHEMA})"
    return None


def read_event_log(path: str | Path) -> list[dict[str, Any]]:
    """The events of a log (without the header), as the dicts of its lines; raises
    ValueError for an unknown schema. ``Event.from_dict(line)`` makes a line its event."""
    return list(iter_event_log(path))


def iter_event_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """:func:`read_event_log` as a stream: one line read at a time, none kept."""
    lines = _lines(Path(path))
    problem = header_problem(next(lines, {}))
    if problem is not None:
        lines.close()
        raise ValueError(f"{path}: {problem}")
    return lines


def split_runs(events: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The runs of one log's events, in order: each starts at its ``run_started`` event
    and ends at its ``finished`` one (``innerloop demo`` writes three runs to one log).
    Events after the last ``finished`` are a run still going, or cut off; a log written
    before runs began with ``run_started`` is split at each ``finished``."""
    runs: list[list[Mapping[str, Any]]] = []
    current: list[Mapping[str, Any]] = []
    for event in events:
        kind = event.get("type")
        if kind == "run_started" and current:
            runs.append(current)
            current = []
        current.append(event)
        if kind == "finished":
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def pick_run(
    runs: Sequence[Sequence[Mapping[str, Any]]], run: int | str | None, where: str
) -> tuple[Sequence[Mapping[str, Any]], str]:
    """One run of a log's ``runs`` and how to name it: ``run`` is its number (1 for the
    first), ``"last"``, its ``run_id``, or None when the log holds one run. ``ValueError``
    says which runs there are."""
    count = len(runs)
    ids = [r[0].get("run_id") for r in runs if r and r[0].get("type") == "run_started"]
    if run is None and count > 1:
        raise ValueError(
            f"{where} holds {count} runs; pick one with --run N (1 to {count}) or --run last"
        )
    if not runs:
        raise ValueError(f"{where} holds no run")
    if run is None or run == "last":
        n = count
    elif isinstance(run, int) or run.isdigit():
        n = int(run)
    elif run in ids:
        n = 1 + next(i for i, r in enumerate(runs) if r and r[0].get("run_id") == run)
    else:
        n = 0
    if not 1 <= n <= count:
        raise ValueError(f"{where} has no run {run!r}: its runs are 1 to {count}, or last")
    return runs[n - 1], f"run {n} of {where}"


def _lines(path: Path) -> Generator[dict[str, Any], None, None]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield parse_json(line, STORED_JSON_DEPTH)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from None
