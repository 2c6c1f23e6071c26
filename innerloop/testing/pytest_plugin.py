"""pytest plugin: session-wide transition coverage of the default machine and of every
custom machine a test tracks.

Enable with ``-p innerloop.testing.pytest_plugin``. Tests take the ``transition_coverage``
fixture and pass it as an observer; ``transition_coverage.track(spec)`` adds a custom
machine (give it its own name with ``renamed()``). A table per machine is printed at the
end of the session; with ``--innerloop-coverage-strict`` the session fails when any
transition of a reported machine was never taken.
"""

from __future__ import annotations

import pytest

from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.testing._machine import TransitionCoverage

_KEY = pytest.StashKey[TransitionCoverage]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--innerloop-coverage-strict",
        action="store_true",
        help="fail the session when a transition of the default machine was never taken",
    )


def pytest_configure(config: pytest.Config) -> None:
    coverage = TransitionCoverage()
    coverage.track(DEFAULT_SPEC)
    config.stash[_KEY] = coverage


def _missing(coverage: TransitionCoverage) -> list[str]:
    return [
        f"{name}: {t}" if name != DEFAULT_SPEC.name else str(t)
        for name, spec in coverage.specs.items()
        for t in coverage.missing(spec)
    ]


@pytest.fixture(scope="session")
def transition_coverage(request: pytest.FixtureRequest) -> TransitionCoverage:
    return request.config.stash[_KEY]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    coverage = config.stash[_KEY]
    terminalreporter.write_sep("=", "innerloop transition coverage")
    for spec in coverage.specs.values():
        terminalreporter.write_line(coverage.table(spec))
    for name in coverage.untracked():
        terminalreporter.write_line(
            f"machine {name!r} took transitions but is not reported: call "
            "transition_coverage.track(spec) with its spec"
        )
    missing = _missing(coverage)
    if missing and config.getoption("--innerloop-coverage-strict"):
        terminalreporter.write_line("FAILED: transitions never taken: " + "; ".join(missing))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not config.getoption("--innerloop-coverage-strict"):
        return
    if _missing(config.stash[_KEY]) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
