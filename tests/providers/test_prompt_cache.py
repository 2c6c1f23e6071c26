"""Prompt-cache control: checked at params construction, carried by the requests the real
SDK clients send (asserted on the JSON the loopback servers recorded), and cache reads and
writes read from real recorded responses into usage and cost."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
import yaml

from innerloop import HarnessParams, Message, ParamsError, PromptCache, ToolSpec, Usage
from innerloop.providers import (
    AnthropicProvider,
    OpenAIProvider,
    OpenAIResponsesProvider,
    WireRequest,
)
from innerloop.providers._normalize import RequestSettings, build_request
from innerloop.recovery._pricing import DEFAULT_PRICES, cost_usd
from innerloop.testing import (
    AnthropicServer,
    OpenAIServer,
    Raw,
    ResponsesServer,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput

KEY = "sk-cache-0123456789abcdef"
CASSETTES = (
    Path(__file__).resolve().parents[1] / "fixtures" / "cache" / "pydantic-ai" / "tests" / "models"
)
"""Real recorded traffic (see tests/fixtures/cache/SOURCES.md)."""


async def _echo(args: Any, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("echo:" + str(args.get("x", "")))


ECHO = ToolSpec(
    "echo", "Echo x back", {"type": "object", "properties": {"x": {"type": "string"}}}, _echo
)


class TestParams:
    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            (
                {"ttl": "10m"},
                "prompt_cache.ttl: must be '5m', '1h' or None (Anthropic's default, five "
                "minutes), got '10m'",
            ),
            (
                {"tools": True, "last_messages": 3},
                "prompt_cache.last_messages: asks for 5 cache breakpoints (system 1, tools 1, "
                "last_messages 3) but Anthropic takes at most 4 a request; lower last_messages",
            ),
            (
                {"last_messages": 2, "messages_ttl": "1h"},
                "prompt_cache.messages_ttl: '1h' message breakpoints would follow default "
                "(5-minute) system/tools breakpoints, and Anthropic requires longer-lived "
                "breakpoints first; set ttl='1h' too, or messages_ttl='5m'",
            ),
            (
                {"last_messages": -1},
                "prompt_cache.last_messages: must be an integer >= 0, got -1",
            ),
            (
                {"retention": "forever"},
                "prompt_cache.retention: must be 'in_memory', '24h' or None (OpenAI's "
                "default), got 'forever'",
            ),
            ({"key": ""}, "prompt_cache.key: must be None or a non-empty string, got ''"),
            ({"system": 1}, "prompt_cache.system: must be True or False, got 1"),
        ],
    )
    def test_bad_settings_are_refused_at_construction(
        self, kwargs: dict[str, Any], message: str
    ) -> None:
        """Each bad value or combination names the field and the fix."""
        with pytest.raises(ParamsError) as caught:
            PromptCache(**kwargs)
        assert str(caught.value) == message

    def test_the_shorthand_flags_fold_in_and_are_checked(self) -> None:
        """cache_tools and cache_last_user_turn join prompt_cache; the sum is checked."""
        params = HarnessParams(
            model="anthropic:claude-sonnet-4-5",
            cache_tools=True,
            cache_last_user_turn=True,
            prompt_cache=PromptCache(ttl="1h"),
        )
        assert params.effective_prompt_cache == PromptCache(ttl="1h", tools=True, last_messages=1)
        with pytest.raises(ParamsError, match="asks for 5 cache breakpoints"):
            HarnessParams(
                model="anthropic:claude-sonnet-4-5",
                cache_tools=True,
                prompt_cache=PromptCache(last_messages=3),
            )


class TestRequests:
    def test_anthropic_breakpoints_with_their_lifetimes(self, make_harness: Any) -> None:
        """System and tools carry one-hour marks; the last two messages five-minute ones,
        on their last blocks; the server (which refuses more than four marks, or a one-hour
        mark after a five-minute one) takes the request."""
        cache = PromptCache(tools=True, ttl="1h", last_messages=2, messages_ttl="5m")
        params = HarnessParams(
            model="anthropic:claude-sonnet-4-5",
            system="Be terse.",
            tools=(ECHO,),
            prompt_cache=cache,
        )
        script = [reply(tool_call("echo", {"x": "a"}, id="toolu_1")), reply("done")]
        with AnthropicServer(script) as server:
            provider = AnthropicProvider(KEY, base_url=server.base_url)
            state = make_harness(params, [provider]).run_sync("hi")
        assert state.exit_reason == "model_complete"
        hour = {"type": "ephemeral", "ttl": "1h"}
        five = {"type": "ephemeral", "ttl": "5m"}
        body = server.requests[1].body
        assert body["system"] == [{"type": "text", "text": "Be terse.", "cache_control": hour}]
        assert body["tools"][-1]["cache_control"] == hour
        assert body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "echo",
                        "input": {"x": "a"},
                        "cache_control": five,
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "echo:a",
                        "cache_control": five,
                    }
                ],
            },
        ]
        first = server.requests[0].body["messages"]
        assert first == [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": five}]}
        ]

    def test_the_default_marks_the_system_prompt_only(self, make_harness: Any) -> None:
        """By default only the system prompt is cached, at Anthropic's default lifetime."""
        params = HarnessParams(model="anthropic:claude-sonnet-4-5", system="Be terse.")
        with AnthropicServer([reply("ok")]) as server:
            provider = AnthropicProvider(KEY, base_url=server.base_url)
            make_harness(params, [provider]).run_sync("hi")
        body = server.requests[0].body
        assert body["system"] == [
            {"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}
        ]
        assert "cache_control" not in body["messages"][0]["content"][0]

    @pytest.mark.parametrize(
        ("server_class", "provider_class", "model"),
        [
            (OpenAIServer, OpenAIProvider, "openai:gpt-4o"),
            (ResponsesServer, OpenAIResponsesProvider, "openai:gpt-5"),
        ],
    )
    def test_openai_key_and_retention(
        self, make_harness: Any, server_class: Any, provider_class: Any, model: str
    ) -> None:
        """Chat Completions and Responses requests carry prompt_cache_key and
        prompt_cache_retention as set; no Anthropic mark leaks into them."""
        cache = PromptCache(key="tenant-42", retention="24h", last_messages=2)
        params = HarnessParams(model=model, system="Be terse.", prompt_cache=cache)
        with server_class([reply("ok")]) as server:
            provider = provider_class(KEY, base_url=server.base_url)
            make_harness(params, [provider]).run_sync("hi")
        body = server.requests[0].body
        assert (body["prompt_cache_key"], body["prompt_cache_retention"]) == ("tenant-42", "24h")
        assert "cache_control" not in str(body)

    @pytest.mark.parametrize(
        ("system", "tools", "message"),
        [
            (
                [
                    {
                        "type": "text",
                        "text": "s",
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    }
                ],
                [
                    {
                        "name": "t",
                        "input_schema": {"type": "object"},
                        "cache_control": {"type": "ephemeral", "ttl": "5m"},
                    }
                ],
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control "
                "block (at system.0); put longer-lived breakpoints first",
            ),
            (
                [
                    {"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}}
                    for i in range(5)
                ],
                [],
                "A maximum of 4 blocks with cache_control may be provided. Found 5.",
            ),
            (
                [
                    {
                        "type": "text",
                        "text": "s",
                        "cache_control": {"type": "ephemeral", "ttl": "2h"},
                    }
                ],
                [],
                "system.0.cache_control.ephemeral.ttl: Input should be '5m' or '1h'",
            ),
        ],
    )
    def test_the_anthropic_server_refuses_bad_marks(
        self, system: Any, tools: Any, message: str
    ) -> None:
        """Sent with the SDK client, bad marks are a 400 with the API's reason."""
        with AnthropicServer([reply("never")]) as server:
            client = anthropic.Anthropic(api_key=KEY, base_url=server.base_url, max_retries=0)
            with pytest.raises(anthropic.BadRequestError) as caught:
                client.messages.create(
                    model="m",
                    max_tokens=10,
                    system=system,
                    tools=tools,
                    messages=[{"role": "user", "content": "hi"}],
                )
        assert caught.value.body["error"]["message"] == message  # type: ignore[index]


def _recorded(path: str) -> list[tuple[Any, dict[str, Any]]]:
    """Each recorded interaction's request and response body."""
    data = yaml.safe_load((CASSETTES / path).read_text())
    return [
        (i["request"]["parsed_body"], i["response"]["parsed_body"]) for i in data["interactions"]
    ]


def _replay(server: Any, provider: Any, dialect: str, body: dict[str, Any]) -> Usage:
    server.push(Raw(200, (("content-type", "application/json"),), json.dumps(body).encode()))

    async def go() -> Usage:
        try:
            payload: dict[str, Any] = {"model": "recorded", "stream": True}
            if dialect == "anthropic":
                payload["max_tokens"] = 64
            payload["input" if dialect == "responses" else "messages"] = []
            response = await provider.complete(WireRequest(dialect, "recorded", payload))
            return response.usage  # type: ignore[no-any-return]
        finally:
            await provider.aclose()

    return asyncio.run(go())


class TestRecordedUsage:
    def test_anthropic_cache_reads_and_writes(self) -> None:
        """A real Claude exchange: a read of 1111 tokens, then a read of 1111 and a write of
        418; cost prices each at its own rate."""
        (_, first), (_, second) = _recorded(
            "cassettes/test_anthropic/test_anthropic_cache_real_api.yaml"
        )
        with AnthropicServer() as server:
            usages = [
                _replay(server, AnthropicProvider(KEY, base_url=server.base_url), "anthropic", b)
                for b in (first, second)
            ]
        assert usages == [Usage(3, 406, 1111, 0), Usage(3, 33, 1111, 418)]
        # claude-sonnet-4: input 3.00, output 15.00, cache read 0.30, cache write 3.75 per MTok
        assert cost_usd(usages[1], "claude-sonnet-4-5", DEFAULT_PRICES) == pytest.approx(
            (3 * 3.0 + 33 * 15.0 + 1111 * 0.3 + 418 * 3.75) / 1e6
        )

    @pytest.mark.parametrize(
        ("path", "server_class", "provider_class", "dialect", "key"),
        [
            (
                "cassettes/test_openai_prompt_cache/test_openai_chat_prompt_cache_e2e.yaml",
                OpenAIServer,
                OpenAIProvider,
                "openai",
                "pydantic-ai-prompt-cache-e2e-chat",
            ),
            (
                "cassettes/test_openai_prompt_cache/test_openai_responses_prompt_cache_e2e.yaml",
                ResponsesServer,
                OpenAIResponsesProvider,
                "responses",
                "pydantic-ai-prompt-cache-e2e-responses",
            ),
        ],
    )
    def test_openai_cache_writes_then_reads(
        self, path: str, server_class: Any, provider_class: Any, dialect: str, key: str
    ) -> None:
        """Real OpenAI exchanges sharing a prompt_cache_key: 4012 of 4020 prompt tokens
        written to cache, then read from it; input_tokens keeps the other 8."""
        interactions = _recorded(path)
        assert [request["prompt_cache_key"] for request, _ in interactions] == [key, key]
        usages = []
        with server_class() as server:
            for _, body in interactions:
                provider = provider_class(KEY, base_url=server.base_url)
                usages.append(_replay(server, provider, dialect, body))
        output = 4 if dialect == "openai" else 5
        assert usages == [Usage(8, output, 0, 4012), Usage(8, output, 4012, 0)]


def test_more_message_marks_than_messages() -> None:
    """last_messages beyond the history marks what there is."""
    settings = RequestSettings(max_output_tokens=10, prompt_cache=PromptCache(last_messages=3))
    request = build_request(settings, [Message.user("hi")], "anthropic", "claude-sonnet-4-5")
    assert request.payload["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]
