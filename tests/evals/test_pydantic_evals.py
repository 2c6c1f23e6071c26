"""Datasets written by pydantic-evals itself (its ``Dataset.to_file``, YAML and JSON) read
back by innerloop: what innerloop runs gives the verdicts pydantic-evals gives on the same
outputs; what it does not run is refused in one line naming the evaluator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_evals import Case as PECase
from pydantic_evals import Dataset as PEDataset
from pydantic_evals.evaluators import (
    Contains,
    Equals,
    EqualsExpected,
    Evaluator,
    EvaluatorContext,
    HasMatchingSpan,
    IsInstance,
    LLMJudge,
    MaxDuration,
)
from pydantic_evals.otel.span_tree import SpanQuery
from pydantic_evals.reporting import EvaluationReport

from innerloop import Harness, HarnessParams
from innerloop.cli import main
from innerloop.evals import Dataset, DatasetError, EvalReport, Judge, run_eval_sync
from innerloop.evals import _runner as runner
from innerloop.testing import FakeClock, FakeProvider, Fault, reply

ANSWERS = {
    "Capital of France?": "It is Paris.",
    "Capital of Italy?": "Milan",
    "Capital of Spain?": "madrid",
}


@dataclass(repr=False)
class Python(Evaluator[Any, Any, Any]):
    """The ``Python`` evaluator older pydantic-evals shipped (an expression to evaluate),
    as a dataset file still names it; written here with pydantic-evals' own API."""

    expression: str

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> bool:
        raise AssertionError("never run: a dataset file's expression is not evaluated")


def write(dataset: PEDataset[Any, Any, Any], path: Path) -> Path:
    """``dataset`` as pydantic-evals writes it (its JSON schema beside it)."""
    dataset.to_file(path, custom_evaluator_types=[Python])
    return path


def verdict(answer: str) -> bool:
    """Both judges' rule: an answer naming Paris or Madrid passes."""
    return "paris" in answer.lower() or "madrid" in answer.lower()


class Judges:
    """The judge model on both sides, deciding by :func:`verdict` and keeping every
    prompt it was sent."""

    def __init__(self) -> None:
        self.innerloop: list[str] = []
        self.pydantic: list[str] = []

    def provider(self) -> FakeProvider:
        def answer(request: Any) -> Any:
            prompt = request.payload["messages"][0]["content"][0]["text"]
            self.innerloop.append(prompt)
            passed = verdict(prompt.split("<answer>")[1])
            return reply(json.dumps({"passed": passed, "reason": f"judged {passed}"}))

        return FakeProvider(answer, name="function")

    def model(self) -> FunctionModel:
        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            asked = [p for p in messages[-1].parts if isinstance(p, UserPromptPart)]
            prompt = "".join(str(p.content) for p in asked)
            self.pydantic.append(prompt)
            passed = verdict(prompt.split("<Output>")[1].split("</Output>")[0])
            args = {"reason": f"judged {passed}", "pass": passed, "score": float(passed)}
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

        return FunctionModel(answer, model_name="grader")


def capitals(judge: FunctionModel) -> PEDataset[str, str, dict[str, Any]]:
    """Cases with metadata and expected outputs, and each evaluator innerloop runs, with
    its options."""
    named = {"assertion": {"evaluation_name": "judged", "include_reason": False}}
    return PEDataset[str, str, dict[str, Any]](
        name="capitals",
        cases=[
            PECase(
                name="france",
                inputs="Capital of France?",
                expected_output="It is Paris.",
                metadata={"difficulty": "easy"},
                evaluators=(
                    EqualsExpected(),
                    Contains("paris", case_sensitive=False, evaluation_name="lower"),
                    Contains("paris", evaluation_name="exact"),
                    IsInstance("str"),
                    LLMJudge("Names the capital", model=judge),
                ),
            ),
            PECase(
                name="italy",
                inputs="Capital of Italy?",
                expected_output="Rome",
                metadata={"difficulty": "easy", "tags": ["trap"]},
                evaluators=(
                    EqualsExpected(evaluation_name="expected"),
                    Equals("Milan", evaluation_name="is_milan"),
                    IsInstance("int"),
                    LLMJudge(
                        "Names the capital",
                        model=judge,
                        include_input=True,
                        include_expected_output=True,
                        **named,  # type: ignore[arg-type]
                    ),
                ),
            ),
            PECase(
                inputs="Capital of Spain?",
                evaluators=(
                    EqualsExpected(),  # no expected output: not applied, on either side
                    Contains("MADRID", case_sensitive=False, as_strings=True),
                    Contains(["madrid"], evaluation_name="in_a_list"),  # not in a string
                    LLMJudge("Names the capital", model=judge, include_input=True),
                ),
            ),
        ],
        evaluators=[MaxDuration(60), Contains("i", evaluation_name="has_i")],
    )


