"""The coverage gate of the worked examples: every transition an example adds to the default
machine must be taken by a test (the default machine's own transitions are gated by
``--innerloop-coverage=innerloop.fsm:DEFAULT_SPEC`` in the project's pytest options).
Reported at the end of the session; with ``--innerloop-coverage-strict`` a missing one
fails the session."""

from __future__ import annotations

import pytest

from innerloop.examples import example_specs
from innerloop.fsm import DEFAULT_SPEC
from innerloop.testing import TransitionCoverage


@pytest.fixture(autouse=True, scope="session")
def _examples_coverage(transition_coverage: TransitionCoverage) -> None:
    for spec in example_specs().values():
        transition_coverage.track(spec, added_over=DEFAULT_SPEC)
