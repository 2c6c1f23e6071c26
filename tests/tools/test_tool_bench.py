"""bench/dispatch.py runs, and eager + parallel dispatch beats sequential dispatch."""

from __future__ import annotations

import asyncio

from bench.dispatch import measure


def test_dispatch_bench_smoke() -> None:
    """At a tenth of the scale, eager + parallel takes well under sequential's time."""
    eager = asyncio.run(measure(True, 0.1))
    sequential = asyncio.run(measure(False, 0.1))
    assert 0.17 < eager < 0.3
    assert sequential > 0.4
    assert eager / sequential < 0.6
