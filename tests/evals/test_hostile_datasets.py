"""Datasets cannot exhaust the host: YAML aliases are bounded when read, every value a
report renders is bounded, patterns from data cannot backtrack for ever, and a check that
takes too long fails its case, named, while the other cases run on."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from innerloop import Harness, HarnessParams
from innerloop.evals import (
    Case,
    CheckContext,
    Dataset,
    DatasetError,
    Equals,
    MatchesSchema,
    Predicate,
    run_eval_sync,
)
from innerloop.evals._checks import REASON_CHARS, CheckResult
from innerloop.evals._dataset import YAML_ALIAS_BUDGET
from innerloop.evals._report import CaseResult
from innerloop.testing import FakeClock, FakeProvider, reply


def echo_harness() -> Harness[Any]:
    def answer(request: Any) -> Any:
        return reply("an answer")

    return Harness(HarnessParams(model="scripted:m"), [FakeProvider(answer)], clock=FakeClock())


class TestYamlAliases:
    def test_an_alias_bomb_is_refused_naming_the_budget(self, tmp_path: Path) -> None:
        """Nine levels of ten aliases (a file under a kilobyte, billions of values expanded)
        are refused when read, naming the budget, before any value is expanded."""
        path = tmp_path / "bomb.yaml"
        path.write_text(
            "cases:\n  - inputs: hi\n    metadata:\n      a0: &a0 [lol, lol, lol, lol, lol]\n"
            + "".join(
                f"      a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
            )
            + "    expected_output: *a9\n"
        )
        with pytest.raises(DatasetError) as caught:
            Dataset.load(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: its YAML aliases expand it by ")
        assert f"past the {YAML_ALIAS_BUDGET:,} a dataset may add through aliases" in message
        assert "(YAML_ALIAS_BUDGET)" in message

    def test_aliases_within_the_budget_are_read(self, tmp_path: Path) -> None:
        """Sharing a mapping between cases, as YAML files do, is read as written."""
        path = tmp_path / "shared.yaml"
        path.write_text(
            "cases:\n  - name: a\n    inputs: hi\n    metadata: &m {team: x, tags: [1, 2]}\n"
            "  - name: b\n    inputs: ho\n    metadata: *m\n"
        )
        dataset = Dataset.load(path)
        assert [dict(c.metadata) for c in dataset.cases] == [{"team": "x", "tags": [1, 2]}] * 2

    def test_a_value_that_holds_itself_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "loop.yaml"
        path.write_text("cases:\n  - inputs: hi\n    expected_output: &x [1, *x]\n")
        with pytest.raises(DatasetError) as caught:
            Dataset.load(path)
        assert str(caught.value) == (
            f"{path}: a value holds itself (a YAML alias inside its own anchor); a dataset "
            "is a tree of plain values"
        )

    def test_long_shared_strings_count_by_their_length(self, tmp_path: Path) -> None:
        """A long string used many times through an alias counts a value per 100
        characters each time: 2,000 uses of a 10,000-character string are refused."""
        path = tmp_path / "strings.yaml"
        uses = ", ".join(["*s"] * 2_000)
        path.write_text(
            f"cases:\n  - inputs: hi\n    metadata: {{s: &s {'x' * 10_000}}}\n"
            f"    expected_output: [{uses}]\n"
        )
        with pytest.raises(DatasetError, match="YAML_ALIAS_BUDGET"):
            Dataset.load(path)


class Counted:
    """A value that counts how often it is rendered."""

    def __init__(self, seen: list[int]) -> None:
        self.seen = seen

    def __repr__(self) -> str:
        self.seen.append(1)
        return "c"


class TestRenderedValues:
    def test_a_failure_renders_a_bounded_part_of_a_huge_value(self) -> None:
        """Equals' failure message renders a few items of a huge expected value, not all
        of them (a shared structure can be billions of items long)."""
        seen: list[int] = []
        want = [Counted(seen) for _ in range(1_000)]
        report = run_eval_sync(Dataset([Case("c", "hi", want, [Equals()])]), echo_harness())
        reason = report.results[0].failures[0].reason
        assert reason.startswith("expected [c, c, c, c, c, c, ...], got 'an answer'")
        assert len(seen) == 6

    def test_reasons_and_errors_are_bounded(self) -> None:
        """A check's reason and a case's error are cut to REASON_CHARS characters, saying
        how many more there were."""
        result = CheckResult("p", False, "x" * (REASON_CHARS + 500))
        assert result.reason == "x" * REASON_CHARS + "... (500 more characters)"
        case = CaseResult("c", "error", error="y" * (REASON_CHARS + 1))
        assert case.error == "y" * REASON_CHARS + "... (1 more characters)"

        def verbose(ctx: CheckContext) -> str:
            return "why " * 100_000

        report = run_eval_sync(
            Dataset([Case("c", "hi", checks=[Predicate(verbose)])]), echo_harness()
        )
        assert len(report.results[0].failures[0].reason) < REASON_CHARS + 40
        assert len(str(report)) < 20_000


class TestPatterns:
    def test_a_backtracking_pattern_fails_the_check_in_its_time(self) -> None:
        """A pattern that would backtrack for ever (``re`` holds the interpreter on it) is
        matched under a time limit: the check fails, naming the pattern."""
        check = MatchesSchema({"type": "string", "pattern": "^(a|aa)+$"}, pattern_seconds=0.2)
        result = check.check(json.dumps("a" * 60 + "!"))  # the text, parsed as JSON
        assert result == CheckResult(
            "matches_schema",
            False,
            "the pattern '^(a|aa)+$' took over 0.2 s on the output (MatchesSchema's "
            "pattern_seconds)",
        )

    def test_property_patterns_are_timed_too(self) -> None:
        """patternProperties and additionalProperties match property names with the same
        engine and deadline."""
        key = "a" * 60 + "!"
        for schema in (
            {"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "string"}}},
            {
                "type": "object",
                "patternProperties": {"^(a|aa)+$": {}},
                "additionalProperties": False,
            },
        ):
            result = MatchesSchema(schema, pattern_seconds=0.1).check({key: 1})
            assert not result.passed
            assert result.reason.startswith("the pattern '^(a|aa)+$' took")

    def test_patterns_still_match_as_json_schema_says(self) -> None:
        """The safe engine keeps the keywords' meaning: pattern, patternProperties and
        additionalProperties pass and fail as jsonschema's own would."""
        schema = {
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": "^[a-z]+-[0-9]+$"}},
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
        }
        check = MatchesSchema(schema)
        assert check.check({"id": "ab-12", "x-n": 3}).passed
        assert check.check({"id": "AB"}).reason == "id: 'AB' does not match '^[a-z]+-[0-9]+$'"
        assert check.check({"id": "ab-1", "x-n": "s"}).reason == "x-n: 's' is not of type 'integer'"
        assert check.check({"id": "ab-1", "other": 1}).reason == (
            "(root): additional properties are not allowed ('other' unexpected)"
        )
        extra = MatchesSchema({"additionalProperties": {"type": "string"}})
        assert extra.check({"a": 1}).reason == "a: 1 is not of type 'string'"

    def test_unevaluated_properties_beside_patterns_is_refused(self) -> None:
        with pytest.raises(ValueError, match="unevaluatedProperties with patternProperties"):
            MatchesSchema({"patternProperties": {"^a": {}}, "unevaluatedProperties": False})


