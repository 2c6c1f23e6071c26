"""What the page shows of a run, folded from its event dicts."""

from __future__ import annotations

from typing import Any

from innerloop._eventlog import split_runs
from innerloop.ui._view import OUTPUT_CHARS, fold, run_detail, run_summary

USAGE = {
    "input_tokens": 1000,
    "output_tokens": 200,
    "cache_read_tokens": 0,
    "cache_creation_tokens": 0,
    "thinking_tokens": 0,
}


def _response(model: str = "claude-sonnet-4-5-20250929") -> dict[str, Any]:
    return {
        "message": {"role": "assistant", "content": []},
        "stop_reason": "tool_use",
        "usage": USAGE,
        "model": model,
        "provider": "anthropic",
    }


EVENTS: list[dict[str, Any]] = [
    {"type": "transition", "source": "idle", "target": "assemble", "guard": None, "t": 0.1},
    {"type": "tool_use_start", "index": 1, "id": "t1", "name": "add", "t": 0.2},
    {"type": "model_response", "response": _response(), "turn": 1, "t": 0.3},
    {
        "type": "transition",
        "source": "stream",
        "target": "execute",
        "guard": "has_tool_calls",
        "t": 0.35,
    },
    {
        "type": "tool_executed",
        "tool_use_id": "t1",
        "name": "add",
        "is_error": False,
        "timed_out": False,
        "duration": 0.25,
        "output": "x" * (OUTPUT_CHARS + 5),
        "t": 0.6,
    },
    {
        "type": "backoff",
        "attempt": 1,
        "delay": 1.0,
        "retry_after": None,
        "total_wait": 1.0,
        "seq": 9,
    },
]


def test_split_runs_ends_each_run_at_finished() -> None:
    """A log of two finished runs and one going on is three runs."""
    a, b, c = {"type": "transition"}, {"type": "finished"}, {"type": "text_delta"}
    assert split_runs([a, b, a, b, c]) == [[a, b], [a, b], [c]]
    assert split_runs([]) == []


def test_split_runs_starts_each_run_at_run_started() -> None:
    """A run cut off before its finished line ends where the next run starts."""
    s, a, b = {"type": "run_started"}, {"type": "transition"}, {"type": "finished"}
    assert split_runs([s, a, s, a, b, s, a]) == [[s, a], [s, a, b], [s, a]]


def test_a_running_run_sums_its_turns() -> None:
    """Without finished: running, in the last transition's target, tokens and cost summed
    from the turns (claude-sonnet-4-5: $3 in, $15 out per million tokens)."""
    assert run_summary(EVENTS) == {
        "status": "running",
        "exit_reason": None,
        "current": "execute",
        "turns": 1,
        "input_tokens": 1000,
        "output_tokens": 200,
        "cost_usd": 0.006,
        "events": 6,
        "machine": None,
        "prompt": None,
        "resumptions": 0,
    }


def test_a_run_not_started_is_in_the_initial_state() -> None:
    """No transition yet: the machine's initial state, nothing spent."""
    assert run_summary([], "idle")["current"] == "idle"
    assert run_summary([], "idle")["cost_usd"] == 0


def test_a_finished_run_reads_its_finished_event() -> None:
    """The finished event's figures win (its turns count every turn, failed calls too)."""
    end = {
        "type": "finished",
        "exit_reason": "model_complete",
        "final_state": "model_complete",
        "turns": 3,
        "usage": USAGE,
        "cost_usd": 0.5,
    }
    summary = run_summary([*EVENTS, end])
    assert summary == {
        "status": "finished",
        "exit_reason": "model_complete",
        "current": "model_complete",
        "turns": 3,
        "input_tokens": 1000,
        "output_tokens": 200,
        "cost_usd": 0.5,
        "events": 7,
        "machine": None,
        "prompt": None,
        "resumptions": 0,
    }


def test_a_model_without_a_price_has_an_unknown_cost() -> None:
    """Unknown, not zero: the page shows a dash."""
    events = [{"type": "model_response", "response": _response("my-own-model"), "turn": 1}]
    assert run_detail(events)["turn_usage"][0]["cost_usd"] is None
    assert run_summary(events)["cost_usd"] is None


def test_detail_lists_transitions_tools_turns_and_recoveries() -> None:
    """Each with its time; a tool's output cut to OUTPUT_CHARS; seq dropped."""
    detail = run_detail(EVENTS)
    assert detail["transitions"] == [
        {"t": 0.1, "source": "idle", "target": "assemble", "guard": None},
        {"t": 0.35, "source": "stream", "target": "execute", "guard": "has_tool_calls"},
    ]
    assert detail["tools"] == [
        {
            "id": "t1",
            "name": "add",
            "started": 0.2,
            "t": 0.6,
            "duration": 0.25,
            "outcome": "ok",
            "output": "x" * OUTPUT_CHARS + "…",
        }
    ]
    assert detail["turn_usage"] == [
        {
            "turn": 1,
            "t": 0.3,
            "model": "claude-sonnet-4-5-20250929",
            "input_tokens": 1000,
            "output_tokens": 200,
            "cache_read_tokens": 0,
            "cost_usd": 0.006,
            "stop_reason": "tool_use",
        }
    ]
    assert detail["recoveries"] == [
        {"type": "backoff", "attempt": 1, "delay": 1.0, "retry_after": None, "total_wait": 1.0}
    ]


def test_a_tool_timeout_and_a_tool_error_are_told_apart() -> None:
    """A timed-out call is also an error; the page says which."""
    base = {"type": "tool_executed", "name": "x", "duration": 1.0, "output": ""}
    events = [
        {**base, "tool_use_id": "a", "is_error": True, "timed_out": True},
        {**base, "tool_use_id": "b", "is_error": True, "timed_out": False},
    ]
    assert [t["outcome"] for t in run_detail(events)["tools"]] == ["timeout", "error"]


def test_an_ill_typed_event_is_the_runs_error_and_the_next_lines_are_read() -> None:
    """Each event is structured as it is read: a usage, a cost or a time of the wrong type
    is the run's error (the first, with its line; all counted), never a field the page
    reads, and the lines after it still count."""
    response = {**_response(), "usage": {"input_tokens": 7, "output_tokens": "x"}}
    step = {"type": "transition", "source": "idle", "target": "assemble", "guard": None}
    end = {"type": "finished", "exit_reason": "x", "final_state": "y", "turns": 1}
    events: list[dict[str, Any]] = [
        {"type": "model_response", "response": response, "turn": 1},
        {**step, "t": "3"},
        {**end, "usage": USAGE, "cost_usd": "abc"},
        {**step, "t": 1.5},
    ]
    run = fold(events)
    assert run.error == (
        "event 1: cannot read a ModelResponseEvent from this data: expected an integer, got "
        "a string ('x') @ $.response.usage.output_tokens"
    )
    assert run.errors == 3
    assert run.detail()["transitions"] == [
        {"t": 1.5, "source": "idle", "target": "assemble", "guard": None}
    ]
    assert (run.summary()["status"], run.summary()["turns"]) == ("running", 0)
