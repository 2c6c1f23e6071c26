"""Event logs read as they grow, and every way a log can be unreadable."""

from __future__ import annotations

import json
import os
from pathlib import Path

from innerloop._eventlog import SCHEMA
from innerloop.ui._logs import LogFile

HEADER = json.dumps({"type": "log_header", "schema": SCHEMA}) + "\n"
T1 = json.dumps({"type": "transition", "source": "idle", "target": "assemble", "guard": None})
T2 = json.dumps({"type": "transition", "source": "assemble", "target": "normalize", "guard": None})


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def _targets(log: LogFile) -> list[str]:
    return [t["target"] for run in log.runs for t in run.detail()["transitions"]]


def _events(log: LogFile) -> int:
    return sum(run.events for run in log.runs)


def test_reads_only_what_was_added(tmp_path: Path) -> None:
    """Each refresh picks up the new lines; nothing new is no change."""
    path = tmp_path / "run.jsonl"
    path.write_text(HEADER + T1 + "\n")
    log = LogFile(path)
    assert log.refresh() is True
    assert _targets(log) == ["assemble"]
    assert log.refresh() is False
    _append(path, T2 + "\n")
    assert log.refresh() is True
    assert _targets(log) == ["assemble", "normalize"]
    assert log.problem is None


def test_a_line_being_written_waits_for_its_newline(tmp_path: Path) -> None:
    """Half a line is kept back (and named, should it stay so), then read once whole."""
    path = tmp_path / "run.jsonl"
    path.write_text(HEADER + T1 + "\n" + T2[:20])
    log = LogFile(path)
    log.refresh()
    assert _events(log) == 1
    assert log.error is None
    assert log.truncated == (
        "line 3 is cut off (no newline, not JSON): a truncated log, or one still being written"
    )
    _append(path, T2[20:] + "\n")
    log.refresh()
    assert _targets(log) == ["assemble", "normalize"]
    assert log.problem is None


def test_a_line_that_is_not_json_is_its_runs_error_and_reading_goes_on(tmp_path: Path) -> None:
    """The error names the file and line and stays with its run; the lines after it count."""
    path = tmp_path / "bad.jsonl"
    path.write_text(HEADER + T1 + "\n{oops\n" + T2 + "\n")
    log = LogFile(path)
    log.refresh()
    assert (_events(log), log.error) == (2, None)
    (run,) = log.runs
    assert run.error is not None
    assert run.error.startswith("bad.jsonl:3: not JSON (Expecting property name")


