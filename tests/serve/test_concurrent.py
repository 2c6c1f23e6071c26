"""Many clients streaming at once from one served harness: each client's stream is whole
and its own (bench/serve.py runs 200 and times the server's event loop; here 20, untimed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.serve import (
    PROTOCOLS,
    answer_for,
    concurrent_streams,
    paced_harness,
    stream_problems,
)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_twenty_streams_at_once_are_each_whole_and_unmixed(serve: Any, protocol: str) -> None:
    """20 conversations stream at once (a delta each millisecond, so their events
    interleave in the server): every client gets all of its own answer, in order, and no
    event of another conversation."""
    server = serve(paced_harness(0.001))
    assert await concurrent_streams(server.base_url, protocol, 20, "t") == []


def test_a_lost_or_mixed_event_is_seen() -> None:
    """The check itself: a stream missing a delta, or holding another client's, fails."""

    def chunk(text: str, conversation: str = "t-1") -> str:
        delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
        return json.dumps({"id": "x", "conversation_id": conversation, "choices": [delta]})

    whole = answer_for(1)
    assert stream_problems("openai", 1, "t", [chunk(whole), "[DONE]"]) == []
    lost = stream_problems("openai", 1, "t", [chunk(whole[:8]), chunk(whole[16:]), "[DONE]"])
    assert len(lost) == 1
    assert lost[0].startswith("client 1 (openai): text 'c1.0 c1.")
    mixed = stream_problems("openai", 1, "t", [chunk(whole), chunk("", "t-2"), "[DONE]"])
    assert mixed == ["client 1 (openai): events of conversations ['t-2']"]
    cut = stream_problems("openai", 1, "t", [chunk(whole)])
    assert cut == ["client 1 (openai): the stream did not end with [DONE]"]
