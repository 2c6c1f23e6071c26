"""The coverage gate of the worked examples: every transition an example adds to the default
machine must be taken by a test (the default machine's own transitions are gated by the
innerloop pytest plugin). Reported at the end of the session; with
``--innerloop-coverage-strict`` a missing one fails the session."""

from __future__ import annotations

import pytest

from innerloop.examples import example_specs
from innerloop.fsm import DEFAULT_SPEC, TransitionSpec
from innerloop.testing import TransitionCoverage

_KEY = pytest.StashKey[TransitionCoverage]()


@pytest.fixture(autouse=True, scope="session")
def _examples_coverage(
    request: pytest.FixtureRequest, transition_coverage: TransitionCoverage
) -> None:
    request.config.stash[_KEY] = transition_coverage


def added_transitions() -> dict[str, list[TransitionSpec]]:
    """Per example machine name: its transitions the default machine does not have."""
    default = {t.key for t in DEFAULT_SPEC.transitions}
    return {
        spec.name: [t for t in spec.transitions if t.key not in default]
        for spec in example_specs().values()
    }


def _missing(config: pytest.Config) -> list[str]:
    coverage = config.stash.get(_KEY, None)
    if coverage is None:
        return []
    return [
        f"{name}: {t}"
        for name, added in added_transitions().items()
        for t in added
        if coverage.count(name, t) == 0
    ]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    coverage = config.stash.get(_KEY, None)
    if coverage is None:
        return
    terminalreporter.write_sep("=", "innerloop example transitions")
    for name, added in added_transitions().items():
        for t in added:
            n = coverage.count(name, t)
            terminalreporter.write_line(f"{'  ' if n else '!!'} {n:6d}  {name}: {t}")
    missing = _missing(config)
    if missing and config.getoption("--innerloop-coverage-strict"):
        terminalreporter.write_line(
            "FAILED: example transitions never taken: " + "; ".join(missing)
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if config.getoption("--innerloop-coverage-strict") and _missing(config) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
