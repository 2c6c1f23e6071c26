"""Event logs read as they grow, and every way a log can be unreadable."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from innerloop._eventlog import SCHEMA
from innerloop.ui._logs import OPENED, LogFile
from innerloop.ui._view import LISTS, RunFold

HEADER = json.dumps({"type": "log_header", "schema": SCHEMA}) + "\n"
T1 = json.dumps({"type": "transition", "source": "idle", "target": "assemble", "guard": None})
T2 = json.dumps({"type": "transition", "source": "assemble", "target": "normalize", "guard": None})


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def _targets(log: LogFile) -> list[str]:
    return [t["target"] for run in log.runs for t in log.view(run).detail()["transitions"]]


def _events(log: LogFile) -> int:
    return sum(run.fold.events for run in log.runs)


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
    assert run.fold.error is not None
    assert run.fold.error.startswith("bad.jsonl:3: not JSON (Expecting property name")


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
    assert [(r.fold.summary()["status"], r.fold.errors) for r in log.runs] == [
        ("finished", 1),
        ("finished", 1),
        ("running", 2),
    ]
    first, deep, typed = (r.fold.error for r in log.runs)
    assert first == "mixed.jsonl:4: not JSON (NaN is not a number JSON allows)"
    assert deep is not None
    assert deep.startswith("mixed.jsonl:8: not JSON (nested deeper than 232 levels")
    assert typed is not None
    assert typed == (
        "mixed.jsonl:12: cannot read a Finished from this data: expected an object (Usage), "
        "got a string ('lots') @ $.usage"
    )
    assert [len(log.view(r).detail()["transitions"]) for r in log.runs] == [2, 1, 1]


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
    assert log.runs[0].fold.error == (
        "odd.jsonl:3: cannot read a Transition from this data: required field missing @ "
        "$.target; required field missing @ $.guard"
    )
    path.write_text(HEADER + '{"no": "type"}\n')
    log = LogFile(path)
    log.refresh()
    assert log.runs[0].fold.error == "odd.jsonl:2: an event without a type"


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


def _run_lines(turns: int) -> list[str]:
    start = {"type": "run_started", "machine": "innerloop", "fingerprint": "f"}
    lines = [json.dumps({**start, "import_path": None, "state": "idle", "t": 0})]
    for n in range(1, turns + 1):
        lines += [
            json.dumps({"type": "transition", "source": "check", "target": "call", "guard": None}),
            json.dumps({"type": "text_delta", "index": 0, "text": "hi", "t": n}),
            json.dumps({"type": "tool_use_start", "index": 1, "id": f"c{n}", "name": "add"}),
            json.dumps(
                {
                    "type": "model_response",
                    "response": {
                        "message": {"role": "assistant", "content": []},
                        "stop_reason": "tool_use",
                        "usage": {"input_tokens": 100 * n, "output_tokens": 10},
                        "model": "claude-sonnet-4-5-20250929",
                        "provider": "anthropic",
                    },
                    "turn": n,
                    "t": n + 0.5,
                }
            ),
            json.dumps(
                {
                    "type": "tool_executed",
                    "tool_use_id": f"c{n}",
                    "name": "add",
                    "is_error": False,
                    "timed_out": False,
                    "duration": 1,
                    "output": "5",
                    "t": n + 0.75,
                }
            ),
        ]
    return lines


MALFORMED = [
    # the plain shapes, each with one field of the wrong type: the converter's error
    {"type": "transition", "source": 1, "target": "b", "guard": None},
    {"type": "transition", "source": "a", "target": "b", "guard": 7},
    {"type": "transition", "source": "a", "target": "b"},
    {"type": "tool_use_start", "index": True, "id": "c", "name": "add"},
    {"type": "tool_use_start", "index": 1.0, "id": "c", "name": "add"},
    {
        "type": "tool_executed",
        "tool_use_id": "c",
        "name": "add",
        "is_error": 0,
        "timed_out": False,
        "duration": 1.0,
        "output": "",
    },
    {
        "type": "tool_executed",
        "tool_use_id": "c",
        "name": "add",
        "is_error": False,
        "timed_out": False,
        "duration": True,
        "output": "",
    },
    {"type": "model_response", "response": {"usage": "lots"}, "turn": 1},
    {"type": "transition", "source": "a", "target": "b", "guard": None, "t": "soon"},
]
"""Events of the wrong shape: each is its run's error, not counted."""

