"""Every recorded Anthropic and OpenAI response in the corpus, replayed over loopback HTTP
through the real SDK clients and the providers, must assemble to what the recording says.

The expectation is read from the whole recorded body at once (no streaming state), so it
is an independent check of the incremental parser. Server-side tool blocks (web search,
code execution, MCP, tool search) are kept in the canonical message as ``ServerToolBlock``:
their type, id and (for a call) input must match the recording.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from innerloop import ProviderError
from innerloop._messages import ModelResponse
from innerloop.providers import AnthropicProvider, AsyncioTransport, OpenAIProvider, WireRequest
from innerloop.testing import AnthropicServer, OpenAIServer, Raw
from tests.providers._corpus import Case, load_cases

CASES = load_cases()
KEY = "sk-ant-conformance-0123456789"
FINISH = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
STATUS_CATEGORY = {429: "rate_limited", 400: "fatal", 404: "fatal"}


def _data(body: bytes) -> Iterator[Any]:
    for line in body.decode().splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            yield json.loads(line[5:])


def _expect_anthropic(case: Case) -> dict[str, Any]:
    if not case.streaming:
        return _expect_anthropic_json(json.loads(case.decoded()))
    return _expect_anthropic_stream(case)


def _is_server(kind: str) -> bool:
    return kind in ("server_tool_use", "mcp_tool_use") or kind.endswith("_tool_result")


def _server(block: dict[str, Any], input: Any) -> tuple[str, Any, Any]:
    """What a server-tool block must come back as: its type, id and input (a call's)."""
    return (block["type"], block.get("id") or block.get("tool_use_id"), input)


def _expect_anthropic_json(body: dict[str, Any]) -> dict[str, Any]:
    blocks = body["content"]
    return {
        "server": [_server(b, b.get("input")) for b in blocks if _is_server(b["type"])],
        "text": "".join(b["text"] for b in blocks if b["type"] == "text"),
        "thinking": [(b["thinking"], b["signature"]) for b in blocks if b["type"] == "thinking"],
        "redacted": [b["data"] for b in blocks if b["type"] == "redacted_thinking"],
        "tools": [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"],
        "stop_reason": body["stop_reason"],
        "usage": body["usage"],
        "model": body["model"],
        "id": body["id"],
        "incomplete": 0,
    }


def _expect_anthropic_stream(case: Case) -> dict[str, Any]:
    starts: dict[int, dict[str, Any]] = {}
    parts: dict[int, list[str]] = {}
    signatures: dict[int, str] = {}
    stopped: set[int] = set()
    usage: dict[str, Any] = {}
    stop_reason, model, response_id = None, "", None
    for event in _data(case.decoded()):
        kind = event["type"]
        if kind == "message_start":
            model = event["message"]["model"]
            response_id = event["message"]["id"]
            usage.update(event["message"]["usage"])
        elif kind == "content_block_start":
            starts[event["index"]] = event["content_block"]
            parts[event["index"]] = []
        elif kind == "content_block_delta":
            delta = event["delta"]
            for key in ("text", "partial_json", "thinking"):
                if key in delta:
                    parts[event["index"]].append(delta[key])
            if "signature" in delta:
                signatures[event["index"]] = delta["signature"]
        elif kind == "content_block_stop":
            stopped.add(event["index"])
        elif kind == "message_delta":
            stop_reason = event["delta"]["stop_reason"]
            usage.update({k: v for k, v in event["usage"].items() if v is not None})
    kinds = {i: s["type"] for i, s in starts.items()}
    return {
        "server": [
            _server(
                starts[i], json.loads("".join(parts[i]) or "{}") if "input" in starts[i] else None
            )
            for i in sorted(kinds)
            if _is_server(kinds[i]) and i in stopped
        ],
        "text": "".join("".join(parts[i]) for i in sorted(kinds) if kinds[i] == "text"),
        "thinking": [
            ("".join(parts[i]), signatures.get(i, ""))
            for i in sorted(kinds)
            if kinds[i] == "thinking"
        ],
        "redacted": [starts[i]["data"] for i in sorted(kinds) if kinds[i] == "redacted_thinking"],
        "tools": [
            (starts[i]["name"], json.loads("".join(parts[i]) or "{}"))
            for i in sorted(kinds)
            if kinds[i] == "tool_use" and i in stopped
        ],
        "stop_reason": stop_reason,
        "usage": usage,
        "model": model,
        "id": response_id,
        "incomplete": sum(1 for i in kinds if kinds[i] == "tool_use" and i not in stopped),
    }


def _expect_openai(case: Case) -> dict[str, Any]:
    if case.streaming:
        chunks = list(_data(case.decoded()))
    else:
        body = json.loads(case.decoded())
        message = body["choices"][0]["message"]
        calls = [{"index": i, **c} for i, c in enumerate(message.get("tool_calls") or ())]
        delta = {"content": message.get("content"), "tool_calls": calls}
        choice = {"index": 0, "delta": delta, "finish_reason": body["choices"][0]["finish_reason"]}
        chunks = [{**body, "choices": [choice]}]
    text, refusal = "", ""
    calls_by_index: dict[int, list[str]] = {}
    finish, model = None, ""
    usage: dict[str, Any] = {}
    for chunk in chunks:
        model = chunk.get("model") or model
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            if choice["index"] != 0:
                continue
            delta = choice["delta"]
            text += delta.get("content") or ""
            refusal += delta.get("refusal") or ""
            for call in delta.get("tool_calls") or ():
                entry = calls_by_index.setdefault(call["index"], ["", ""])
                entry[0] = entry[0] or call.get("function", {}).get("name", "")
                entry[1] += call.get("function", {}).get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {
        "server": [],
        "text": text + refusal,
        "thinking": [],
        "redacted": [],
        "tools": [(n, json.loads(a or "{}")) for n, a in calls_by_index.values()],
        "stop_reason": "refusal" if refusal else FINISH.get(finish or "", finish),
        "usage": usage,
        "model": model,
        "id": chunks[0]["id"],
        "incomplete": 0,
    }


def _canonical_usage(case: Case, usage: dict[str, Any]) -> dict[str, int]:
    if case.provider == "anthropic":
        return {
            "input_tokens": usage.get("input_tokens") or 0,
            "output_tokens": usage.get("output_tokens") or 0,
            "cache_read_tokens": usage.get("cache_read_input_tokens") or 0,
            "cache_creation_tokens": usage.get("cache_creation_input_tokens") or 0,
            "estimated": False,  # every recorded response reports its usage
        }
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": usage["prompt_tokens"] - cached,
        "output_tokens": usage["completion_tokens"],
        "cache_read_tokens": cached,
        "cache_creation_tokens": 0,
        "estimated": False,
    }


def _observed(response: ModelResponse) -> dict[str, Any]:
    message = response.message
    usage = response.usage.to_dict()
    usage.pop("thinking_tokens")
    return {
        "server": [(b.kind, b.id, b.data.get("input")) for b in message.server_tools],
        "text": message.text,
        "thinking": [(b.thinking, b.signature) for b in message.content if b.type == "thinking"],
        "redacted": [b.data for b in message.content if b.type == "redacted_thinking"],
        "tools": [(b.name, b.input) for b in message.tool_uses],
        "stop_reason": response.stop_reason,
        "usage": usage,
        "model": response.model,
        "id": response.id,
        "incomplete": len(response.incomplete_tool_uses),
    }


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    with AnthropicServer() as anthropic_server, OpenAIServer() as openai_server:
        yield {"anthropic": anthropic_server, "openai": openai_server}


def _replay(servers: dict[str, Any], case: Case, route: str) -> ModelResponse:
    """``case`` through its provider: over the SDK's request builder and connection pool
    (``sdk``), or written by the provider on an ``AsyncioTransport`` (``wire``)."""
    server = servers[case.provider]
    server.push(Raw(case.status, case.headers, case.body))

    async def go() -> ModelResponse:
        transport = AsyncioTransport() if route == "wire" else None
        if case.provider == "anthropic":
            provider: Any = AnthropicProvider(KEY, base_url=server.base_url, transport=transport)
        else:
            provider = OpenAIProvider(KEY, base_url=server.base_url, transport=transport)
        payload = {"model": "recorded-model", "max_tokens": 64, "stream": True, "messages": []}
        try:
            return await provider.complete(WireRequest(case.provider, "recorded-model", payload))  # type: ignore[no-any-return]
        finally:
            await provider.aclose()

    return asyncio.run(go())


OK = [c for c in CASES if c.status == 200]
ERRORS = [c for c in CASES if c.status != 200]


def test_corpus_covers_both_providers_both_formats() -> None:
    """The fixtures hold streaming and JSON responses of both providers, and errors."""
    kinds = {(c.provider, c.streaming) for c in OK}
    assert kinds == {("anthropic", True), ("anthropic", False), ("openai", True), ("openai", False)}
    assert {c.status for c in ERRORS} == {400, 404, 429}
    assert len(CASES) == 92


ROUTES = ("sdk", "wire")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", OK, ids=[c.id for c in OK])
def test_recorded_response_assembles_to_the_recording(
    servers: dict[str, Any], case: Case, route: str
) -> None:
    """Text, thinking, tool names and inputs, stop reason, usage, model and the response
    id match."""
    expected = (_expect_anthropic if case.provider == "anthropic" else _expect_openai)(case)
    expected["usage"] = _canonical_usage(case, expected["usage"])
    assert _observed(_replay(servers, case, route)) == expected


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", ERRORS, ids=[c.id for c in ERRORS])
def test_recorded_error_maps_to_its_category(
    servers: dict[str, Any], case: Case, route: str
) -> None:
    """Recorded 4xx bodies become the right category with the provider's message."""
    with pytest.raises(ProviderError) as caught:
        _replay(servers, case, route)
    error = caught.value
    body = json.loads(case.decoded())
    assert error.category.value == STATUS_CATEGORY[case.status]
    assert error.status == case.status
    assert body["error"]["message"] in error.message
    assert error.raw is not None
    assert "sk-ant-conformance" not in error.raw
