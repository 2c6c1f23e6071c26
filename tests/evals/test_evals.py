"""Evals: cases that pass, fail and error; every check; the report's figures; datasets
read from pydantic-evals' file layout."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, Usage, tool
from innerloop.evals import (
    Case,
    CaseResult,
    CheckContext,
    Contains,
    Dataset,
    DatasetError,
    Equals,
    EvalReport,
    ExitReason,
    Judge,
    MatchesSchema,
    MaxSeconds,
    Predicate,
    Recoveries,
    RunSummary,
    Step,
    run_eval,
    run_eval_sync,
)
from innerloop.evals import _runner as runner
from innerloop.evals._summary import percentile
from innerloop.recovery import ApproxTokenCounter, Price
from innerloop.recovery import _pricing as pricing
from innerloop.testing import (
    FakeClock,
    FakeProvider,
    Fault,
    Reply,
    ScriptedProvider,
    reply,
    tool_call,
)


def by_prompt(answers: Mapping[str, Sequence[Reply | Fault]]) -> FakeProvider:
    """A model answering each request from the list of its prompt, in turn."""
    played: dict[str, int] = {}

    def handler(request: Any) -> Reply | Fault:
        messages = request.payload["messages"]
        first = messages[0]["content"]
        prompt = first if isinstance(first, str) else first[0]["text"]
        if "<rubric>" in prompt:
            verdict = "right" in prompt.split("<answer>")[1]
            return reply(json.dumps({"passed": verdict, "reason": f"verdict {verdict}"}))
        n = played[prompt] = played.get(prompt, 0) + 1
        return answers[prompt][n - 1]

    return FakeProvider(handler)


def harness_for(answers: Mapping[str, Sequence[Reply | Fault]], **params: Any) -> Harness[Any]:
    return Harness(
        HarnessParams(model="scripted:m", **params), [by_prompt(answers)], clock=FakeClock()
    )


class TestRunEval:
    def test_pass_fail_and_error(self) -> None:
        """A case whose checks hold passes, one whose check fails fails with the reason,
        one whose check raises is an error naming the check."""

        def boom(ctx: CheckContext) -> bool:
            raise KeyError("nope")

        dataset = Dataset(
            [
                Case("good", "capital of France?", "Paris", [Equals()]),
                Case("bad", "capital of Italy?", "Rome", [Equals()]),
                Case("broken", "capital of Spain?", checks=[Predicate(boom)]),
            ]
        )
        harness = harness_for(
            {
                "capital of France?": [reply("Paris")],
                "capital of Italy?": [reply("Milan")],
                "capital of Spain?": [reply("Madrid")],
            }
        )
        report = run_eval_sync(dataset, harness, concurrency=2)
        assert [(r.name, r.status) for r in report.results] == [
            ("good", "passed"),
            ("bad", "failed"),
            ("broken", "error"),
        ]
        assert [(c.name, c.passed) for c in report.results[0].checks] == [
            ("exit_reason", True),
            ("equals_expected", True),
        ]
        assert report.results[1].failures[0].reason == "expected 'Rome', got 'Milan'"
        assert report.results[2].error == "check boom raised KeyError: 'nope'"
        assert (report.passed, report.failed, report.errors) == (1, 1, 1)
        assert report.pass_rate == pytest.approx(1 / 3)
        assert not report.ok

    async def test_the_sync_facade_refuses_a_running_loop(self) -> None:
        """run_eval_sync inside a running event loop, which it would block, raises naming
        the await to write instead; no case runs."""
        model = ScriptedProvider([reply("Paris")])
        harness = Harness(HarnessParams(model="scripted:m"), [model], clock=FakeClock())
        with pytest.raises(RuntimeError) as caught:
            run_eval_sync(Dataset([Case("good", "capital of France?")]), harness)
        assert str(caught.value) == (
            "run_eval_sync was called inside a running event loop, which it would block; "
            "use `await run_eval(...)` there"
        )
        assert model.played == 0

    def test_a_run_that_raises_is_an_error(self) -> None:
        """A run that raises (here an observer's bug) is the case's error; the other
        cases run on."""

        class Broken:
            def on_transition(self, machine: str, transition: Any) -> None:
                if transition.target == "backoff":
                    raise ZeroDivisionError("in the observer")

        answers: dict[str, list[Reply | Fault]] = {
            "q": [Fault.rate_limited(), reply("a")],
            "ok": [reply("a")],
        }
        harness = Harness(
            HarnessParams(model="scripted:m"),
            [by_prompt(answers)],
            clock=FakeClock(),
            observers=[Broken()],
        )
        dataset = Dataset([Case("c", "q"), Case("d", "ok")])
        report = run_eval_sync(dataset, harness)
        assert [r.status for r in report.results] == ["error", "passed"]
        assert report.results[0].error == "the run raised ZeroDivisionError: in the observer"
        assert report.results[0].run is None

    def test_a_run_must_finish_unless_an_exit_reason_is_checked(self) -> None:
        """Without an ExitReason check a case passes only when its run completed; with
        one, the check decides."""
        answers = {"loop": [reply(tool_call("noop", {}, id=f"c{i}")) for i in range(3)]}

        @tool(category="code")
        async def noop() -> str:
            """Nothing."""
            return "ok"

        dataset = Dataset(
            [
                Case("plain", "loop"),
                Case("limit", "loop", checks=[ExitReason(["max_turns_exceeded"])]),
            ]
        )
        report = run_eval_sync(dataset, harness_for(answers, max_turns=1, tools=[noop]))
        plain, limit = report.results
        assert plain.status == "failed"
        assert plain.failures[0].reason == (
            "the run ended in max_turns_exceeded, not model_complete or tasks_complete"
        )
        assert limit.status == "passed"

    def test_recoveries_are_read_off_the_path(self) -> None:
        """A 429 then a 503 then an answer: the run backed off once and retried once."""
        answers: dict[str, list[Reply | Fault]] = {
            "q": [Fault.rate_limited(), Fault.server_error(503), reply("done")]
        }
        report = run_eval_sync(Dataset([Case("c", "q")]), harness_for(answers))
        run = report.results[0].run
        assert run is not None
        assert run.recoveries == Recoveries(backed_off=1, retried=1)
        assert Step("call", "backoff", "rate_limited_retry") in run.path
        assert report.recoveries() == {
            "backed_off": 1,
            "fell_back": 0,
            "retried": 1,
            "compacted": 0,
            "repaired": 0,
        }

    def test_progress_sees_every_result(self) -> None:
        """on_result is called once per case."""
        seen: list[str] = []
        answers = {f"q{i}": [reply("a")] for i in range(5)}
        dataset = Dataset([Case(f"c{i}", f"q{i}") for i in range(5)])
        run_eval_sync(dataset, harness_for(answers), on_result=lambda r: seen.append(r.name))
        assert sorted(seen) == [f"c{i}" for i in range(5)]

    def test_concurrency_bounds_the_runs_at_a_time(self) -> None:
        """No more than `concurrency` runs are in flight at once."""
        import asyncio

        live, peak = 0, 0
        three = asyncio.Event()

        async def handler(request: Any) -> Reply | Fault:
            nonlocal live, peak
            live += 1
            peak = max(peak, live)
            if live == 3:
                three.set()
            await asyncio.wait_for(three.wait(), 10)  # the first three wait for each other
            live -= 1
            return reply("a")

        harness = Harness(HarnessParams(model="scripted:m"), [FakeProvider(handler)])
        dataset = Dataset([Case(f"c{i}", f"q{i}") for i in range(9)])
        report = asyncio.run(run_eval(dataset, harness, concurrency=3))
        assert report.ok
        assert peak == 3

    def test_each_case_is_timed_alone(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """What a harness loads on first use (its price table, its tokenizer's data) is
        loaded before the first case's timer starts, so no case carries it: on a timer
        that only loading moves, every case took no time."""
        now = [0.0]
        loaded: list[str] = []

        def first_use(what: str, seconds: float) -> None:
            if what not in loaded:
                loaded.append(what)
                now[0] += seconds  # loading takes time, once per process

        def kept_price(model: str, provider: str | None = None) -> Price:
            first_use("prices", 0.27)
            return Price(1.0, 2.0)

        class Counter(ApproxTokenCounter):
            def count_text(self, text: str) -> int:
                first_use("tokenizer", 0.05)
                return super().count_text(text)

        monkeypatch.setattr(pricing, "kept_price", kept_price)
        monkeypatch.setattr(runner, "perf_counter", lambda: now[0])
        model = ScriptedProvider([reply("a"), reply("b"), reply("c")], name="acme")
        harness = Harness(HarnessParams(model="acme:m-1"), [model], token_counter=Counter())
        dataset = Dataset([Case(f"c{i}", "hi") for i in range(3)])
        report = run_eval_sync(dataset, harness, concurrency=1)
        assert loaded == ["prices", "tokenizer"]
        assert [r.run.seconds for r in report.results if r.run] == [0.0, 0.0, 0.0]
        assert report.latency() == {"p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
        assert report.cost_usd == pytest.approx(3 * (10 * 1.0 + 5 * 2.0) / 1e6)  # kept price

    def test_a_case_s_time_is_its_run_s(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The timer starts as the run starts and stops as it ends: its model calls are
        inside, its checks are not."""
        now = [0.0]

        def answer(request: Any) -> Reply:
            now[0] += 1.0  # each model call takes a second
            return reply("ok")

        def slow_check(ctx: CheckContext) -> bool:
            now[0] += 100.0
            return True

        monkeypatch.setattr(runner, "perf_counter", lambda: now[0])
        harness = Harness(HarnessParams(model="scripted:m"), [FakeProvider(answer)])
        dataset = Dataset([Case("a", "q", checks=[Predicate(slow_check)]), Case("b", "q")])
        report = run_eval_sync(dataset, harness, concurrency=1)
        assert [r.run.seconds for r in report.results if r.run] == [1.0, 1.0]

    def test_concurrency_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match=r"^concurrency must be at least 1, got 0$"):
            run_eval_sync(Dataset([]), harness_for({}), concurrency=0)

    def test_sync_facade_refuses_a_running_loop(self) -> None:
        """run_eval_sync inside an event loop says to await run_eval."""
        import asyncio

        async def inside() -> None:
            run_eval_sync(Dataset([]), harness_for({}))

        with pytest.raises(RuntimeError, match="use `await run_eval"):
            asyncio.run(inside())


class TestChecks:
    def run_one(self, answer: str, *checks: Any, expected: Any = None) -> CaseResult:
        harness = harness_for({"q": [reply(answer)]})
        return run_eval_sync(Dataset([Case("c", "q", expected, checks)]), harness).results[0]

    def test_equals_a_value(self) -> None:
        assert self.run_one("4", Equals("4")).status == "passed"
        assert self.run_one("5", Equals("4")).failures[0].reason == "expected '4', got '5'"

    def test_equals_expected_skips_a_case_without_one(self) -> None:
        """Equals() compares to expected_output; with none, it is not applied."""
        result = self.run_one("anything", Equals())
        assert [c.name for c in result.checks] == ["exit_reason"]

    def test_contains(self) -> None:
        assert self.run_one("It is Paris.", Contains("paris", case_sensitive=False)).status == (
            "passed"
        )
        failed = self.run_one("It is Paris.", Contains("paris"))
        assert failed.failures[0].reason == "'paris' not in 'It is Paris.'"

    def test_matches_schema(self) -> None:
        schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
        assert self.run_one('{"n": 3}', MatchesSchema(schema)).status == "passed"
        assert self.run_one('{"n": "x"}', MatchesSchema(schema)).failures[0].reason == (
            "n: 'x' is not of type 'integer'"
        )
        assert (
            self.run_one("no json", MatchesSchema(schema))
            .failures[0]
            .reason.startswith("the output is not JSON: ")
        )

    def test_a_bad_schema_is_refused_when_built(self) -> None:
        with pytest.raises(ValueError, match=r"^MatchesSchema: the schema is not valid: "):
            MatchesSchema({"type": "no-such-type"})

    def test_predicate_bool_and_reason(self) -> None:
        """A predicate returns a bool, or a reason to fail ('' passes)."""
        assert self.run_one("ok", Predicate(lambda ctx: ctx.output == "ok")).status == "passed"
        failed = self.run_one("ok", Predicate(lambda ctx: "too short", "length"))
        assert (failed.failures[0].name, failed.failures[0].reason) == ("length", "too short")

    def test_predicate_sees_the_run(self) -> None:
        """ctx.run carries the path: a predicate can assert the transitions."""

        def went_straight(ctx: CheckContext) -> bool:
            return [s.target for s in ctx.run.path][-3:] == ["stream", "check", "model_complete"]

        assert self.run_one("ok", Predicate(went_straight)).status == "passed"

    def test_max_seconds(self) -> None:
        assert self.run_one("ok", MaxSeconds(60)).status == "passed"
        failed = self.run_one("ok", MaxSeconds(0))
        assert failed.failures[0].reason.endswith(", over 0 s")

    def test_judge_through_a_provider(self) -> None:
        """The judge is a run of its own through the judge providers: its verdict and
        reason are the check's, its tokens and cost the check's own."""
        judge = ScriptedProvider(
            [reply('{"passed": false, "reason": "it names the wrong city"}', usage=Usage(7, 3))]
        )
        harness = harness_for({"q": [reply("Milan")]})
        dataset = Dataset([Case("c", "q", "Rome", [Judge("Names the capital of Italy.")])])
        report = run_eval_sync(
            dataset, harness, judge_model="scripted:judge", judge_providers=[judge]
        )
        check = report.results[0].failures[0]
        assert (check.name, check.reason, check.tokens) == ("judge", "it names the wrong city", 10)
        assert report.judge_tokens == 10
        asked = judge.requests[0].payload["messages"][0]["content"]
        text = asked if isinstance(asked, str) else asked[0]["text"]
        assert text == (
            "<rubric>\nNames the capital of Italy.\n</rubric>\n<prompt>\nq\n</prompt>\n"
            "<expected>\nRome\n</expected>\n<answer>\nMilan\n</answer>"
        )

    def test_judge_without_a_verdict_is_an_error(self) -> None:
        """A judge that never gives a typed verdict makes the case an error saying so."""
        judge = ScriptedProvider([reply("no idea"), reply("still no idea")])
        harness = harness_for({"q": [reply("x")]})
        dataset = Dataset([Case("c", "q", checks=[Judge("anything")])])
        report = run_eval_sync(dataset, harness, judge_model="scripted:j", judge_providers=[judge])
        assert report.results[0].status == "error"
        assert report.results[0].error == (
            "check judge raised RuntimeError: the judge gave no verdict (its run ended in "
            "failed); check the judge model and providers"
        )

    def test_a_judge_without_a_provider_is_refused_first(self) -> None:
        """A judge model no provider serves is refused before any case runs."""
        model = ScriptedProvider([reply("x")])
        harness = Harness(HarnessParams(model="scripted:m"), [model])
        dataset = Dataset([Case("c", "q", checks=[Judge("anything", "judge:grader")])])
        with pytest.raises(ValueError, match=r"^no provider given for judge; pass providers="):
            run_eval_sync(dataset, harness)
        assert model.requests == []

    def test_dataset_checks_apply_to_every_case(self) -> None:
        answers = {"a": [reply("yes")], "b": [reply("no")]}
        dataset = Dataset([Case("a", "a"), Case("b", "b")], checks=[Contains("yes")])
        report = run_eval_sync(dataset, harness_for(answers))
        assert [r.status for r in report.results] == ["passed", "failed"]


class TestReport:
    def summary(self, seconds: float, cost: float | None = 0.5) -> RunSummary:
        path = (Step("call", "backoff", "rate_limited_retry"), Step("call", "fallback"))
        return RunSummary(path, "model_complete", "x", "x", 1, Usage(10, 5), cost, seconds,
                          Recoveries.of(path))  # fmt: skip

    def test_figures(self) -> None:
        """Pass rate, tokens, cost, latency percentiles, recovery counts; JSON too."""
        results = tuple(
            CaseResult(f"c{i}", "passed" if i else "failed", (), self.summary(float(i + 1)))
            for i in range(4)
        )
        report = EvalReport(results, 2.0, 4, "demo")
        assert report.usage == Usage(40, 20)
        assert report.cost_usd == 2.0
        assert report.latency() == {"p50": 2.0, "p90": 4.0, "p95": 4.0, "p99": 4.0, "max": 4.0}
        data = json.loads(json.dumps(report.to_dict()))
        assert (data["cases"], data["passed"], data["failed"], data["errors"]) == (4, 3, 1, 0)
        assert data["recoveries"]["backed_off"] == 4
        assert data["recoveries"]["fell_back"] == 4
        assert data["results"][0]["run"]["path"][0] == ["call", "backoff", "rate_limited_retry"]
        text = str(report)
        assert "3/4 (75%), 1 failed, 0 errors" in text
        assert "backed_off 4/4, fell_back 4/4, retried 0/4" in text

    def test_unpriced_cost(self) -> None:
        report = EvalReport((CaseResult("c", "passed", (), self.summary(1.0, None)),), 1.0, 1)
        assert report.cost_usd is None
        assert "unpriced" in str(report)

    def test_percentile_nearest_rank(self) -> None:
        assert percentile([], 50) is None
        assert percentile([3.0, 1.0, 2.0], 50) == 2.0
        assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


class TestDataset:
    def write(self, tmp_path: Path, text: str, suffix: str = ".yaml") -> Path:
        path = tmp_path / f"cases{suffix}"
        path.write_text(text)
        return path

    def test_pydantic_evals_layout(self, tmp_path: Path) -> None:
        """Cases with name, inputs, expected_output, metadata, evaluators (Name, {Name:
        arg}, {Name: {kwargs}}); dataset-wide evaluators."""
        path = self.write(
            tmp_path,
            """
name: capitals
evaluators:
  - MaxDuration: 30
cases:
  - name: france
    inputs: What is the capital of France?
    expected_output: Paris
    metadata: {difficulty: easy}
    evaluators:
      - EqualsExpected
      - Contains: Par
      - Contains: {value: paris, case_sensitive: false}
      - LLMJudge: {rubric: Names Paris, model: "anthropic:claude-haiku-4-5", include_input: false}
  - inputs: {prompt: "Answer as JSON"}
    evaluators:
      - MatchesSchema: {type: object}
      - ExitReason: [model_complete, max_turns_exceeded]
      - Predicate: "json:dumps"
""",
        )
        dataset = Dataset.load(path, predicates={"json:dumps": json.dumps})
        assert dataset.name == "capitals"
        assert dataset.checks == (MaxSeconds(30),)
        france, second = dataset.cases
        assert (france.name, france.prompt, france.expected_output) == (
            "france",
            "What is the capital of France?",
            "Paris",
        )
        assert france.metadata == {"difficulty": "easy"}
        assert france.checks == (
            Equals(),
            Contains("Par"),
            Contains("paris", case_sensitive=False),
            # pydantic-evals' defaults: the judge is sent neither input nor expected output
            Judge("Names Paris", "anthropic:claude-haiku-4-5", False, False),
        )
        assert second.name == "case 2"
        assert second.prompt == "Answer as JSON"
        assert second.checks[0] == MatchesSchema({"type": "object"})
        assert second.checks[1] == ExitReason(["model_complete", "max_turns_exceeded"])
        assert second.checks[2] == Predicate(json.dumps, "dumps")

    def test_json_file(self, tmp_path: Path) -> None:
        path = self.write(
            tmp_path, json.dumps({"cases": [{"inputs": "hi", "evaluators": ["EqualsExpected"]}]}),
            ".json",
        )  # fmt: skip
        assert Dataset.load(path).cases == (Case("case 1", "hi", None, [Equals()]),)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("[1, 2]", "cases.yaml: expected a mapping with a list of `cases`"),
            (
                "cases: [{inputs: 3}]",
                "cases.yaml: case 'case 1': `inputs` must be the prompt, a non-empty string "
                "(or a mapping with a `prompt` string), got int",
            ),
            (
                "cases: [{inputs: hi, evaluators: [Python: 'ctx.output == 1']}]",
                "cases.yaml: case 'case 1': evaluators[0]: Python is not supported: a dataset "
                "file is data and an expression in it is never evaluated",
            ),
            (
                "cases: [{inputs: hi, evaluators: [Sorta]}]",
                "cases.yaml: case 'case 1': evaluators[0]: unknown evaluator 'Sorta'; known: "
                "Contains, Equals, EqualsExpected, ExitReason, IsInstance, Judge, LLMJudge, "
                "LlmJudge, MatchesSchema, MaxDuration, MaxSeconds, Predicate",
            ),
            (
                "cases: [{inputs: hi, evaluators: [Predicate: 'nosuchmodule:f']}]",
                "cases.yaml: case 'case 1': evaluators[0]: Predicate 'nosuchmodule:f' is not "
                "registered; a dataset file is data and names only the predicates your code "
                "registers: pass predicates={'nosuchmodule:f': fn} to Dataset.load, or "
                "--predicates MODULE:ATTR (a mapping of names to functions) to innerloop eval",
            ),
            (
                "cases: [{inputs: hi, evaluators: [Contains: {needle: x}]}]",
                "cases.yaml: case 'case 1': evaluators[0]: Contains has no option 'needle'; it "
                "takes value, case_sensitive, as_strings, evaluation_name",
            ),
            (
                "cases: [{inputs: hi, expected: x}]",
                "cases.yaml: case 'case 1': unknown key 'expected'; a case has name, inputs, "
                "expected_output, metadata, evaluators",
            ),
            ("cases: [{name: a, inputs: x}, {name: a, inputs: y}]",
             "two cases are named 'a'; give each a name of its own"),
            ("cases: [", "cases.yaml: not YAML: "),
        ],
    )  # fmt: skip
    def test_errors_name_where_and_the_fix(self, tmp_path: Path, text: str, message: str) -> None:
        with pytest.raises(DatasetError) as info:
            Dataset.load(self.write(tmp_path, text))
        assert str(info.value).removeprefix(f"{tmp_path}/").startswith(message)

    def test_file_kinds(self, tmp_path: Path) -> None:
        with pytest.raises(DatasetError, match=r"cases\.txt: a dataset file ends in \.yaml"):
            Dataset.load(self.write(tmp_path, "x", ".txt"))
        with pytest.raises(DatasetError, match="cannot be read"):
            Dataset.load(tmp_path / "missing.json")
