"""OpenAI-compatible servers (llama.cpp, vLLM, Ollama...) through loopback servers that
answer the way they do: the output-cap field, empty streams, refused response formats."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from innerloop import HarnessParams, ProviderError
from innerloop._events import Alert, Event
from innerloop.providers import OpenAIProvider
from innerloop.providers._normalize import WireRequest
from innerloop.testing import Fault, OpenAIServer, Raw, reply, tool_call
from innerloop.tools import tool

MODEL = "openai:local-model"
JSON = (("content-type", "application/json"),)
REFUSED_FORMAT = json.dumps(  # llama.cpp's server, for response_format json_schema
    {
        "error": {
            "message": "[{'type': 'literal_error', 'loc': ('body', 'response_format', "
            "'typed-dict', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", "
            "'input': 'json_schema'}]",
            "type": "internal_server_error",
        }
    }
).encode()


@tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def _payload(**extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": True,
        "max_completion_tokens": 5,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


async def _complete(provider: OpenAIProvider, payload: dict[str, Any]) -> Any:
    try:
        return await provider.complete(WireRequest("openai", "m", payload))
    finally:
        await provider.aclose()


def _alerts(events: list[Event], kind: str) -> list[Alert]:
    return [e for e in events if isinstance(e, Alert) and e.kind == kind]


class TestOutputCap:
    def test_a_compatible_server_is_sent_max_tokens(self) -> None:
        """A base URL that is not OpenAI's own host: the cap goes out as max_tokens."""
        with OpenAIServer([reply("hi")]) as server:
            provider = OpenAIProvider(base_url=server.base_url)
            assert provider.output_cap_field == "max_tokens"
            asyncio.run(_complete(provider, _payload()))
            body = server.requests[0].body
        assert body["max_tokens"] == 5
        assert "max_completion_tokens" not in body

    def test_openais_own_host_keeps_max_completion_tokens(self) -> None:
        """OpenAI's endpoint (the default base URL) and Azure's read max_completion_tokens."""
        assert OpenAIProvider("k").output_cap_field == "max_completion_tokens"
        azure = OpenAIProvider("k", base_url="https://x.openai.azure.com/openai/v1")
        assert azure.output_cap_field == "max_completion_tokens"

    def test_the_field_can_be_named(self) -> None:
        """output_cap_field= overrides the guess, both ways; a third name is refused."""
        with OpenAIServer([reply("hi")]) as server:
            provider = OpenAIProvider(
                base_url=server.base_url, output_cap_field="max_completion_tokens"
            )
            asyncio.run(_complete(provider, _payload()))
            assert server.requests[0].body["max_completion_tokens"] == 5
        assert OpenAIProvider("k", output_cap_field="max_tokens").output_cap_field == "max_tokens"
        with pytest.raises(ValueError, match="output_cap_field must be one of"):
            OpenAIProvider("k", output_cap_field="max_output_tokens")  # type: ignore[arg-type]


def _no_stream(answer: Any) -> Any:
    """A server that answers every streamed request with an empty body."""

    def respond(body: Any) -> Any:
        return Fault.empty() if body.get("stream") else answer

    return respond


