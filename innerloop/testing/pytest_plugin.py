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

Every ``machine_at`` probe's steps and every ``scenario(...)`` (or
``Scenarios.context``) a test builds count without being asked; a ``Harness`` run counts
when the test passes the ``transition_coverage`` fixture as an observer (``Harness(...,
observers=[transition_coverage])``). An edge is
identified by ``(source, target, guard)``: a transition taken by any machine counts for
every tracked machine with that edge, so the runs of a derived machine cover the edges it
shares with its base. A table per tracked machine is printed at the end of the session;
with ``--innerloop-coverage-strict`` the session fails when a tracked edge was never taken.

``--innerloop-coverage-scope=GLOB`` (repeatable) limits what counts and what is gated to
the test files matching ``GLOB`` (relative to the rootdir, e.g. ``tests/machine/*``);
``--innerloop-coverage-scope=marked`` to the tests marked
``@pytest.mark.innerloop_coverage``. Transitions taken by other tests do not count, and a
session that runs no test in scope (one replay test file, say) is not gated.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import attrs
import pytest

from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._spec import MachineSpec
from innerloop.testing._machine import COUNTING, TransitionCoverage

_KEY = pytest.StashKey[TransitionCoverage]()
_OPTION = "--innerloop-coverage"
_STRICT = "--innerloop-coverage-strict"
_SCOPE = "--innerloop-coverage-scope"
_MARK = "innerloop_coverage"


@attrs.define
class _Scope:
    """Which tests count for the coverage (all when ``globs`` is empty and not ``marked``),
    and how many of them ran."""

    globs: tuple[str, ...]
    marked: bool
    ran: int = 0

    @property
    def everything(self) -> bool:
        return not (self.globs or self.marked)

    def covers(self, item: pytest.Item, rootdir: Path) -> bool:
        if self.everything or (self.marked and item.get_closest_marker(_MARK) is not None):
            return True
        path = item.path.relative_to(rootdir) if item.path.is_relative_to(rootdir) else item.path
        return any(fnmatch(path.as_posix(), glob) for glob in self.globs)


_SCOPE_KEY = pytest.StashKey[_Scope]()


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
        _SCOPE,
        action="append",
        default=[],
        metavar="GLOB|marked",
        help="count and gate only the tests in files matching GLOB (relative to the "
        f"rootdir; repeatable), or with 'marked' those marked @pytest.mark.{_MARK}; a "
        "session running none of them is not gated",
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
    scopes = config.getoption(_SCOPE)
    config.stash[_SCOPE_KEY] = _Scope(
        tuple(g for g in scopes if g != "marked"), "marked" in scopes
    )
    config.addinivalue_line(
        "markers", f"{_MARK}: the test counts for the transition coverage ({_SCOPE}=marked)"
    )


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


@pytest.fixture(autouse=True)
def _innerloop_counting(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test in scope reports its probes' and scenarios' transitions to the session's
    coverage; a test outside it counts nothing."""
    config = request.config
    coverage, scope = config.stash[_KEY], config.stash[_SCOPE_KEY]
    inside = isinstance(request.node, pytest.Item) and scope.covers(
        request.node, config.rootpath
    )
    scope.ran += inside
    coverage.recording = inside
    token = COUNTING.set((coverage,) if inside else ())
    try:
        yield
    finally:
        COUNTING.reset(token)
        coverage.recording = True


def _gated(config: pytest.Config) -> bool:
    """Strict, and (when scoped) at least one test in scope ran."""
    scope = config.stash[_SCOPE_KEY]
    return bool(config.getoption(_STRICT)) and (scope.everything or scope.ran > 0)


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
    if strict and not _gated(config):
        terminalreporter.write_line(
            f"{_STRICT} gates nothing this session: no test in {_SCOPE} ran"
        )
        return
    missing = _missing(coverage)
    if missing and strict:
        terminalreporter.write_line("FAILED: transitions never taken: " + "; ".join(missing))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not _gated(config):
        return
    if _missing(config.stash[_KEY]) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
