"""Behaviour of running evals and reading datasets that `make mutation` found untested:
the judge's default model and its one repair, the order of a case's checks, the runner's
defaults, a dataset's accepted keys and suffixes, the depth and alias bounds at their
limits."""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from innerloop._json import MAX_JSON_DEPTH
from innerloop.evals import (
    Case,
    Contains,
    Dataset,
    DatasetError,
    Judge,
    run_eval,
    run_eval_sync,
)
from innerloop.testing import ScriptedProvider, reply
from tests.evals.test_evals import harness_for


def test_a_judge_without_a_model_asks_the_harnesss_model() -> None:
    """A ``Judge`` with no model, in an eval given no ``judge_model``, asks the harness's
    own model through its providers (the test model grades "right" answers passed)."""
    harness = harness_for({"q": [reply("right")]})
    dataset = Dataset([Case("c", "q", checks=[Judge("Is it right?")])])
    result = run_eval_sync(dataset, harness).results[0]
    assert result.status == "passed"
    assert [(c.name, c.passed, c.reason) for c in result.checks] == [
        ("exit_reason", True, ""),
        ("judge", True, "verdict True"),
    ]


def test_a_judge_is_repaired_once() -> None:
    """A judge whose answer is no verdict is asked to repair it once: two requests in
    all, then the case is an error naming the judge's failed run."""
    judge = ScriptedProvider([reply("no idea"), reply("still no idea"), reply("third")])
    harness = harness_for({"q": [reply("x")]})
    dataset = Dataset([Case("c", "q", checks=[Judge("anything")])])
    report = run_eval_sync(dataset, harness, judge_model="scripted:j", judge_providers=[judge])
    assert report.results[0].status == "error"
    assert len(judge.requests) == 2


def test_a_cases_own_checks_come_before_the_datasets() -> None:
    """A case's results list the finish check, the case's own checks, then the dataset's
    (in that order)."""
    harness = harness_for({"q": [reply("yes no")]})
    dataset = Dataset(
        [Case("c", "q", checks=[Contains("yes", case_sensitive=True)])],
        checks=[Contains("no")],
    )
    result = run_eval_sync(dataset, harness).results[0]
    assert [(c.name, c.passed) for c in result.checks] == [
        ("exit_reason", True),
        ("contains", True),
        ("contains", True),
    ]
    assert [
        c.reason
        for c in run_eval_sync(
            Dataset([Case("c", "q", checks=[Contains("zzz")])], checks=[Contains("nope")]),
            harness_for({"q": [reply("yes")]}),
        )
        .results[0]
        .checks
    ] == ["", "'zzz' not in 'yes'", "'nope' not in 'yes'"]


def test_a_dataset_checks_judges_in_its_own_list_first() -> None:
    """The judges are prepared before any case runs, the dataset's own first: with two
    judge models no provider serves, the error names the dataset's."""
    dataset = Dataset(
        [Case("c", "q", checks=[Judge("x", "beta:y")])], checks=[Judge("x", "alpha:y")]
    )
    with pytest.raises(ValueError, match=r"^no provider given for alpha"):
        run_eval_sync(dataset, harness_for({}))