class TestEmptyStreams:
    def test_an_empty_stream_is_asked_again_unstreamed_and_remembered(
        self, make_harness: Any
    ) -> None:
        """Tools with auto choice on a server that cannot stream them: the empty body is
        asked again without streaming, an alert says so, and the next turn of the same
        kind goes unstreamed at once (three requests, not four)."""
        answers = iter([reply(tool_call("weather", {"city": "Oslo"}, id="c1")), reply("Sunny.")])
        with OpenAIServer(respond=_no_stream(None)) as server:
            server.respond = lambda body: Fault.empty() if body["stream"] else next(answers)
            params = HarnessParams(model=MODEL, tools=[weather])
            harness = make_harness(params, [OpenAIProvider(base_url=server.base_url)])
            events: list[Event] = []
            state = harness.run_sync("Weather in Oslo?", on_event=events.append)
            streamed = [r.body["stream"] for r in server.requests]
        assert state.exit_reason == "model_complete"
        assert streamed == [True, False, False]
        assert "stream_options" not in server.requests[1].body
        [alert] = _alerts(events, "stream_unsupported")
        assert "with tools" in alert.message
        assert "unstreamed=['local-model']" in alert.message

    def test_the_real_error_behind_an_empty_stream_is_raised(self) -> None:
        """Over context, the unstreamed re-ask gets a proper 400: the error is the context
        overflow the machine recovers from, it says it came from the re-ask, and nothing is
        remembered (the next request streams again)."""
        with OpenAIServer(respond=_no_stream(Fault.context_overflow())) as server:
            provider = OpenAIProvider(base_url=server.base_url)

            async def twice() -> list[ProviderError]:
                errors = []
                for _ in range(2):
                    try:
                        await provider.complete(WireRequest("openai", "m", _payload()))
                    except ProviderError as exc:
                        errors.append(exc)
                await provider.aclose()
                return errors

            errors = asyncio.run(twice())
            streamed = [r.body["stream"] for r in server.requests]
        assert [e.category for e in errors] == ["context_overflow"] * 2
        assert errors[0].status == 400
        assert "asked again without streaming" in errors[0].message
        assert streamed == [True, False, True, False]

    def test_a_model_can_be_asked_unstreamed_from_the_start(self) -> None:
        """unstreamed=[model]: one JSON answer per request, no alert, no streamed try."""
        with OpenAIServer([reply("hi")]) as server:
            provider = OpenAIProvider(base_url=server.base_url, unstreamed=["m"])
            response = asyncio.run(_complete(provider, _payload()))
            body = server.requests[0].body
        assert response.message.text == "hi"
        assert body["stream"] is False
        assert "stream_options" not in body
        with pytest.raises(TypeError, match="use \\('m',\\)"):
            OpenAIProvider("k", unstreamed="m")


class TestRefusedOutputFormat:
    def test_json_schema_refused_falls_back_to_json_object(self, make_harness: Any) -> None:
        """A 500 refusing json_schema: asked again as json_object with the schema in the
        system prompt, an alert says so, the answer is validated; the next run with the
        same provider asks json_object directly."""

        def respond(body: Any) -> Any:
            if body["response_format"]["type"] == "json_schema":
                return Raw(500, JSON, REFUSED_FORMAT)
            return reply('{"city": "Oslo", "sky": "sunny"}')

        schema = {
            "type": "object",
            "properties": {"city": {"type": "string"}, "sky": {"type": "string"}},
            "required": ["city", "sky"],
            "additionalProperties": False,
        }
        with OpenAIServer(respond=respond) as server:
            params = HarnessParams(model=MODEL, output_type=schema)
            provider = OpenAIProvider(base_url=server.base_url)
            events: list[Event] = []
            state = make_harness(params, [provider]).run_sync("Oslo?", on_event=events.append)
            again = make_harness(params, [provider]).run_sync("Oslo?")
            formats = [r.body["response_format"]["type"] for r in server.requests]
            sent = server.requests[1].body
        assert state.exit_reason == again.exit_reason == "model_complete"
        assert state.output == {"city": "Oslo", "sky": "sunny"}
        assert formats == ["json_schema", "json_object", "json_object"]
        assert sent["response_format"]["schema"] == schema
        assert sent["messages"][0]["role"] == "system"
        assert json.dumps(schema, separators=(",", ":")) in sent["messages"][0]["content"]
        [alert] = _alerts(events, "output_format_fallback")
        assert "Input should be 'text' or 'json_object'" in alert.message

    def test_output_mode_json_asks_json_object_at_once(self, make_harness: Any) -> None:
        """output_mode='json': the first request is json_object with the schema named."""
        schema = {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        }
        with OpenAIServer([reply('{"n": 4}')]) as server:
            params = HarnessParams(
                model=MODEL, output_type=schema, output_mode="json", system="Be brief."
            )
            state = make_harness(params, [OpenAIProvider(base_url=server.base_url)]).run_sync(
                "2+2?"
            )
            body = server.requests[0].body
        assert state.output == {"n": 4}
        assert body["response_format"] == {"type": "json_object", "schema": schema}
        assert body["messages"][0]["content"].startswith("Be brief.\n\nAnswer with one JSON")
