"""pytest plugin: session-wide transition coverage of the machines a test suite names.

Enable with ``-p innerloop.testing.pytest_plugin`` (e.g. in ``addopts``). Nothing is
tracked unless named:

* ``--innerloop-coverage=MODULE:ATTR`` (repeatable) tracks the machine ``ATTR`` of
  ``MODULE``: a ``MachineSpec``, a ``CompiledMachine``, or a function of no arguments
  returning one (``innerloop.fsm:DEFAULT_SPEC`` is the default machine);
  ``--innerloop-coverage=MODULE:ATTR-MODULE:BASE`` tracks only the edges ``ATTR`` adds
  over ``BASE`` (read it as "ATTR minus BASE");
* ``transition_coverage.track(spec)`` (the session fixture) does the same from a test or
  a fixture, and ``track(spec, added_over=BASE)`` gates only the added edges.

Tests pass the ``transition_coverage`` fixture as an observer (``Harness(...,
observers=[transition_coverage])``, ``machine_at(..., observers=[...])``). An edge is
identified by ``(source, target, guard)``: a transition taken by any machine counts for
every tracked machine with that edge, so the runs of a derived machine cover the edges it
shares with its base. A table per tracked machine is printed at the end of the session;
with ``--innerloop-coverage-strict`` the session fails when a tracked edge was never taken.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._spec import MachineSpec
from innerloop.testing._machine import TransitionCoverage

_KEY = pytest.StashKey[TransitionCoverage]()
_OPTION = "--innerloop-coverage"
_STRICT = "--innerloop-coverage-strict"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("innerloop", "innerloop transition coverage")
    group.addoption(
        _OPTION,
        action="append",
        default=[],
        metavar="MODULE:ATTR[-MODULE:BASE]",
        help="report the transitions of the machine MODULE:ATTR (a MachineSpec, a "
        "CompiledMachine or a function returning one); with -MODULE:BASE only those it "
        "adds over BASE. Repeatable; e.g. innerloop.fsm:DEFAULT_SPEC",
    )
    group.addoption(
        _STRICT,
        action="store_true",
        help="fail the session when a transition of a tracked machine was never taken",
    )


def load_machine(reference: str) -> MachineSpec:
    """The machine ``MODULE:ATTR`` names (``ATTR`` may be dotted); raises
    ``pytest.UsageError`` saying what is wrong with the reference."""
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise pytest.UsageError(
            f"{_OPTION}: {reference!r} is not MODULE:ATTR; name a machine such as "
            "innerloop.fsm:DEFAULT_SPEC or myproject.machines:SPEC"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise pytest.UsageError(
            f"{_OPTION}: cannot import {module_name!r} ({e}); is it installed or on the "
            "path (pytest's pythonpath setting)?"
        ) from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise pytest.UsageError(f"{_OPTION}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, MachineSpec | CompiledMachine):
        try:
            inspect.signature(obj).bind()
        except TypeError as e:
            raise pytest.UsageError(
                f"{_OPTION}: {reference} is a function that takes arguments ({e}); name a "
                "machine, or a function of no arguments returning one"
            ) from e
        obj = obj()
    if isinstance(obj, CompiledMachine):
        return obj.spec
    if isinstance(obj, MachineSpec):
        return obj
    raise pytest.UsageError(
        f"{_OPTION}: {reference} is a {type(obj).__name__}, not a MachineSpec, a "
        "CompiledMachine or a function of no arguments returning one"
    )


def pytest_configure(config: pytest.Config) -> None:
    coverage = TransitionCoverage()
    for value in config.getoption(_OPTION):
        machine, minus, base = value.partition("-")
        coverage.track(load_machine(machine), added_over=load_machine(base) if minus else None)
    config.stash[_KEY] = coverage


def _missing(coverage: TransitionCoverage) -> list[str]:
    return [
        f"{name}: {t}"
        for name, tracked in coverage.tracked.items()
        for t in coverage.missing(tracked)
    ]


@pytest.fixture(scope="session")
def transition_coverage(request: pytest.FixtureRequest) -> TransitionCoverage:
    """The session's coverage: pass it as an observer; ``track`` a machine to report it."""
    return request.config.stash[_KEY]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    coverage = config.stash[_KEY]
    strict = config.getoption(_STRICT)
    if not (coverage.tracked or coverage.taken or strict):
        return
    terminalreporter.write_sep("=", "innerloop transition coverage")
    for name in coverage.tracked:
        terminalreporter.write_line(coverage.table(name))
    for name in coverage.untracked():
        terminalreporter.write_line(
            f"machine {name!r} took transitions but is not tracked: name it with "
            f"{_OPTION}=MODULE:ATTR or call transition_coverage.track(spec)"
        )
    if strict and not coverage.tracked:
        terminalreporter.write_line(
            f"{_STRICT} gates nothing: no machine is tracked (name one with {_OPTION})"
        )
    missing = _missing(coverage)
    if missing and strict:
        terminalreporter.write_line("FAILED: transitions never taken: " + "; ".join(missing))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not config.getoption(_STRICT):
        return
    if _missing(config.stash[_KEY]) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
