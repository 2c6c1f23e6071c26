"""Running an eval: every case's prompt through a harness, at most ``concurrency`` runs at
a time, each run's path and figures recorded, then its checks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from time import perf_counter
from typing import Any

from innerloop._harness import Harness
from innerloop._messages import Message
from innerloop.evals._checks import (
    FINISHED,
    JUDGE_SYSTEM,
    Check,
    CheckContext,
    CheckResult,
    ExitReason,
    Judge,
    JudgeVerdict,
)
from innerloop.evals._dataset import Case, Dataset
from innerloop.evals._report import CaseResult, EvalReport
from innerloop.evals._summary import RunSummary, transitions
from innerloop.evals._sync import run_outside_a_loop
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._state import HarnessState
from innerloop.providers._base import Provider
from innerloop.providers._fingerprint import history_fingerprint
from innerloop.recovery._pricing import price_for

__all__ = ["Judges", "run_eval", "run_eval_sync", "warm_up"]


class Judges:
    """The judge harnesses of one eval, one per judge model, built when first asked."""

    def __init__(
        self,
        harness: Harness[Any],
        model: str | None,
        providers: Mapping[str, Provider] | Iterable[Provider] | None,
    ) -> None:
        self.model = model or str(harness.params.model)
        self.providers = providers if providers is not None else harness.providers
        self.harness = harness
        self.harnesses: dict[str, Harness[JudgeVerdict]] = {}

    def prepare(self, dataset: Dataset) -> None:
        """Build the harness of every judge the dataset's checks name, so a judge model
        without a provider is refused before any case runs."""
        for check in (*dataset.checks, *(c for case in dataset.cases for c in case.checks)):
            if isinstance(check, Judge):
                self.harness_for(check.model)

    async def ask(self, model: str | None, prompt: str) -> HarnessState[JudgeVerdict]:
        return await self.harness_for(model).run(prompt)

    def harness_for(self, model: str | None) -> Harness[JudgeVerdict]:
        name = model or self.model
        harness = self.harnesses.get(name)
        if harness is None:
            params = HarnessParams(
                model=name, system=JUDGE_SYSTEM, output_type=JudgeVerdict, max_output_repairs=1
            )
            under_test = self.harness  # the judges share its clock, tokenizer and gates
            harness = self.harnesses[name] = Harness(
                params,
                self.providers,
                clock=under_test.clock,
                token_counter=under_test.token_counter,
                gates=under_test.gates,
            )
        return harness


def warm_up(harness: Harness[Any]) -> None:
    """Load what a harness's first run would load inside its timed span, so that no case
    carries it: the price table its models are priced from (read on first use, about a
    quarter of a second), its tokenizer's data, and the converter a run's history is
    fingerprinted with when it ends."""
    params = harness.params
    for choice in params.model_chain:
        price_for(choice.model, params.prices, choice.provider)
    harness.token_counter.count_text("warm up")
    history_fingerprint([Message.user("warm up")])


CHECK_SECONDS = 120.0
"""How long one check may take on one case, by default (a judge's model call included)."""


async def _check(check: Check, ctx: CheckContext, seconds: float | None) -> CheckResult | None:
    """``check`` on ``ctx``; past ``seconds`` it fails, named (the wait is given up; a
    check still running in its thread is left to end on its own)."""
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            return await check.evaluate(ctx)
    except TimeoutError:
        if not limit.expired():
            raise  # the check's own TimeoutError: an error of the check, as any other
        return CheckResult(
            check.name, False, f"the check took over {seconds:g} s (the eval's check_seconds)"
        )


async def _run_case(
    case: Case, dataset: Dataset, harness: Harness[Any], judges: Judges, check_seconds: float | None
) -> CaseResult:
    started = perf_counter()  # the run alone: set up before (warm_up), checked after
    try:
        run = harness.start(case.prompt)
        path = await transitions(run)
    except Exception as exc:
        return CaseResult(case.name, "error", error=f"the run raised {type(exc).__name__}: {exc}")
    seconds = perf_counter() - started
    state = run.state
    summary = RunSummary.of(state, path, seconds=seconds, run_id=run.run_id)
    checks = [*case.checks, *dataset.checks]
    if not any(isinstance(c, ExitReason) for c in checks):
        checks.insert(0, FINISHED)
    ctx = CheckContext(case.name, case.prompt, case.expected_output, summary, state, judges.ask)
    results: list[CheckResult] = []
    for check in checks:
        try:
            result = await _check(check, ctx, check_seconds)
        except Exception as exc:
            error = f"check {check.name} raised {type(exc).__name__}: {exc}"
            return CaseResult(case.name, "error", tuple(results), summary, error)
        if result is not None:
            results.append(result)
    if all(r.passed for r in results):
        return CaseResult(case.name, "passed", tuple(results), summary)
    return CaseResult(case.name, "failed", tuple(results), summary)


async def run_eval(
    dataset: Dataset,
    harness: Harness[Any],
    *,
    concurrency: int = 8,
    judge_model: str | None = None,
    judge_providers: Mapping[str, Provider] | Iterable[Provider] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    check_seconds: float | None = CHECK_SECONDS,
) -> EvalReport:
    """Run every case of ``dataset`` through ``harness``, at most ``concurrency`` at a time,
    and check each run. A ``Judge`` check asks ``judge_model`` (default: the harness's
    model) through ``judge_providers`` (default: the harness's providers); a judge model
    without a provider (or bad judge params) raises before any case runs. ``on_result``
    sees each case's result as it is known (for progress). Each check gets at most
    ``check_seconds`` on a case (None: no limit); one that takes longer fails its case,
    named. Predicates and schema checks run in a thread of their own, off the loop."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if check_seconds is not None and not check_seconds > 0:
        raise ValueError(f"check_seconds must be above 0 (or None), got {check_seconds}")
    judges = Judges(harness, judge_model, judge_providers)
    judges.prepare(dataset)
    await asyncio.to_thread(warm_up, harness)  # off the loop: a host's other tasks run on
    gate = asyncio.Semaphore(concurrency)
    started = perf_counter()

    async def one(case: Case) -> CaseResult:
        async with gate:
            result = await _run_case(case, dataset, harness, judges, check_seconds)
        if on_result is not None:
            on_result(result)
        return result

    results = await asyncio.gather(*(one(case) for case in dataset.cases))
    return EvalReport(tuple(results), perf_counter() - started, concurrency, dataset.name)


def run_eval_sync(
    dataset: Dataset,
    harness: Harness[Any],
    *,
    concurrency: int = 8,
    judge_model: str | None = None,
    judge_providers: Mapping[str, Provider] | Iterable[Provider] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    check_seconds: float | None = CHECK_SECONDS,
) -> EvalReport:
    """:func:`run_eval` for code without an event loop (it raises inside one: there,
    ``await run_eval(...)``)."""
    return run_outside_a_loop(
        run_eval(
            dataset,
            harness,
            concurrency=concurrency,
            judge_model=judge_model,
            judge_providers=judge_providers,
            on_result=on_result,
            check_seconds=check_seconds,
        ),
        "run_eval",
    )
