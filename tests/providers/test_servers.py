"""The loopback API servers: real HTTP, scripts, recorded requests, clean stops."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import urllib.request
from typing import Any

import anthropic
import openai
import pytest

from innerloop.providers import AnthropicProvider, WireRequest
from innerloop.testing import (
    AnthropicServer,
    OpenAIServer,
    Oversized,
    Raw,
    RecordedRequest,
    reply,
    tool_call,
)

KEY = "sk-ant-servers-0123456789abcdef"


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_sync_client_gets_json_when_not_streaming() -> None:
    """A plain sync HTTP client gets a JSON message; the request is recorded."""
    with AnthropicServer([reply("hi", tool_call("f", {"a": 1}, id="toolu_9"))]) as server:
        status, headers, body = _post(server.url + "/v1/messages", {"model": "m", "stream": False})
        assert server.requests == [
            RecordedRequest(
                "POST",
                "/v1/messages",
                server.requests[0].headers,
                {"model": "m", "stream": False},
            )
        ]
    assert status == 200
    assert headers["content-type"] == "application/json"
    message = json.loads(body)
    assert message["content"] == [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {"a": 1}},
    ]
    assert message["stop_reason"] == "tool_use"


def test_sdk_stream_helper_reads_the_server() -> None:
    """The anthropic SDK's own stream helper accepts what the server streams."""

    async def go() -> str:
        async with AnthropicServer([reply("hello there")]) as server:
            client = anthropic.AsyncAnthropic(api_key="k", base_url=server.base_url, max_retries=0)
            async with client.messages.stream(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            ) as stream:
                message = await stream.get_final_message()
            await client.close()
            return message.content[0].text  # type: ignore[union-attr]

    assert asyncio.run(go()) == "hello there"


def test_openai_sdk_reads_the_server() -> None:
    """The openai SDK (sync) parses the server's chunks, usage chunk and [DONE]."""
    with OpenAIServer([reply("ok", tool_call("f", {}, id="call_1"))]) as server:
        client = openai.OpenAI(api_key="k", base_url=server.base_url, max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "x"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        client.close()
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-2].choices[0].finish_reason == "tool_calls"


def test_script_exhausted_and_unknown_route() -> None:
    """Past the script the server answers 400 naming the count; other paths get 404."""
    with OpenAIServer([]) as server:
        status, _, body = _post(server.base_url + "/chat/completions", {"model": "m"})
        assert status == 400
        assert json.loads(body)["error"]["message"] == (
            "loopback script exhausted: all 0 steps were played"
        )
        status, _, _ = _post(server.url + "/v1/messages", {})
        assert status == 404


def test_raw_replay_keeps_status_headers_and_gzip() -> None:
    """A recorded response is replayed with its status and headers, gzip when asked."""
    raw = Raw(418, (("content-type", "text/plain"), ("x-extra", "1")), b"teapot", gzip=True)
    with AnthropicServer([raw]) as server:
        request = urllib.request.Request(server.url + "/v1/messages", b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 418
    assert caught.value.headers["x-extra"] == "1"
    assert caught.value.headers["content-encoding"] == "gzip"
    assert gzip.decompress(caught.value.read()) == b"teapot"


def test_stop_frees_the_port() -> None:
    """After stop the port no longer accepts connections; stopping twice is harmless."""
    server = AnthropicServer().start()
    port = server.port
    server.stop()
    server.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert repr(server).startswith("<AnthropicServer stopped")


def test_server_restarts_and_reports_bad_steps() -> None:
    """A stopped server starts again on a new port; an unplayable step becomes a 500 (one
    pushed: a script given to the constructor is checked there)."""
    server = AnthropicServer()
    server.push("not a step")  # type: ignore[arg-type]
    with server:
        status, _, body = _post(server.url + "/v1/messages", {"stream": True})
    with server:
        status_again, _, _ = _post(server.url + "/v1/messages", {})
    assert status == 500
    assert "cannot play the step" in json.loads(body)["error"]["message"]
    assert status_again == 400  # script exhausted


def test_an_oversized_reply_under_the_limit_is_read_whole() -> None:
    """Oversized sends its text as one event in pieces; under the limit it is just big."""

    async def go() -> str:
        async with AnthropicServer([Oversized(300_000, piece=4096)]) as server:
            provider = AnthropicProvider(KEY, base_url=server.base_url)
            payload = {"model": "m", "max_tokens": 5, "messages": [], "stream": True}
            try:
                response = await provider.complete(WireRequest("anthropic", "m", payload))
            finally:
                await provider.aclose()
            return response.message.text

    assert asyncio.run(go()) == "x" * 300_000