ODD_LINES = [
    '{"type": "transition", "source": "a", "target": "b", "guard": null, "t": NaN}',
    "[" * 100_000 + "]" * 100_000,  # too deep for either reader
    # 210 deep: refused by the fast reader (201 at most), read by the standard one
    '{"type": "text_delta", "index": 0, "text": "x", "deep": ' + "[" * 209 + "]" * 209 + "}",
    '{"type": "transition", "source": "\\ud800", "target": "lone", "guard": null}',
    '{"type": "transition", "source": "a", "target": "b", "guard": null}]',
    '{"type": "transition", "source": "a", "target": "b", "guard": null, "t": 1e400}',
    '"a string"',
    '{"no": "type"}',
    '{"type": "transition", "source": "\t", "target": "b", "guard": null}',
]
"""Lines that are not JSON, or odd JSON: each read as the standard reader reads it."""


def _full_summaries(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Each run's summary, error and error count as the page read a log before the fast
    path: every line through the standard JSON reader, every event through the converter,
    with its lists."""
    from innerloop.ui import _view
    from innerloop.ui._logs import _parse

    monkeypatch.setattr(_view, "QUICK", {})
    runs: list[RunFold] = []
    for n, raw in enumerate(path.read_bytes().split(b"\n")[1:-1], start=2):
        where = f"{path.name}:{n}"
        try:
            data = _parse(raw)
        except ValueError as exc:
            runs[-1].fail(where, f"not JSON ({exc})")
            continue
        if not isinstance(data, dict):
            runs[-1].fail(where, f"a JSON {type(data).__name__}, not an event object")
            continue
        if data.get("type") == "run_started":
            runs.append(RunFold())
        runs[-1].add(data, where)
    monkeypatch.undo()
    return [{**r.summary(), "error": r.error, "errors": r.errors} for r in runs]


def test_the_fast_summary_is_the_full_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The list's summaries (a fast JSON reader, the frequent events built without the
    converter, no lists kept) equal what reading every line through the standard reader
    and every event through the converter gives, malformed lines included; the lists are
    read when a run is opened, the same way."""
    body = _run_lines(3)
    lines = [*body, *(json.dumps(e) for e in MALFORMED), *body[1:]]
    lines += [*_run_lines(2), *ODD_LINES, *_run_lines(1)[1:]]
    path = tmp_path / "mixed.jsonl"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    log = LogFile(path)
    log.refresh()
    fast = [
        {**run.fold.summary(), "error": run.fold.error, "errors": run.fold.errors}
        for run in log.runs
    ]
    full = _full_summaries(path, monkeypatch)
    assert fast == full
    assert [(s["events"], s["errors"], s["turns"]) for s in fast] == [(31, 9, 6), (18, 7, 3)]
    assert fast[0]["input_tokens"] == 2 * (100 + 200 + 300)
    assert [(r.fold.lists, r.view) for r in log.runs] == [({k: [] for k in LISTS}, None)] * 2
    opened = [log.view(run) for run in log.runs]
    assert [{**v.summary(), "error": v.error, "errors": v.errors} for v in opened] == full
    assert [v.count("transitions") for v in opened] == [6, 4]
    small = LogFile(path, chunk=7)  # lines cut across reads, when listed and when opened
    small.refresh()
    assert [
        {**r.fold.summary(), "error": r.fold.error, "errors": r.fold.errors} for r in small.runs
    ] == full
    assert [small.view(r).detail() for r in small.runs] == [v.detail() for v in opened]


def _child_lines(path: str, turns: int) -> list[str]:
    """A child run's lines as its parent's log carries them (``child_event`` by path)."""
    wrapped = []
    for line in _run_lines(turns):
        event = json.loads(line)
        t = event.pop("t", None)
        wrapped.append(json.dumps({"type": "child_event", "path": path, "event": event, "t": t}))
    return wrapped


def test_child_runs_are_listed_as_summaries_and_opened_with_their_lists(tmp_path: Path) -> None:
    """The list's pass keeps a run's child runs by path as summaries only (their lists
    empty: what the run's tree shows), equal to the summaries of the run opened, whose
    children carry their lists; a malformed child line is its child's error both ways."""
    top = _run_lines(1)
    bad = {"type": "child_event", "path": "web#2", "event": MALFORMED[0], "t": 2}
    lines = [top[0], *_child_lines("web#1", 2), *_child_lines("web#2", 1), json.dumps(bad)]
    lines += [*_child_lines("web#2/leaf", 1), *top[1:]]
    path = tmp_path / "nested.jsonl"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    log = LogFile(path)
    log.refresh()
    (run,) = log.runs
    listed = run.fold.children
    assert list(listed) == ["web#1", "web#2", "web#2/leaf"]
    assert [c.lists for c in listed.values()] == [{k: [] for k in LISTS}] * 3
    opened = log.view(run).children
    assert list(opened) == list(listed)
    assert [(c.summary(), c.error) for c in opened.values()] == [
        (c.summary(), c.error) for c in listed.values()
    ]
    assert [(c.summary()["turns"], c.count("tools"), c.errors) for c in opened.values()] == [
        (2, 2, 0),
        (1, 1, 1),
        (1, 1, 0),
    ]
    assert opened["web#2"].error == (
        f"nested.jsonl:{lines.index(json.dumps(bad)) + 2} (child web#2): cannot read a "
        "Transition from this data: expected a string, got a number (1) @ $.source"
    )
    assert (run.fold.summary()["events"], run.fold.errors) == (len(lines), 0)


def test_opened_runs_follow_the_log_and_only_the_last_ones_are_kept(tmp_path: Path) -> None:
    """A run's lists are read from its lines when opened and grow with the log; the lists
    of the runs opened longest ago are let go and read again if asked for."""
    path = tmp_path / "runs.jsonl"
    path.write_text(HEADER + "\n".join(line for _ in range(OPENED + 1) for line in _run_lines(2)))
    log = LogFile(path, chunk=100)  # lines cut across reads
    log.refresh()
    last = log.runs[-1]
    assert log.view(last).count("tools") == 1  # its last line is not yet whole
    _append(path, "\n" + "\n".join(_run_lines(1)[1:]) + "\n")
    log.refresh()
    assert log.view(last).count("tools") == 3
    assert log.view(last).summary()["turns"] == last.fold.summary()["turns"] == 3
    views = [log.view(run) for run in log.runs]
    assert [run.view is not None for run in log.runs] == [False] + [True] * OPENED
    again = log.view(log.runs[0])
    assert again is not views[0]
    assert again.detail() == views[0].detail()
    assert [v.count("tools") for v in views] == [2] * OPENED + [3]
    assert [v.count("turn_usage") for v in views] == [2] * OPENED + [3]


def test_a_log_emptied_is_a_change(tmp_path: Path) -> None:
    """A log truncated to nothing forgets its runs, and says it changed."""
    path = tmp_path / "run.jsonl"
    path.write_text(HEADER + T1 + "\n")
    log = LogFile(path)
    log.refresh()
    path.write_text("")
    assert log.refresh() is True
    assert (log.runs, log.problem) == ([], None)
    assert log.refresh() is False


def _started(state: str, run_id: str | None = None, answered: str | None = None) -> str:
    """A ``run_started`` line; one that resumes with the answer to ``answered``."""
    line: dict[str, Any] = {
        "type": "run_started",
        "machine": "innerloop",
        "fingerprint": "f",
        "import_path": None,
        "state": state,
        "run_id": run_id,
    }
    if answered is not None:
        line["resumed"] = {"interrupt": {"id": answered, "answered": True, "answer": True}}
    return json.dumps(line) + "\n"


def _finished(final: str, asked: str | None = None) -> str:
    usage = {"input_tokens": 1, "output_tokens": 1}
    interrupt: dict[str, Any] = {"id": asked, "kind": "approval", "payload": {}, "state": "approve"}
    line = {
        "type": "finished",
        "exit_reason": final,
        "final_state": final,
        "turns": 1,
        "usage": usage,
        "cost_usd": 0.0,
        "interrupt": interrupt if asked else None,
    }
    return json.dumps(line) + "\n"


@pytest.mark.parametrize(
    ("first_id", "second_id", "answered", "runs"),
    [
        (None, None, "approve:1", 1),  # the answer to its question: the same run, one row
        ("r1", "r1", "approve:1", 1),
        (None, None, "approve:2", 2),  # another question's answer: another run
        ("r1", "r2", "approve:1", 2),  # another stored run
        (None, None, None, 2),  # a run from the start
    ],
)
def test_a_run_resumed_after_its_answer_is_the_same_run(
    tmp_path: Path, first_id: str | None, second_id: str | None, answered: str | None, runs: int
) -> None:
    """A ``run_started`` that resumes the run that ended suspended, with the answer to
    the question it asked (same interrupt id, same store run id), goes on in that run:
    running again, then finished, its answer among its messages."""
    path = tmp_path / "run.jsonl"
    path.write_text(
        HEADER + _started("idle", first_id) + T1 + "\n" + _finished("suspended", "approve:1")
    )
    log = LogFile(path)
    log.refresh()
    assert log.runs[0].fold.summary()["status"] == "suspended"
    _append(path, _started("approve", second_id, answered) + T2 + "\n")
    log.refresh()
    assert len(log.runs) == runs
    assert log.runs[-1].fold.summary()["status"] == "running"
    _append(path, _finished("model_complete"))
    log.refresh()
    assert [r.fold.summary()["status"] for r in log.runs] == ["suspended", "finished"][2 - runs :]
    if runs == 1:
        view = log.view(log.runs[0]).detail()
        assert [t["target"] for t in view["transitions"]] == ["assemble", "normalize"]
        assert [(m["role"], m["text"]) for m in view["messages"]] == [("answer", "approve:1: true")]
        assert view["resumptions"] == 1