class TestCheckTimeLimit:
    def test_a_slow_check_fails_its_case_named_and_the_others_run_on(self) -> None:
        """A check past check_seconds fails its case with a reason naming the check and the
        limit; the other cases finish meanwhile (the check runs off the event loop)."""
        release = threading.Event()
        threads: list[int] = []

        def stuck(ctx: CheckContext) -> bool:
            threads.append(threading.get_ident())
            release.wait(30)
            return True

        dataset = Dataset([Case("slow", "hi", checks=[Predicate(stuck)]), Case("quick", "ho")])
        try:
            report = run_eval_sync(dataset, echo_harness(), check_seconds=0.05)
        finally:
            release.set()
        slow, quick = report.results
        assert (slow.status, quick.status) == ("failed", "passed")
        assert slow.failures == (
            CheckResult("stuck", False, "the check took over 0.05 s (the eval's check_seconds)"),
        )
        assert threads
        assert threads[0] != threading.get_ident()

    def test_a_checks_own_timeout_error_is_its_error(self) -> None:
        """A check that raises TimeoutError itself (not past the limit) is an error of the
        check, as any exception is."""

        def raises(ctx: CheckContext) -> bool:
            raise TimeoutError("its own")

        report = run_eval_sync(
            Dataset([Case("c", "hi", checks=[Predicate(raises)])]), echo_harness()
        )
        assert report.results[0].error == "check raises raised TimeoutError: its own"

    def test_check_seconds_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="check_seconds must be above 0"):
            run_eval_sync(Dataset([Case("c", "hi")]), echo_harness(), check_seconds=0)
