from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from innerloop import Harness, HarnessParams
from innerloop.testing import FakeClock, ScriptedProvider, TransitionCoverage


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_harness(transition_coverage: TransitionCoverage, clock: FakeClock) -> Any:
    """Build a Harness whose transitions count towards the session's coverage."""

    def make(
        params: HarnessParams,
        providers: Iterable[Any] | ScriptedProvider,
        **kwargs: Any,
    ) -> Harness:
        if isinstance(providers, ScriptedProvider):
            providers = [providers]
        kwargs.setdefault("clock", clock)
        observers = (transition_coverage, *kwargs.pop("observers", ()))
        return Harness(params, providers, observers=observers, **kwargs)

    return make
