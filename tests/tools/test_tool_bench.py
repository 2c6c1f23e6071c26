"""bench/dispatch.py runs, and eager + parallel dispatch beats sequential dispatch."""

from __future__ import annotations

import asyncio

from bench.dispatch import measure


def test_dispatch_bench_smoke() -> None:
    """At a tenth of the scale the bench runs, and eager + parallel finishes first (the
    ratio itself is the benchmark's to report, not a timed test's)."""
    eager = asyncio.run(measure(True, 0.1))
    sequential = asyncio.run(measure(False, 0.1))
    assert 0.1 <= eager < sequential  # at least the tools' own sleep, and ahead