# the names each side gives a check without an evaluation_name
NAMES = {
    "EqualsExpected": "equals_expected",
    "Contains": "contains",
    "IsInstance": "is_instance",
    "MaxDuration": "max_seconds",
    "LLMJudge": "judge",
}


def pydantic_verdicts(report: EvaluationReport[Any, Any, Any]) -> dict[str, dict[str, bool]]:
    assert report.failures == []
    verdicts = {}
    for case in report.cases:
        assert case.evaluator_failures == []
        verdicts[case.name] = {NAMES.get(k, k): bool(r.value) for k, r in case.assertions.items()}
    return verdicts


def innerloop_verdicts(report: EvalReport) -> dict[str, dict[str, bool]]:
    assert report.errors == 0
    return {
        r.name: {c.name: c.passed for c in r.checks if c.name != "exit_reason"}
        for r in report.results
    }


def run_both(
    path: Path,
    pe: PEDataset[Any, Any, Any],
    judges: Judges,
    answers: Mapping[str, Any],
    **params: Any,
) -> tuple[EvalReport, EvaluationReport[Any, Any, Any]]:
    """The file through innerloop's eval, and the dataset through pydantic-evals', the
    model giving the same outputs."""
    dataset = Dataset.load(path)
    model = FakeProvider(lambda request: reply(answers[_prompt(request)]))
    harness = Harness(HarnessParams(model="scripted:m", **params), [model], clock=FakeClock())
    ours = run_eval_sync(dataset, harness, judge_providers={"function": judges.provider()})
    output_type = params.get("output_type")

    def task(inputs: str) -> Any:
        out = answers[inputs]
        return output_type.model_validate_json(out) if output_type else out

    theirs = asyncio.run(pe.evaluate(task, progress=False))  # its evaluate_sync leaves a loop
    return ours, theirs


def _prompt(request: Any) -> str:
    return str(request.payload["messages"][0]["content"][0]["text"])


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_the_same_verdicts_as_pydantic_evals(tmp_path: Path, suffix: str) -> None:
    """EqualsExpected, Equals, Contains (case_sensitive, as_strings, evaluation_name),
    IsInstance, MaxDuration and LLMJudge (include_input, include_expected_output, its
    assertion's name and reason) give each case the verdicts pydantic-evals gives."""
    judges = Judges()
    pe = capitals(judges.model())
    path = write(pe, tmp_path / f"capitals{suffix}")
    ours, theirs = run_both(path, pe, judges, ANSWERS)
    expected = pydantic_verdicts(theirs)
    # pydantic-evals names the unnamed case 'Case 3', innerloop 'case 3'
    assert innerloop_verdicts(ours) == {
        "france": expected["france"],
        "italy": expected["italy"],
        "case 3": expected["Case 3"],
    }
    assert expected["italy"] == {
        "expected": False,
        "is_milan": True,
        "is_instance": False,
        "judged": False,
        "max_seconds": True,
        "has_i": True,
    }
    assert expected["Case 3"]["in_a_list"] is False
    assert (expected["france"]["exact"], expected["france"]["lower"]) == (False, True)
    italy = ours.results[1]
    judged = next(c for c in italy.checks if c.name == "judged")
    assert judged.reason == ""  # include_reason: false, as pydantic-evals keeps none
    assert ours.results[0].checks[-3].reason == "judged True"


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_the_judge_sees_what_pydantic_evals_judge_sees(tmp_path: Path, suffix: str) -> None:
    """LLMJudge's include_input and include_expected_output default to False, as in
    pydantic-evals: the same file sends both judges the input and the expected output
    exactly when it says so."""
    judges = Judges()
    pe = capitals(judges.model())
    run_both(write(pe, tmp_path / f"capitals{suffix}"), pe, judges, ANSWERS)
    judge_checks = [
        c for case in Dataset.load(tmp_path / f"capitals{suffix}").cases for c in case.checks
        if isinstance(c, Judge)
    ]  # fmt: skip
    assert [(j.include_prompt, j.include_expected) for j in judge_checks] == [
        (False, False),
        (True, True),
        (True, False),
    ]

    def sent(prompts: list[str], text: str) -> list[bool]:
        return sorted(text in p for p in prompts)

    for text in ("Capital of France?", "Capital of Italy?", "Capital of Spain?", "Rome"):
        assert sent(judges.innerloop, text) == sent(judges.pydantic, text), text
    assert sum("Capital of France?" in p for p in judges.innerloop) == 0
    assert sum("<expected>\nRome\n</expected>" in p for p in judges.innerloop) == 1


