"""bench/storm.py: 1,000 loops through a 429 storm share one gate and send few probes."""

from __future__ import annotations

import asyncio

from bench.storm import measure


def test_thousand_loops_send_a_few_probes_through_a_storm() -> None:
    """Each loop's first call meets the storm; after that only half-open probes go out
    (without the gate, each loop retries on its own), and every loop completes after it."""
    # 1,000 loops' first calls take seconds to go out (1,000 connections to a server in
    # this process): the storm lasts long enough for all of them to meet it
    # (and on a loaded machine, until every loop's first call has met it: at_least)
    figures = asyncio.run(measure(1000, 4.0, cooldown=0.5, max_cooldown=1.0, at_least=1000))
    assert figures["storm_requests"] <= 1000 + 8, figures
    assert figures["requests_after_first_wave"] <= 8, figures
    assert 1 <= figures["probes"] <= 9, figures
    assert figures["circuit_opened"] >= 1
    assert figures["completed"] == 1000
    assert figures["first_success_after_storm"] is not None
    assert 0 <= figures["first_success_after_storm"] < 2.0, figures


def test_a_storm_meets_at_least_the_requests_asked() -> None:
    """A storm of no seconds with ``at_least=2`` answers the first two requests with 429
    and plays the script from the third: however slow the machine, it meets them."""
    import httpx

    from innerloop.testing import AnthropicServer, reply

    with AnthropicServer([reply("ok")]) as server:
        server.storm(0.0, at_least=2)
        body = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 8, "messages": []}
        with httpx.Client(base_url=server.base_url) as http:
            codes = [http.post("/v1/messages", json=body).status_code for _ in range(3)]
        assert codes == [429, 429, 200]
        assert len(server.storm_requests) == 2
        assert server.storm_end == server.storm_requests[-1]
