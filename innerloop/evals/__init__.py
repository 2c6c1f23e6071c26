"""Every recorded run is a test: evals over a dataset of cases, and reruns of a stored run
from a checkpoint with other params, compared side by side.

    report = await run_eval(Dataset.load("cases.yaml"), harness, concurrency=8)
    print(report)                      # a table per case, then pass rate, tokens, cost,
                                       # latency percentiles, recovery paths taken
    comparison = await rerun(other_harness, run_id, at=5, store="sqlite:///runs.db")
    print(comparison)                  # path, output, turns, tokens, cost, recoveries

See docs/guides/evals.md.
"""

from innerloop.evals._checks import (
    Check,
    CheckContext,
    CheckResult,
    Contains,
    Equals,
    ExitReason,
    IsInstance,
    Judge,
    JudgeVerdict,
    MatchesSchema,
    MaxSeconds,
    Predicate,
)
from innerloop.evals._dataset import Case, Dataset, DatasetError
from innerloop.evals._report import CaseResult, EvalReport
from innerloop.evals._rerun import RunComparison, compare_fork, rerun, rerun_sync
from innerloop.evals._runner import run_eval, run_eval_sync
from innerloop.evals._summary import Recoveries, RunSummary, Step

__all__ = [
    "Case",
    "CaseResult",
    "Check",
    "CheckContext",
    "CheckResult",
    "Contains",
    "Dataset",
    "DatasetError",
    "Equals",
    "EvalReport",
    "ExitReason",
    "IsInstance",
    "Judge",
    "JudgeVerdict",
    "MatchesSchema",
    "MaxSeconds",
    "Predicate",
    "Recoveries",
    "RunComparison",
    "RunSummary",
    "Step",
    "compare_fork",
    "rerun",
    "rerun_sync",
    "run_eval",
    "run_eval_sync",
]