class Capital(BaseModel):
    city: str
    people: int


def test_a_typed_output(tmp_path: Path) -> None:
    """On a typed output (an output_type's instance) Contains looks at its fields and
    IsInstance at its class's names, as pydantic-evals does on the task's model."""
    pe = PEDataset[str, Capital, Any](
        name="typed",
        cases=[
            PECase(
                name="paris",
                inputs="Capital of France?",
                expected_output=Capital(city="Paris", people=2_100_000),
                evaluators=(
                    EqualsExpected(),
                    Contains({"city": "Paris"}, evaluation_name="fields"),
                    Contains({"city": "Lyon"}, evaluation_name="other_city"),
                    Contains("people", evaluation_name="a_field"),
                    Contains("Paris", evaluation_name="a_value"),  # not a field's name
                    Contains("Paris", as_strings=True, evaluation_name="as_text"),
                    Contains(["city"], evaluation_name="unhashable"),  # not a key: fails
                    IsInstance("Capital", evaluation_name="capital"),
                    IsInstance("BaseModel", evaluation_name="model"),
                    IsInstance("dict", evaluation_name="dict"),
                ),
            )
        ],
    )
    answers = {"Capital of France?": '{"city": "Paris", "people": 2100000}'}
    ours, theirs = run_both(
        write(pe, tmp_path / "typed.yaml"), pe, Judges(), answers, output_type=Capital
    )
    assert (
        innerloop_verdicts(ours)
        == pydantic_verdicts(theirs)
        == {
            "paris": {
                "equals_expected": True,
                "fields": True,
                "other_city": False,
                "a_field": True,
                "a_value": False,
                "as_text": True,
                "unhashable": False,
                "capital": True,
                "model": True,
                "dict": False,
            }
        }
    )


def test_what_pydantic_evals_always_writes_is_read(tmp_path: Path) -> None:
    """``report_evaluators: []``, ``$schema``, a case's ``name: null`` and ``metadata:
    null``, a MaxDuration written as a timedelta: all read."""
    pe = PEDataset[str, str, Any](
        name="plain",
        cases=[PECase(inputs="hi"), PECase(name="b", inputs="yo", metadata={"k": [1, 2]})],
        evaluators=[MaxDuration(timedelta(minutes=1, seconds=30))],
    )
    for suffix in (".yaml", ".json"):
        path = write(pe, tmp_path / f"plain{suffix}")
        text = path.read_text()
        assert "report_evaluators" in text
        dataset = Dataset.load(path)
        assert [c.name for c in dataset.cases] == ["case 1", "b"]
        assert dict(dataset.cases[1].metadata) == {"k": [1, 2]}
        assert dataset.cases[0].metadata == {}
        assert dataset.checks[0].seconds == 90.0  # type: ignore[attr-defined]
    assert '"$schema": "plain_schema.json"' in (tmp_path / "plain.json").read_text()


