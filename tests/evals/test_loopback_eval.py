"""The 50-case eval over the loopback servers (real SDK clients over HTTP), ten at a time:
each kind of case ends as its model was scripted, with the recovery paths it took."""

from __future__ import annotations

from innerloop.evals import Recoveries
from tests.eval_loopback import KINDS, loopback_eval

RECOVERED = {
    2: Recoveries(backed_off=1),
    3: Recoveries(retried=1),
    5: Recoveries(backed_off=1, fell_back=1),
    6: Recoveries(compacted=1),
}


def test_fifty_cases_over_loopback() -> None:
    """40 pass, 5 fail (a wrong answer), 5 error (a predicate that raises); the report
    counts the runs that backed off, fell back, retried and compacted."""
    report = loopback_eval(50, concurrency=10)
    assert len(report.results) == 50
    for i, result in enumerate(report.results):
        kind = i % KINDS
        want = {8: "failed", 9: "error"}.get(kind, "passed")
        assert result.status == want, (result.name, result.error, result.failures)
        assert result.run is not None
        assert result.run.recoveries == RECOVERED.get(kind, Recoveries()), result.name
        assert result.run.exit_reason == "model_complete"
    assert (report.passed, report.failed, report.errors) == (40, 5, 5)
    assert report.recoveries() == {
        "backed_off": 10,
        "fell_back": 5,
        "retried": 5,
        "compacted": 5,
        "repaired": 0,
    }
    assert report.results[8].failures[0].reason == "'17' not in 'I do not know.'"
    assert report.results[9].error == "check _never raised RuntimeError: no verdict for case 09"
    judged = [c for c in report.results[7].checks if c.name == "judge"]
    assert [(c.passed, c.reason) for c in judged] == [(True, "the sum is right")]
    assert report.cost_usd is not None
    assert report.cost_usd > 0
    assert report.usage.total_tokens == sum(r.usage.total_tokens for r in report.runs)
    assert set(report.latency()) == {"p50", "p90", "p95", "p99", "max"}
