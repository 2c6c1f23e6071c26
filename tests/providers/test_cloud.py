"""Cloud routes: a provider given a prebuilt SDK client (Vertex AI, Azure OpenAI, any
OpenAI-compatible base URL) sends each route's path, auth and body, checked by loopback
servers serving that route. Bedrock (SigV4, AWS event-stream answers): test_bedrock.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic import AsyncAnthropicVertex
from openai import AsyncAzureOpenAI, AsyncOpenAI

from innerloop import HarnessParams, Message
from innerloop.lowlevel import build_request
from innerloop.providers import (
    AnthropicProvider,
    AsyncioTransport,
    OpenAIProvider,
    OpenAIResponsesProvider,
)
from innerloop.providers._normalize import RequestSettings
from innerloop.testing import AnthropicServer, OpenAIServer, ResponsesServer, reply

CLAUDE = "claude-sonnet-4-5@20250929"
VERTEX_PATH = (
    f"/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/{CLAUDE}:streamRawPredict"
)


def _vertex(server: AnthropicServer) -> AsyncAnthropicVertex:
    return AsyncAnthropicVertex(
        region="us-east5",
        project_id="proj-1",
        access_token="ya29.vertex-token",
        base_url=server.url + "/v1",
        max_retries=0,
    )


def _azure(server: OpenAIServer | ResponsesServer) -> AsyncAzureOpenAI:
    return AsyncAzureOpenAI(
        api_key="azure-key-0123456789",
        api_version="2024-10-21",
        azure_endpoint=server.url,
        max_retries=0,
    )


def _complete(provider: Any, dialect: str, model: str) -> Any:
    async def go() -> Any:
        request = build_request(RequestSettings(64), [Message.user("q")], dialect, model)
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()
            await provider.client.close()  # a prebuilt client is its owner's to close

    return asyncio.run(go())


def test_vertex_stream_raw_predict(make_harness: Any) -> None:
    """Vertex: the model in the path (``:streamRawPredict``), a bearer token, and the body
    with ``anthropic_version`` and without ``model``; the whole machine runs on it."""
    with AnthropicServer([reply("hi from Vertex")], path=VERTEX_PATH) as server:
        provider = AnthropicProvider(client=_vertex(server), name="vertex")
        params = HarnessParams(model=f"vertex:{CLAUDE}", system="Be terse.")
        harness = make_harness(params, [provider])

        async def go() -> Any:
            try:
                return await harness.run("q")
            finally:
                await provider.client.close()

        state = asyncio.run(go())
        sent = server.requests[0]
    assert state.exit_reason == "model_complete"
    assert state.history[-1] == Message.assistant("hi from Vertex")
    assert sent.path == VERTEX_PATH
    assert sent.headers["authorization"] == "Bearer ya29.vertex-token"
    assert "model" not in sent.body
    assert sent.body["anthropic_version"]
    assert sent.body["stream"] is True
    assert sent.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "q"}]}]


def test_azure_deployment_path_and_api_version() -> None:
    """Azure OpenAI: the deployment in the path, ``api-version`` in the query, ``api-key``."""
    path = "/openai/deployments/my-gpt/chat/completions"
    with OpenAIServer([reply("hi from Azure")], path=path) as server:
        response = _complete(OpenAIProvider(client=_azure(server)), "openai", "my-gpt")
        sent = server.requests[0]
    assert response.message == Message.assistant("hi from Azure")
    assert (sent.path, sent.query) == (path, "api-version=2024-10-21")
    assert sent.headers["api-key"] == "azure-key-0123456789"
    assert "authorization" not in sent.headers
    assert sent.body["model"] == "my-gpt"


def test_azure_responses_api() -> None:
    """The Responses provider on an Azure client: ``/openai/responses`` with its api-version."""
    with ResponsesServer([reply("hi")], path="/openai/responses") as server:
        provider = OpenAIResponsesProvider(client=_azure(server))
        response = _complete(provider, "responses", "my-gpt")
        sent = server.requests[0]
    assert response.message == Message.assistant("hi")
    assert sent.query == "api-version=2024-10-21"
    assert sent.headers["api-key"] == "azure-key-0123456789"


@pytest.mark.parametrize("route", ["sdk", "wire"])
def test_openai_compatible_base_url(route: str) -> None:
    """A compatible server under its own prefix (OpenRouter's ``/api/v1``; vLLM's and
    Ollama's ``/v1``): no key needed, the path follows the base URL on both routes."""
    path = "/api/v1/chat/completions"
    with OpenAIServer([reply("hi from a router")], path=path) as server:
        transport = AsyncioTransport() if route == "wire" else None
        provider = OpenAIProvider(base_url=server.url + "/api/v1", transport=transport)
        response = _complete(provider, "openai", "meta-llama/llama-3.3-70b-instruct")
        sent = server.requests[0]
    assert response.message == Message.assistant("hi from a router")
    assert sent.path == path
    assert sent.body["model"] == "meta-llama/llama-3.3-70b-instruct"


def test_prebuilt_openai_client_keeps_its_headers() -> None:
    """A prebuilt ``AsyncOpenAI`` (say, with an organization) is used as given."""
    with OpenAIServer([reply("ok")]) as server:
        client = AsyncOpenAI(
            api_key="sk-prebuilt-0123456789", base_url=server.base_url, organization="org-1"
        )
        _complete(OpenAIProvider(client=client), "openai", "gpt-4o-2024-08-06")
        sent = server.requests[0]
    assert sent.headers["authorization"] == "Bearer sk-prebuilt-0123456789"
    assert sent.headers["openai-organization"] == "org-1"


@pytest.mark.parametrize(
    ("make", "cls", "why"),
    [
        (_vertex, AnthropicProvider, "Vertex AI's per-model :streamRawPredict path"),
        (_azure, OpenAIProvider, "Azure's per-deployment path and api-version query"),
    ],
)
def test_the_wire_route_refuses_clients_that_rewrite_requests(
    make: Any, cls: Any, why: str
) -> None:
    """A client whose SDK builds each request itself cannot take the wire route: the
    provider says so at construction, naming the way out."""
    with AnthropicServer() as server:
        client = make(server)
        with pytest.raises(ValueError, match="drop the transport argument") as caught:
            cls(client=client, transport=AsyncioTransport())
        asyncio.run(client.close())
    assert why in str(caught.value)
