"""bench/storm.py: 1,000 loops through a 429 storm share one gate and send few probes."""

from __future__ import annotations

import asyncio

from bench.storm import measure


def test_thousand_loops_send_a_few_probes_through_a_storm() -> None:
    """Each loop's first call meets the storm; after that only half-open probes go out
    (without the gate, each loop retries on its own), and every loop completes after it."""
    # 1,000 loops' first calls take seconds to go out (1,000 connections to a server in
    # this process): the storm lasts long enough for all of them to meet it
    figures = asyncio.run(measure(1000, 4.0, cooldown=0.5, max_cooldown=1.0))
    assert figures["storm_requests"] <= 1000 + 8, figures
    assert figures["requests_after_first_wave"] <= 8, figures
    assert 1 <= figures["probes"] <= 9, figures
    assert figures["circuit_opened"] >= 1
    assert figures["completed"] == 1000
    assert figures["first_success_after_storm"] is not None
    assert 0 <= figures["first_success_after_storm"] < 2.0, figures
