"""Behaviour of the eval checks that `make mutation` found untested: a passing check
reported as passed (not dropped as "does not apply"), ``MaxSeconds``' boundary, the bounds
on what a failure message renders, a check's thread that never holds the program."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from innerloop import Usage
from innerloop.evals import (
    Case,
    Check,
    CheckContext,
    CheckResult,
    Contains,
    Dataset,
    Equals,
    MatchesSchema,
    MaxSeconds,
    Predicate,
    Recoveries,
    RunSummary,
    run_eval_sync,
)
from innerloop.evals._checks import REASON_CHARS, bounded, off_the_loop
from innerloop.fsm import HarnessState
from innerloop.testing import reply
from tests.evals.test_evals import harness_for


def _ctx(output: Any = "ok", *, seconds: float | None = 1.0, expected: Any = None) -> CheckContext:
    summary = RunSummary((), "model_complete", output, str(output), 1, Usage(10, 5), 0.0, seconds,
                         Recoveries())  # fmt: skip

    async def no_judge(model: str | None, prompt: str) -> HarnessState[Any]:
        raise AssertionError("no judge here")

    return CheckContext("c", "q", expected, summary, HarnessState(), no_judge)


def _evaluate(check: Check, ctx: CheckContext) -> CheckResult | None:
    return asyncio.run(check.evaluate(ctx))


def test_max_seconds_passes_a_run_that_took_exactly_the_limit() -> None:
    """Protects ``MaxSeconds``' boundary: "at most ``seconds``" holds at the limit itself
    (``<=``), and fails just above it."""
    assert _evaluate(MaxSeconds(2.5), _ctx(seconds=2.5)) == CheckResult("max_seconds", True)
    assert _evaluate(MaxSeconds(2.5), _ctx(seconds=2.501)) == CheckResult(
        "max_seconds", False, "took 2.501 s, over 2.5 s"
    )
    assert _evaluate(MaxSeconds(0), _ctx(seconds=None)) == CheckResult("max_seconds", True)


def test_each_passing_check_is_reported_as_passed_not_as_not_applied() -> None:
    """Protects each check's passing result: a check that passes is listed in the case's
    checks as passed, by name (a check that returned None, "does not apply", would drop
    out of the report unseen while the case still passed)."""
    checks: list[Check] = [
        Equals("4"),
        Contains("4"),
        MatchesSchema({"type": "integer"}),
        Predicate(lambda ctx: ctx.output == "4", "is_four"),
        Predicate(lambda ctx: "", "no_reason"),
        MaxSeconds(600),
    ]
    harness = harness_for({"q": [reply("4")]})
    result = run_eval_sync(Dataset([Case("c", "q", "4", checks)]), harness).results[0]
    assert result.status == "passed"
    assert [(c.name, c.passed, c.reason) for c in result.checks] == [
        ("exit_reason", True, ""),
        ("equals", True, ""),
        ("contains", True, ""),
        ("matches_schema", True, ""),
        ("is_four", True, ""),
        ("no_reason", True, ""),
        ("max_seconds", True, ""),
    ]


def test_a_failing_predicate_says_why_and_a_passing_one_is_listed() -> None:
    """A predicate's verdict, checked directly: true passes (listed), false fails with
    the reason ``the predicate is false``, a string fails with itself as the reason."""
    assert _evaluate(Predicate(lambda ctx: True, "t"), _ctx()) == CheckResult("t", True)
    assert _evaluate(Predicate(lambda ctx: False, "f"), _ctx()) == CheckResult(
        "f", False, "the predicate is false"
    )
    assert _evaluate(Predicate(lambda ctx: "too short", "s"), _ctx()) == CheckResult(
        "s", False, "too short"
    )


def test_a_reason_is_cut_at_exactly_its_limit() -> None:
    """Protects the bound on a check's reason (2,000 characters): one of exactly 2,000
    is kept whole; one more is cut there, saying how many more there were."""
    assert REASON_CHARS == 2_000
    assert bounded("x" * 2_000) == "x" * 2_000
    assert bounded("x" * 2_001) == "x" * 2_000 + "... (1 more characters)"
    assert CheckResult("n", False, "y" * 2_003).reason == "y" * 2_000 + "... (3 more characters)"


def test_a_failure_message_renders_a_value_in_at_most_80_characters() -> None:
    """Protects the short repr of values in failure messages: a long string is shown as
    80 characters (its middle elided), a repr of exactly 80 whole, a longer one cut to 77
    and ``...``."""
    long = "a" * 100
    failed = _evaluate(Equals("b"), _ctx(long))
    assert failed is not None
    shown = failed.reason.removeprefix("expected 'b', got ")
    assert shown == "'" + "a" * 37 + "..." + "a" * 38 + "'"
    assert len(shown) == 80
    exact = _evaluate(Equals("b"), _ctx("a" * 78))
    assert exact is not None
    assert exact.reason == "expected 'b', got '" + "a" * 78 + "'"
    nested = _evaluate(Equals("b"), _ctx({"k": "x" * 200}))
    assert nested is not None
    assert nested.reason == "expected 'b', got {'k': '" + "x" * 37 + "..." + "x" * 30 + "..."
    assert len(nested.reason.removeprefix("expected 'b', got ")) == 80


def test_a_schema_failure_names_at_most_six_unexpected_properties() -> None:
    """Protects the bound on the unexpected properties a schema failure names: six, in
    order, of the eight the output has."""
    check = MatchesSchema({"type": "object", "additionalProperties": False})
    extra = {f"p{i}": i for i in range(8)}
    assert check.check(extra) == CheckResult(
        "matches_schema",
        False,
        "(root): additional properties are not allowed "
        "('p0', 'p1', 'p2', 'p3', 'p4', 'p5' unexpected)",
    )


def test_a_checks_thread_never_holds_the_program_at_exit() -> None:
    """Protects ``off_the_loop``'s daemon thread: a check still running when the program
    ends (given up by its time limit) does not keep the interpreter alive."""

    def where() -> tuple[str, bool]:
        thread = threading.current_thread()
        return thread.name, thread.daemon

    async def ask() -> tuple[str, bool]:
        return await off_the_loop(where)

    assert asyncio.run(ask()) == ("innerloop-check", True)