def test_malformed_lines_stay_with_their_run_and_line(tmp_path: Path) -> None:
    """NaN, Infinity, a line nested 100,000 deep and an ill-typed event each are the
    error of their run, with their line; the other runs and the following lines are read."""
    started = {"type": "run_started", "machine": "innerloop", "fingerprint": "f"}
    start = json.dumps({**started, "import_path": None, "state": "idle"})
    end = json.dumps(
        {
            "type": "finished",
            "exit_reason": "model_complete",
            "final_state": "model_complete",
            "turns": 0,
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "cost_usd": 0.0,
        }
    )
    lines = [
        start,
        T1,
        '{"type": "transition", "source": "a", "target": "b", "guard": null, "t": NaN}',
        T2,
        end,
        start,
        "[" * 100_000 + "]" * 100_000,
        T1,
        end,
        start,
        json.dumps(
            {
                "type": "finished",
                "exit_reason": "x",
                "final_state": "y",
                "turns": 1,
                "usage": "lots",
                "cost_usd": 1.0,
            }
        ),
        T1,
        '{"type": "backoff", "attempt": 1, "delay": Infinity, "retry_after": null, '
        '"total_wait": 1}',
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    log = LogFile(path)
    log.refresh()
    assert log.error is None
    assert [(r.summary()["status"], r.errors) for r in log.runs] == [
        ("finished", 1),
        ("finished", 1),
        ("running", 2),
    ]
    first, deep, typed = (r.error for r in log.runs)
    assert first == "mixed.jsonl:4: not JSON (NaN is not a number JSON allows)"
    assert deep is not None
    assert deep.startswith("mixed.jsonl:8: not JSON (nested deeper than 232 levels")
    assert typed is not None
    assert typed == (
        "mixed.jsonl:12: cannot read a Finished from this data: expected an object (Usage), "
        "got a string ('lots') @ $.usage"
    )
    assert [len(r.detail()["transitions"]) for r in log.runs] == [2, 1, 1]


def test_a_file_that_is_not_an_event_log(tmp_path: Path) -> None:
    path = tmp_path / "other.jsonl"
    path.write_text('{"hello": 1}\n')
    log = LogFile(path)
    log.refresh()
    assert log.error == "other.jsonl:1: not an innerloop event log (no log_header line)"
    path.write_text("[1, 2]\n")
    log = LogFile(path)
    log.refresh()
    assert log.error == "other.jsonl:1: a JSON list, not an event object"


def test_an_unknown_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.jsonl"
    path.write_text(json.dumps({"type": "log_header", "schema": "innerloop.events/9"}) + "\n")
    log = LogFile(path)
    log.refresh()
    assert log.error == (
        "future.jsonl:1: event log schema 'innerloop.events/9' is not supported "
        f"(this innerloop reads {SCHEMA})"
    )


def test_binary_garbage_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(os.urandom(64).replace(b"\n", b"x") + b"\n")
    log = LogFile(path)
    log.refresh()
    assert log.error is not None
    assert log.error.startswith("garbage.jsonl:1: not JSON")


def test_an_unreadable_path_and_its_recovery(tmp_path: Path) -> None:
    """A missing file is an error until it appears; a directory cannot be read."""
    path = tmp_path / "later.jsonl"
    log = LogFile(path)
    log.refresh()
    assert log.error == "cannot read later.jsonl: No such file or directory"
    path.write_text(HEADER + T1 + "\n")
    assert log.refresh() is True
    assert (log.problem, _events(log)) == (None, 1)
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    log = LogFile(folder)
    log.refresh()
    assert log.error == "cannot read dir.jsonl: Is a directory"


def test_a_rewritten_log_is_read_again(tmp_path: Path) -> None:
    """A log opened again for writing (a new run of innerloop demo) starts over."""
    path = tmp_path / "run.jsonl"
    path.write_text(HEADER + T1 + "\n" + T2 + "\n")
    log = LogFile(path)
    log.refresh()
    path.write_text(HEADER + T2 + "\n")
    log.refresh()
    assert _targets(log) == ["normalize"]


def test_an_event_of_the_wrong_shape_is_its_runs_error(tmp_path: Path) -> None:
    """JSON, but not an event the page can read: named with its line."""
    path = tmp_path / "odd.jsonl"
    path.write_text(HEADER + T1 + "\n" + json.dumps({"type": "transition", "source": "a"}) + "\n")
    log = LogFile(path)
    log.refresh()
    assert (_events(log), log.error) == (1, None)
    assert log.runs[0].error == (
        "odd.jsonl:3: cannot read a Transition from this data: required field missing @ "
        "$.target; required field missing @ $.guard"
    )
    path.write_text(HEADER + '{"no": "type"}\n')
    log = LogFile(path)
    log.refresh()
    assert log.runs[0].error == "odd.jsonl:2: an event without a type"


def test_a_log_written_again_past_its_old_size_is_read_again(tmp_path: Path) -> None:
    """Truncated and rewritten between two looks, longer than before: not read as a
    continuation of the old bytes."""
    path = tmp_path / "run.jsonl"
    path.write_text(HEADER + T1 + "\n")
    log = LogFile(path)
    log.refresh()
    path.write_text(HEADER + T2 + "\n" + T2 + "\n" + T1 + "\n")
    log.refresh()
    assert _targets(log) == ["normalize", "normalize", "assemble"]
    assert log.problem is None


def test_an_error_clears_when_the_log_is_written_again(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("oops\n")
    log = LogFile(path)
    log.refresh()
    assert log.error is not None
    path.write_text(HEADER + T1 + "\n" + T2 + "\n")
    log.refresh()
    assert (log.problem, _events(log)) == (None, 2)