def test_the_runners_defaults() -> None:
    """Eight runs at a time by default (sync and async), one at a time allowed; the
    report's wall time is the eval's own (well under a minute here)."""
    dataset = Dataset([Case("c", "q")])
    report = run_eval_sync(dataset, harness_for({"q": [reply("a")]}))
    assert report.concurrency == 8
    assert 0 <= report.seconds < 60
    assert asyncio.run(run_eval(dataset, harness_for({"q": [reply("a")]}))).concurrency == 8
    one = run_eval_sync(dataset, harness_for({"q": [reply("a")]}), concurrency=1)
    assert (one.concurrency, one.results[0].status) == (1, "passed")


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_a_dataset_nested_exactly_to_the_limit_is_read() -> None:
    """``MAX_JSON_DEPTH`` levels of lists and mappings are read (the whole file counts:
    its top mapping, ``cases``, the case and its ``metadata`` are four); one more is
    refused, also beside a shallow sibling."""

    def case_holding(**metadata: Any) -> dict[str, Any]:
        return {"cases": [{"inputs": "q", "metadata": metadata}]}

    read = Dataset.from_data(case_holding(x=_nested(MAX_JSON_DEPTH - 4)))
    assert [c.prompt for c in read.cases] == ["q"]
    deep = case_holding(x=_nested(MAX_JSON_DEPTH - 3))
    with pytest.raises(DatasetError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        Dataset.from_data(deep)
    beside = case_holding(a=[[]], x=_nested(MAX_JSON_DEPTH - 3), z=[[]])
    with pytest.raises(DatasetError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        Dataset.from_data(beside)


def test_aliases_are_counted_to_the_value() -> None:
    """Protects the alias budget's count: a list of 998 copies of one small number, a
    short string and a 250-character one (a string counts one value per 100 characters,
    plus one) is 1,003 values with the list itself; used 201 times, it adds 200 x 1,003
    = 200,600 values to what the file spells out (its long name counted once)."""
    shared: list[Any] = [7] * 998 + ["s", "x" * 250]
    data = {"name": "n" * 250, "cases": [], "x": shared, "y": [shared] * 200}
    with pytest.raises(DatasetError) as refused:
        Dataset.from_data(data, source="bomb")
    assert str(refused.value) == (
        "bomb: its YAML aliases expand it by 200,600 values, past the 100,000 a dataset may "
        "add through aliases (YAML_ALIAS_BUDGET); write the values out, or share less"
    )


def test_a_yml_file_and_a_schema_key_are_read(tmp_path: Path) -> None:
    """A ``.yml`` dataset is read as YAML, and a ``$schema`` key (pydantic-evals writes
    one) is allowed."""
    path = tmp_path / "cases.yml"
    path.write_text("$schema: cases.schema.json\ncases:\n  - name: a\n    inputs: q\n")
    assert Dataset.load(path).cases == (Case("a", "q"),)
    as_json = tmp_path / "cases.json"
    as_json.write_text(json.dumps({"$schema": "x", "cases": [{"inputs": "q"}]}))
    assert Dataset.load(as_json).cases == (Case("case 1", "q"),)


def test_a_bad_evaluator_argument_names_where() -> None:
    """An evaluator whose arguments its check refuses (a ValueError: a schema that is not
    one) is a DatasetError naming the case and the evaluator."""
    data = {"cases": [{"inputs": "q", "evaluators": [{"MatchesSchema": {"type": "nope"}}]}]}
    with pytest.raises(DatasetError) as refused:
        Dataset.from_data(data, source="d.yaml")
    assert str(refused.value).startswith(
        "d.yaml: case 'case 1': evaluators[0]: MatchesSchema: MatchesSchema: the schema is "
        "not valid: "
    )


def test_an_unregistered_predicate_is_shown_cut_to_120_characters() -> None:
    """A long unregistered predicate name is shown as the first 120 characters of its
    repr."""
    name = "p" * 200
    data = {"cases": [{"inputs": "q", "evaluators": [{"Predicate": name}]}]}
    with pytest.raises(DatasetError) as refused:
        Dataset.from_data(data, source="d")
    shown = repr(name)[:120]
    assert str(refused.value).startswith(f"d: case 'case 1': evaluators[0]: Predicate {shown} is")
    assert f"{shown}p" not in str(refused.value)


def test_each_check_gets_120_seconds_by_default() -> None:
    """The documented default of ``check_seconds`` (the evals guide: 120 s a check), for
    ``run_eval`` and ``run_eval_sync`` alike."""
    for fn in (run_eval, run_eval_sync):
        assert inspect.signature(fn).parameters["check_seconds"].default == 120.0
