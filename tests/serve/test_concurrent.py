"""Many clients streaming at once from one served harness: each client's stream is whole
and its own (bench/serve.py runs 200 and times the server's event loop; here 20, untimed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.serve import (
    PROTOCOLS,
    Floor,
    answer_for,
    asgi_call,
    concurrent_streams,
    harness,
    latency_requests,
    paced_harness,
    plain_streams,
    post_raw,
    sse_data,
    stream_problems,
)
from innerloop.serve import app
from tests.serve.conftest import Server


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_twenty_streams_at_once_are_each_whole_and_unmixed(serve: Any, protocol: str) -> None:
    """20 conversations stream at once (a delta each millisecond, so their events
    interleave in the server): every client gets all of its own answer, in order, and no
    event of another conversation."""
    server = serve(paced_harness(0.001))
    assert await concurrent_streams(server.base_url, protocol, 20, "t") == []


async def test_the_plain_sse_app_replays_a_kept_stream_in_its_writes() -> None:
    """The bench's yardstick: a served stream kept, then streamed again by the plain app
    to several clients at once: the same bytes, in the writes it was served in."""
    served = app(paced_harness(0.001))
    floor = Floor(served, served, 0.001)
    with Server(floor) as server:
        assert await concurrent_streams(server.base_url, "ai-sdk", 1, "k") == []
        await post_raw(server.base_url, "/bench/keep/ai-sdk", {})
        status, kept = await post_raw(server.base_url, "/bench/kept/ai-sdk", {})
        assert await plain_streams(server.base_url, "ai-sdk", 3) == []
    assert status == 200
    assert stream_problems("ai-sdk", 0, "k", sse_data(kept)) == []
    writes = floor.kept["/ai-sdk"]
    assert writes[0]["type"] == "http.response.start"
    assert b"".join(m["body"] for m in writes[1:]) == kept


async def test_the_app_alone_answers_each_timed_route_in_process() -> None:
    """The bench's in-process figure times whole runs: each route's call answers 200 and
    its answer, the run's last event included."""
    served = app(harness())
    async with served.lifespan(served):
        for path, body in latency_requests().values():
            sent = await asgi_call(served, path, body())
            assert sent[0]["status"] == 200
            answer = b"".join(m.get("body", b"") for m in sent[1:])
            assert b"Hello." in answer
            assert not sent[-1].get("more_body")


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
