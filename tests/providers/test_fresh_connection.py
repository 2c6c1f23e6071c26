"""A retry after a failed call goes out on a fresh connection: the server may have dropped
the pooled keep-alive one (llama.cpp's closes it after an empty or failed stream while its
head said keep-alive), and a retry sent on it is wasted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from innerloop import HarnessParams
from innerloop.events import Event, ModelError
from innerloop.providers import AsyncioTransport, OpenAIProvider
from innerloop.testing import OpenAIServer, Raw, reply

JSON = (("content-type", "application/json"),)
SSE = (("content-type", "text/event-stream"),)
SERVER_ERROR = json.dumps({"error": {"message": "boom", "type": "server_error"}}).encode()
CUT = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"par"}}]}\n\n'  # no end


@pytest.mark.parametrize("route", ["sdk", "wire"])
@pytest.mark.parametrize(
    "failure",
    [Raw(500, JSON, SERVER_ERROR, close=True), Raw(200, SSE, CUT, close=True)],
    ids=["500-at-open", "stream-cut-short"],
)
def test_the_retry_after_a_dropped_connection_succeeds(
    make_harness: Any, route: str, failure: Raw
) -> None:
    """The server answers (a 500, or a stream that ends before its message) and closes
    the keep-alive connection: the machine's one immediate retry goes out on a new
    connection and completes the run, instead of dying on the dead one."""
    with OpenAIServer([failure, reply("ok")]) as server:
        transport = AsyncioTransport() if route == "wire" else None
        provider = OpenAIProvider(base_url=server.base_url, transport=transport)
        events: list[Event] = []
        state = make_harness(HarnessParams(model="openai:m"), [provider]).run_sync(
            "hi", on_event=events.append
        )
        served = len(server.requests)
    errors = [e.error.message for e in events if isinstance(e, ModelError)]
    assert len(errors) == 1, errors
    assert state.exit_reason == "model_complete", errors
    assert served == 2
