"""Behaviour of the eval report that `make mutation` found untested: its two tables as
printed (each column, each figure, passed, failed and error rows), its totals and JSON."""

from __future__ import annotations

from innerloop import Usage
from innerloop.evals import CaseResult, CheckResult, EvalReport, Recoveries, RunSummary, Step
from innerloop.evals._report import render_text

PATH = (Step("call", "backoff", "rate_limited_retry"), Step("call", "fallback"))
ADDS = RunSummary(PATH, "model_complete", "4", "4", 2, Usage(1200, 34), 0.0123, 0.25,
                  Recoveries.of(PATH))  # fmt: skip
LOOPS = RunSummary((), "max_turns_exceeded", "x", "x", 3, Usage(10, 5), None, 2.5, Recoveries())
REPORT = EvalReport(
    (
        CaseResult("adds", "passed", (CheckResult("exit_reason", True),), ADDS),
        CaseResult(
            "loops",
            "failed",
            (
                CheckResult("exit_reason", False, "the run ended in max_turns_exceeded"),
                CheckResult("judge", True, "", 0.001, 40),
            ),
            LOOPS,
        ),
        CaseResult("breaks", "error", (), None, "the run raised RuntimeError: boom"),
    ),
    3.5,
    4,
    "smoke",
)

PRINTED = [
    "eval smoke",
    " case    status  exit                turns  tokens      cost     s  recoveries",
    "──────────────────────────────────────────────────────────────────────────────────────────────",
    " adds    passed  model_complete          2   1,234   $0.0123  0.25  backed_off 1, fell_back 1",
    " loops   failed  max_turns_exceeded      3      15  unpriced  2.50  -",
    " breaks  error   -                       -       -   $0.0000     -  -",
    "loops: exit_reason: the run ended in max_turns_exceeded",
    "breaks: the run raised RuntimeError: boom",
    "",
    " passed      1/3 (33%), 1 failed, 1 errors",
    " tokens      1,249 (input 1,210, output 39); judges 40",
    " cost        unpriced",
    " latency     p50 250.0 ms, p90 2.50 s, p95 2.50 s, p99 2.50 s, max 2.50 s",
    " recoveries  backed_off 1/2, fell_back 1/2, retried 0/2, compacted 0/2, repaired 0/2",
    " wall time   3.50 s at concurrency 4",
]


def test_a_report_prints_each_case_and_the_figures() -> None:
    """A passed, a failed (its failure in ``why``) and an error case (no run): each
    column as printed, then the figures over all (an unpriced run makes the cost
    unpriced; latency in ms under a second)."""
    assert [line.rstrip() for line in str(REPORT).splitlines()] == PRINTED


def test_a_reports_totals_and_json() -> None:
    """The totals: pass rate, tokens (the judges' apart), cost (the runs' and the
    judges'), latency percentiles, how many runs took each recovery."""
    data = REPORT.to_dict()
    assert {k: data[k] for k in ("cases", "passed", "failed", "errors", "concurrency")} == {
        "cases": 3,
        "passed": 1,
        "failed": 1,
        "errors": 1,
        "concurrency": 4,
    }
    assert (data["pass_rate"], data["total_tokens"], data["judge_tokens"]) == (1 / 3, 1249, 40)
    assert (data["cost_usd"], data["seconds"], REPORT.ok) == (None, 3.5, False)
    assert data["latency"] == {"p50": 0.25, "p90": 2.5, "p95": 2.5, "p99": 2.5, "max": 2.5}
    assert data["recoveries"] == {
        "backed_off": 1,
        "fell_back": 1,
        "retried": 0,
        "compacted": 0,
        "repaired": 0,
    }
    assert [r["status"] for r in data["results"]] == ["passed", "failed", "error"]
    assert data["results"][2] == {
        "name": "breaks",
        "status": "error",
        "error": "the run raised RuntimeError: boom",
        "checks": [],
        "run": None,
    }
    assert [c.name for c in REPORT.results[1].failures] == ["exit_reason"]
    priced = EvalReport(
        (CaseResult("adds", "passed", (CheckResult("judge", True, "", 0.001, 40),), ADDS),),
        0.5,
        1,
    )
    assert (priced.cost_usd, priced.ok, priced.pass_rate) == (0.0133, True, 1.0)
    assert [line.rstrip() for line in render_text(priced.summary_table()).splitlines()] == [
        " passed      1/1 (100%), 0 failed, 0 errors",
        " tokens      1,234 (input 1,200, output 34); judges 40",
        " cost        $0.0133",
        " latency     p50 250.0 ms, p90 250.0 ms, p95 250.0 ms, p99 250.0 ms, max 250.0 ms",
        " recoveries  backed_off 1/1, fell_back 1/1, retried 0/1, compacted 0/1, repaired 0/1",
        " wall time   0.50 s at concurrency 1",
    ]
    empty = EvalReport((), 0.0, 1)
    assert (empty.pass_rate, empty.cost_usd, empty.latency()["max"]) == (0.0, 0, None)