REFUSED: list[tuple[Evaluator[Any, Any, Any], str]] = [
    (
        Python("ctx.output == 'Paris'"),
        "Python is not supported: a dataset file is data and an expression in it is never "
        "evaluated; register a function in your code and name it with Predicate: NAME",
    ),
    (
        HasMatchingSpan(SpanQuery(name_contains="tool")),
        "HasMatchingSpan is not supported: it reads the run's OpenTelemetry span tree, which "
        "an innerloop eval does not record; check the run with a Predicate (ctx.run.path, "
        "ctx.state.history)",
    ),
    (
        LLMJudge("Names Paris", score={"include_reason": True}),
        "LLMJudge: score is not supported: an innerloop check passes or fails and a report "
        "has no scores; leave score out (or false) to check the judge's pass/fail assertion",
    ),
    (
        LLMJudge("Names Paris", score={"evaluation_name": "s"}, assertion=False),
        "LLMJudge: score is not supported: ",
    ),
    (
        LLMJudge("Names Paris", assertion=False),
        "LLMJudge: assertion: false leaves the judge nothing innerloop checks",
    ),
    (
        LLMJudge("Names Paris", model_settings={"temperature": 0.0}),
        "LLMJudge: model_settings is not supported: ",
    ),
]


@pytest.mark.parametrize(("evaluator", "message"), REFUSED)
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_what_innerloop_does_not_run_is_refused_naming_it(
    tmp_path: Path,
    evaluator: Evaluator[Any, Any, Any],
    message: str,
    suffix: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Python (never evaluated), HasMatchingSpan (no span tree), LLMJudge's score,
    assertion: false and model_settings: a DatasetError in one line naming the
    evaluator; on the command line, exit 2 with that line."""
    pe = PEDataset[str, str, Any](
        name="x", cases=[PECase(name="fr", inputs="Capital of France?", evaluators=(evaluator,))]
    )
    path = write(pe, tmp_path / f"refused{suffix}")
    where = f"{path}: case 'fr': evaluators[0]: "
    with pytest.raises(DatasetError) as info:
        Dataset.load(path)
    assert str(info.value).startswith(where + message)
    assert "\n" not in str(info.value)
    assert main(["eval", str(path), "--harness", "tests.evals.test_pydantic_evals:harness"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"innerloop eval: error: {info.value}\n")


def harness() -> Harness[Any]:
    return Harness(HarnessParams(model="scripted:m"), [FakeProvider(lambda r: reply("x"))])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"Contains": {"value": "a", "needle": "b"}},
         "Contains has no option 'needle'; it takes value, case_sensitive, as_strings, "
         "evaluation_name"),
        ({"Contains": {"case_sensitive": False}},
         "Contains needs 'value'; it takes value, case_sensitive, as_strings, evaluation_name"),
        ({"Contains": {"value": "a", "as_strings": "yes"}},
         "Contains: as_strings must be true or false, got str 'yes'"),
        ({"LLMJudge": {"rubric": "r", "assertion": {"include_reason": True, "x": 1}}},
         "LLMJudge: assertion must be false or a mapping of include_reason and "
         "evaluation_name, got dict"),
        ({"MaxDuration": "soon"},
         "MaxDuration: seconds must be a number or an ISO 8601 duration, got str 'soon'"),
        ({"IsInstance": {"type_name": "str", "strict": True}},
         "IsInstance has no option 'strict'; it takes type_name, evaluation_name"),
        ("GEval", "GEval is not supported: it scores on a scale and an innerloop check passes "
         "or fails; use LLMJudge with a rubric"),
        ({"MaxToolCalls": 3}, "MaxToolCalls is not supported: it reads the run's OpenTelemetry "
         "span tree"),
    ],
)  # fmt: skip
def test_bad_options_name_the_evaluator_and_its_options(
    tmp_path: Path, entry: Any, message: str
) -> None:
    """Options an evaluator does not take, or of the wrong type: one line naming the
    evaluator and what it takes, never a Python TypeError from a constructor."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"cases": [{"inputs": "hi", "evaluators": [entry]}]}))
    with pytest.raises(DatasetError) as info:
        Dataset.load(path)
    assert str(info.value).startswith(f"{path}: case 'case 1': evaluators[0]: {message}")
    assert "__init__" not in str(info.value)


def test_report_evaluators_are_refused_when_there_are_any(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({
        "cases": [{"inputs": "hi"}],
        "report_evaluators": [{"ConfusionMatrixEvaluator": {"title": "t"}}],
    }))  # fmt: skip
    with pytest.raises(DatasetError) as info:
        Dataset.load(path)
    assert str(info.value) == (
        f"{path}: report_evaluators: ConfusionMatrixEvaluator is not supported: innerloop "
        "does not run report evaluators (its report has the pass rate, tokens, cost and "
        "latency); leave the list empty"
    )


def capitals_harness() -> Harness[Any]:
    """The harness ``innerloop eval`` runs the capitals file on: the model answers from
    ANSWERS (after a 429 for Spain: a recovery to show), the judge (``function:grader``,
    as the file names it) by :func:`verdict`; its backoff waits on a fake clock."""
    seen: dict[str, int] = {}

    def answer(request: Any) -> Any:
        prompt = _prompt(request)
        seen[prompt] = seen.get(prompt, 0) + 1
        if prompt == "Capital of Spain?" and seen[prompt] == 1:
            return Fault.rate_limited(retry_after=2)
        return reply(ANSWERS[prompt])

    providers = {"scripted": FakeProvider(answer), "function": Judges().provider()}
    return Harness(HarnessParams(model="scripted:m"), providers, clock=FakeClock())


@pytest.mark.parametrize("columns", [80, 160])
def test_the_round_trip_s_report_fits_the_terminal(
    tmp_path: Path,
    columns: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``innerloop eval`` on the file pydantic-evals wrote: the table fits the terminal,
    the figures whole; at 80 columns the reasons go under it, wrapped. The eval's timer
    stands still (each case's seconds and the wall time are real time otherwise)."""
    path = write(capitals(Judges().model()), tmp_path / "capitals.yaml")
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setattr(runner, "perf_counter", lambda: 0.0)
    harness = "tests.evals.test_pydantic_evals:capitals_harness"
    assert main(["eval", str(path), "--harness", harness, "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= columns
    assert [line.rstrip() for line in out.splitlines()] == TABLES[columns]


TABLES: dict[int, list[str]] = {
    80: [
        "eval capitals",
        " case    status  exit            turns  tokens      cost     s  recoveries",
        "\u2500" * 77,
        " france  failed  model_complete      1      15  unpriced  0.00  -",
        " italy   failed  model_complete      1      15  unpriced  0.00  -",
        " case 3  failed  model_complete      1      15  unpriced  0.00  backed_off 1",
        "france: exact: 'paris' not in 'It is Paris.'",
        "italy: expected: expected 'Rome', got 'Milan'; is_instance: the output is a str;",
        "judged",
        "case 3: in_a_list: cannot look for ['madrid'] in 'madrid': 'in <string>'",
        "requires string as left operand, not list",
        "",
        " passed      0/3 (0%), 3 failed, 0 errors",
        " tokens      45 (input 30, output 15); judges 45",
        " cost        unpriced",
        " latency     p50 0.0 ms, p90 0.0 ms, p95 0.0 ms, p99 0.0 ms, max 0.0 ms",
        " recoveries  backed_off 1/3, fell_back 0/3, retried 0/3, compacted 0/3,",
        "             repaired 0/3",
        " wall time   0.00 s at concurrency 8",
    ],
    160: [
        "eval capitals",
        " case    status  exit            turns  tokens      cost     s  recoveries    why",
        "\u2500" * 160,
        " france  failed  model_complete      1      15  unpriced  0.00  -             exact: 'paris' not in 'It is Paris.'",  # noqa: E501
        " italy   failed  model_complete      1      15  unpriced  0.00  -             expected: expected 'Rome', got 'Milan'; is_instance: the output is a str; judged",  # noqa: E501
        " case 3  failed  model_complete      1      15  unpriced  0.00  backed_off 1  in_a_list: cannot look for ['madrid'] in 'madrid': 'in <string>' requires string",  # noqa: E501
        "                                                                              as left operand, not list",  # noqa: E501
        "",
        " passed      0/3 (0%), 3 failed, 0 errors",
        " tokens      45 (input 30, output 15); judges 45",
        " cost        unpriced",
        " latency     p50 0.0 ms, p90 0.0 ms, p95 0.0 ms, p99 0.0 ms, max 0.0 ms",
        " recoveries  backed_off 1/3, fell_back 0/3, retried 0/3, compacted 0/3, repaired 0/3",
        " wall time   0.00 s at concurrency 8",
    ],
}  # fmt: skip
