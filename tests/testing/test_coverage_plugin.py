"""The coverage plugin reports the default machine and every tracked custom machine, and
its strict mode fails a session that left a reported transition untaken."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INNER = """
from innerloop import Harness, HarnessParams
from innerloop.examples import with_guardrail
from innerloop.testing import ScriptedProvider, reply

def test_one_run(transition_coverage):
    spec = with_guardrail()
    transition_coverage.track(spec)
    harness = Harness(
        HarnessParams(model="scripted:m-20250101"),
        [ScriptedProvider([reply("hi")])],
        machine=spec,
        observers=[transition_coverage],
    )
    assert harness.run_sync("go").exit_reason == "model_complete"
"""


def test_a_tracked_custom_machine_gets_its_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER)
    result = pytester.runpytest_subprocess("-p", "innerloop.testing.pytest_plugin")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    guardrail = out[out.index("transition coverage of 'guardrail':") :]
    assert "        1  check -> model_complete [model_finished]" in guardrail
    assert "!!      0  redact -> abort [abort_requested]" in guardrail


def test_strict_mode_fails_on_a_custom_machines_untaken_transition(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(INNER)
    result = pytester.runpytest_subprocess(
        "-p", "innerloop.testing.pytest_plugin", "--innerloop-coverage-strict"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "guardrail: redact -> abort [abort_requested]" in result.stdout.str()


def test_an_untracked_machine_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER.replace("    transition_coverage.track(spec)\n", ""))
    result = pytester.runpytest_subprocess("-p", "innerloop.testing.pytest_plugin")
    assert (
        "machine 'guardrail' took transitions but is not reported: call "
        "transition_coverage.track(spec) with its spec"
    ) in result.stdout.str()


def test_two_machines_with_one_name_are_refused() -> None:
    from innerloop.examples import with_cost_cap, with_guardrail
    from innerloop.examples.costcap import CostCap
    from innerloop.testing import TransitionCoverage

    coverage = TransitionCoverage()
    coverage.track(with_guardrail())
    with pytest.raises(ValueError, match="both named 'guardrail'"):
        coverage.track(
            with_cost_cap(CostCap(max_tokens=10), lambda s, st: True).renamed("guardrail")
        )
