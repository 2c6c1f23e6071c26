from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import cattrs.preconf.json  # see the note below
import cattrs.v  # noqa: F401
import pytest
from hypothesis import settings

from innerloop import Harness, HarnessParams
from innerloop.testing import FakeClock, ScriptedProvider, TransitionCoverage

# innerloop loads cattrs at first use. A pytester run inside a test (the coverage plugin's
# tests) takes back, when it ends, every module first imported during it: had cattrs been
# first loaded there, the shared converter would keep the taken-back module's error
# classes while later imports got new ones, and a conversion error would be described by
# its class name only. Loading cattrs with the suite keeps one copy for the session.

# no per-example deadline: these machines are shared and noisy, and the first example of
# a test may build caches (the converter's hooks); speed is checked by bench/, not here.
# The suite's examples are the same on every run (a red CI names a change, not a draw);
# `pytest --hypothesis-profile=explore` draws new ones at each run.
settings.register_profile("innerloop", deadline=None, derandomize=True)
settings.register_profile("explore", deadline=None)
settings.load_profile("innerloop")


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
