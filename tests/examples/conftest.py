"""The coverage gate of the worked examples: every transition an example adds to the default
machine, and one its child machines add (the research example's scouts), must be taken by a
test (the default machine's own transitions are gated by
``--innerloop-coverage=innerloop.fsm:DEFAULT_SPEC`` in the project's pytest options).
Reported at the end of the session; with ``--innerloop-coverage-strict`` a missing one
fails the session."""

from __future__ import annotations

import pytest

from innerloop.examples import example_specs
from innerloop.fsm import DEFAULT_SPEC, MachineSpec
from innerloop.testing import TransitionCoverage


def children(spec: MachineSpec) -> list[MachineSpec]:
    """The machines of the children ``spec``'s states run (a child state's handler
    carries its ``Child``), and theirs."""
    found = []
    for handler in spec.handlers.values():
        child = getattr(handler, "child", None)
        if child is not None:
            found += [child.compiled.spec, *children(child.compiled.spec)]
    return found


@pytest.fixture(autouse=True, scope="session")
def _examples_coverage(transition_coverage: TransitionCoverage) -> None:
    for spec in example_specs().values():
        for machine in [spec, *children(spec)]:
            if machine.transitions != DEFAULT_SPEC.transitions:  # the writer adds none
                transition_coverage.track(machine, added_over=DEFAULT_SPEC)
