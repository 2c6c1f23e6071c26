"""A provider dropped without ``aclose()`` inside a long-lived event loop leaves nothing
pending: its loop-end duty ends with it, and its connections are closed."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

from innerloop.providers import AnthropicProvider, AsyncioTransport, OpenAIProvider
from innerloop.providers._normalize import WireRequest
from innerloop.testing import AnthropicServer, OpenAIServer, reply

PAYLOAD = {"model": "m", "stream": True, "max_tokens": 5, "messages": []}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("route", ["sdk", "wire"])
@pytest.mark.parametrize("server_cls", [OpenAIServer, AnthropicServer])
def test_providers_built_per_request_and_dropped_leave_no_task(
    server_cls: Any, route: str
) -> None:
    """Ten providers, each built for one request in the same loop and dropped: asyncio
    logs no 'Task was destroyed but it is pending!' (the suite turns an ignored
    GeneratorExit into an error), and each dropped provider's client is closed while the
    loop runs."""
    records = _Records()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(records)
    cls = OpenAIProvider if server_cls is OpenAIServer else AnthropicProvider

    async def main(server: Any) -> list[bool]:
        closed = []
        for _ in range(10):
            transport = AsyncioTransport() if route == "wire" else None
            provider = cls("k", base_url=server.base_url, transport=transport)
            await provider.complete(WireRequest(provider.dialect, "m", dict(PAYLOAD)))
            client = provider.client
            del provider
            gc.collect()
            for _ in range(3):  # the cancelled duty runs, closes the client, ends
                await asyncio.sleep(0)
            closed.append(client.is_closed())
        return closed

    try:
        with server_cls([reply("hi")] * 10) as server:
            closed = asyncio.run(main(server))
    finally:
        asyncio_log.removeHandler(records)
    assert not [m for m in records.messages if "destroyed" in m or "pending" in m]
    assert closed == [route == "sdk"] * 10  # a transport given is the user's: left open
