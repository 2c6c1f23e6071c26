"""pytest plugin: session-wide transition coverage of the default machine.

Enable with ``-p innerloop.testing.pytest_plugin``. Tests take the ``transition_coverage``
fixture and pass it as an observer. The table is printed at the end of the session; with
``--innerloop-coverage-strict`` the session fails when any transition was never taken.
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
    config.stash[_KEY] = TransitionCoverage()


@pytest.fixture(scope="session")
def transition_coverage(request: pytest.FixtureRequest) -> TransitionCoverage:
    return request.config.stash[_KEY]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    coverage = config.stash[_KEY]
    terminalreporter.write_sep("=", "innerloop transition coverage")
    terminalreporter.write_line(coverage.table(DEFAULT_SPEC))
    missing = coverage.missing(DEFAULT_SPEC)
    if missing and config.getoption("--innerloop-coverage-strict"):
        terminalreporter.write_line(
            "FAILED: transitions never taken: " + "; ".join(str(t) for t in missing)
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not config.getoption("--innerloop-coverage-strict"):
        return
    if config.stash[_KEY].missing(DEFAULT_SPEC) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
