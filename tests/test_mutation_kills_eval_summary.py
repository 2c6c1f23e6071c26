"""Behaviour of run summaries that `make mutation` found untested: how a step and the
recoveries read in a report, a run that never answered, the top percentile."""

from __future__ import annotations

from innerloop import HarnessState, Message
from innerloop.evals import Recoveries, RunSummary, Step
from innerloop.evals._summary import percentile


def test_a_step_and_the_recoveries_read_as_a_report_prints_them() -> None:
    """A step reads ``source -> target [guard]``; recoveries list the paths taken in the
    documented order (backed off, fell back, retried, compacted, repaired), and none as
    ``-``."""
    assert str(Step("call", "backoff", "rate_limited_retry")) == (
        "call -> backoff [rate_limited_retry]"
    )
    assert str(Step("check", "assemble")) == "check -> assemble"
    path = [
        Step("check", "repair", "output_invalid"),
        Step("call", "compact", "context_overflow"),
        Step("check", "repair", "output_invalid"),
        Step("call", "call", "transient_retry"),
    ]
    found = Recoveries.of(path)
    assert found == Recoveries(retried=1, compacted=1, repaired=2)
    assert str(found) == "retried 1, compacted 1, repaired 2"
    assert Recoveries() == Recoveries.of([])
    assert str(Recoveries()) == "-"
    assert Recoveries().taken() == {}


def test_a_run_that_never_answered_summarizes_to_empty_text() -> None:
    """A run whose model never answered has the empty text as its text and output."""
    state: HarnessState[None] = HarnessState(history=[Message.user("q")])
    summary = RunSummary.of(state, [])
    assert (summary.text, summary.output) == ("", "")


def test_the_top_percentile_is_the_largest_value() -> None:
    """By nearest rank, the 100th percentile of 101 values is the largest."""
    values = [float(v) for v in range(1, 102)]
    assert percentile(values, 100) == 101.0
    assert percentile(values, 50) == 51.0
