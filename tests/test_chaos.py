"""The chaos campaign's slice: 300 seeded runs with random faults, 0 breaks."""

from __future__ import annotations

import time

from tests.chaos_runner import plan, run_campaign


def test_300_seeded_runs_break_nothing() -> None:
    """Every run of seeds 0-299 keeps every invariant, in under a minute."""
    started = time.monotonic()
    report = run_campaign(300, seed=0, jobs=32)
    assert report.runs == 300
    assert report.breaks == [], report.summary(first=10)
    assert time.monotonic() - started < 60, report.summary()


def test_a_plan_depends_on_its_seed_alone() -> None:
    """The same seed plans the same run; another seed, another run."""
    assert plan(7) == plan(7)
    assert plan(7) != plan(8)
