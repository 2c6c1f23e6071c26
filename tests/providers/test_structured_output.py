"""Typed structured output over real HTTP: each provider's native format in the request
(the same payload from the SDK and the wire route), a repair, and fallback between
Anthropic and Chat Completions with a valid history."""

from __future__ import annotations

import enum
from typing import Any, Literal

import anthropic
import pydantic
import pytest

from innerloop import HarnessParams, HarnessState, Thinking
from innerloop._events import Event, Fallback, Transition
from innerloop._messages import Message
from innerloop.fsm import output_spec, request_settings
from innerloop.fsm._output import anthropic_schema
from innerloop.lowlevel import build_request
from innerloop.providers import (
    AnthropicProvider,
    AsyncioTransport,
    OpenAIProvider,
    OpenAIResponsesProvider,
)
from innerloop.testing import (
    AnthropicServer,
    OpenAIServer,
    RateLimit,
    ResponsesServer,
    assert_valid_history,
    reply,
)
from innerloop.testing._servers import LoopbackServer, Step

ANTHROPIC_KEY = "sk-ant-api03-structured-0123456789abcdef"
OPENAI_KEY = "sk-proj-structured-0123456789abcdef"
CLAUDE = "anthropic:claude-sonnet-4-5-20250929"
GPT = "openai:gpt-4o-2024-08-06"
GPT5 = "responses:gpt-5-2025-08-07"


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


STRICT = {
    "title": "Weather",
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
    "additionalProperties": False,
}
GOOD = '{"city": "Lisbon", "celsius": 21.5}'
BAD = '{"city": "Lisbon"}'


def _params(model: str, **kw: Any) -> HarnessParams:
    kw.setdefault("output_type", Weather)
    return HarnessParams(model=model, system="Answer in JSON.", **kw)


class TestPayload:
    def _payload(self, params: HarnessParams, dialect: str) -> dict[str, Any]:
        request = build_request(
            request_settings(params), [Message.user("hi")], dialect, params.model.model
        )
        return request.payload

    def test_anthropic_output_config_format(self) -> None:
        """Anthropic: output_config.format, beside the effort level when one is set."""
        plain = self._payload(_params(CLAUDE), "anthropic")
        assert plain["output_config"] == {"format": {"type": "json_schema", "schema": STRICT}}
        params = _params(
            "anthropic:claude-opus-4-5-20251101", thinking=Thinking(2048, effort="low")
        )
        assert self._payload(params, "anthropic")["output_config"] == {
            "effort": "low",
            "format": {"type": "json_schema", "schema": STRICT},
        }

    def test_chat_completions_response_format(self) -> None:
        """Chat Completions: a strict, named json_schema response_format."""
        assert self._payload(_params(GPT), "openai")["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "Weather", "schema": STRICT, "strict": True},
        }

    def test_responses_text_format(self) -> None:
        """Responses: a strict, named json_schema text.format."""
        assert self._payload(_params(GPT5), "responses")["text"] == {
            "format": {"type": "json_schema", "name": "Weather", "schema": STRICT, "strict": True}
        }

    def test_anthropic_and_openai_forms_differ_where_the_apis_do(self) -> None:
        """An optional field and a bound: OpenAI gets the strict form (all required, the
        optional one nullable, the bound kept); Anthropic gets the schema as the anthropic
        SDK's transform_schema makes it (the optional field stays optional, the bound it
        does not take moves into the description)."""

        class Reading(pydantic.BaseModel):
            celsius: float = pydantic.Field(ge=-90)
            note: str | None = None

        params = _params(CLAUDE, output_type=Reading)
        anthropic_schema = self._payload(params, "anthropic")["output_config"]["format"]
        assert anthropic_schema["schema"] == {
            "type": "object",
            "title": "Reading",
            "properties": {
                "celsius": {"type": "number", "description": "{minimum: -90}"},
                "note": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "description": "{default: None}",
                },
            },
            "additionalProperties": False,
            "required": ["celsius"],
        }
        openai_schema = self._payload(params, "openai")["response_format"]["json_schema"]
        assert openai_schema["schema"]["required"] == ["celsius", "note"]
        assert openai_schema["schema"]["properties"]["celsius"] == {
            "type": "number",
            "minimum": -90,
        }

    def test_schema_without_strict_form_is_sent_loose(self) -> None:
        """A schema strict mode cannot express (a free-form object) goes as is, strict off."""
        schema = {
            "type": "object",
            "properties": {"tags": {"type": "object"}},
            "required": ["tags"],
        }
        params = HarnessParams(model=GPT, output_type=schema)
        assert self._payload(params, "openai")["response_format"]["json_schema"] == {
            "name": "output",
            "schema": schema,
            "strict": False,
        }

    def test_no_output_type_no_format(self) -> None:
        """Without output_type no dialect asks for a format."""
        for dialect, field in (
            ("anthropic", "output_config"),
            ("openai", "response_format"),
            ("responses", "text"),
        ):
            assert field not in self._payload(HarnessParams(model=GPT), dialect)


class Sky(enum.Enum):
    CLEAR = "clear"
    CLOUDY = "cloudy"


class Day(pydantic.BaseModel):
    date: str = pydantic.Field(json_schema_extra={"format": "date"})
    sky: Sky
    rain_mm: float = pydantic.Field(ge=0, le=500)


class Forecast(pydantic.BaseModel):
    """A forecast."""

    city: str = pydantic.Field(min_length=1, description="The city")
    days: list[Day] = pydantic.Field(min_length=1, max_length=7)
    kind: Literal["daily"] = "daily"
    tags: list[str] = pydantic.Field(default_factory=list, min_length=2)


ONE_OF = {
    "type": "object",
    "properties": {
        "value": {"oneOf": [{"type": "integer", "multipleOf": 5}, {"type": "string"}]},
        "when": {"type": "string", "format": "date-time"},
        "code": {"type": "string", "format": "regex"},
    },
    "required": ["value"],
}


@pytest.mark.parametrize("output_type", [Weather, Forecast, Day, ONE_OF], ids=repr)
def test_anthropic_form_agrees_with_the_sdk(output_type: Any) -> None:
    """The schema Anthropic is sent is what the anthropic SDK's transform_schema makes of
    the same schema (closed objects, bounds and lengths moved into descriptions, oneOf as
    anyOf, the formats it takes kept)."""
    schema = dict(output_spec(output_type).schema)
    assert anthropic_schema(schema) == anthropic.transform_schema(schema)


def _provider(dialect: str, server: LoopbackServer, route: str) -> Any:
    transport = AsyncioTransport() if route == "wire" else None
    if dialect == "anthropic":
        return AnthropicProvider(ANTHROPIC_KEY, base_url=server.base_url, transport=transport)
    if dialect == "openai":
        return OpenAIProvider(OPENAI_KEY, base_url=server.base_url, transport=transport)
    return OpenAIResponsesProvider(
        OPENAI_KEY, base_url=server.base_url, transport=transport, name="responses"
    )


SERVERS: dict[str, tuple[type[LoopbackServer], str]] = {
    "anthropic": (AnthropicServer, CLAUDE),
    "openai": (OpenAIServer, GPT),
    "responses": (ResponsesServer, GPT5),
}


def _run(harness: Any) -> tuple[HarnessState, list[Event]]:
    events: list[Event] = []
    state = harness.run_sync("Weather in Lisbon?", on_event=events.append)
    return state, events


@pytest.mark.parametrize("dialect", list(SERVERS))
def test_repair_over_http_on_both_routes(dialect: str, make_harness: Any) -> None:
    """Through the SDK and the wire route alike: the server sees the format on every
    request (it refuses one without), the invalid answer is repaired once, the output is
    typed, and both routes send the same bodies."""
    server_type, model = SERVERS[dialect]
    bodies: dict[str, list[Any]] = {}
    for route in ("sdk", "wire"):
        script: list[Step] = [reply(BAD), reply(GOOD)]
        with server_type(script, output_schema=STRICT) as server:
            harness = make_harness(_params(model), [_provider(dialect, server, route)])
            state, events = _run(harness)
            bodies[route] = [r.body for r in server.requests]
        assert state.exit_reason == "model_complete", state.diagnostic
        assert state.output == Weather(city="Lisbon", celsius=21.5)
        assert state.output_repairs == 1
        assert ("check", "repair") in [
            (e.source, e.target) for e in events if isinstance(e, Transition)
        ]
        assert_valid_history(state.history)
    assert len(bodies["sdk"]) == 2
    assert bodies["sdk"] == bodies["wire"]


@pytest.mark.parametrize("dialect", list(SERVERS))
def test_server_refuses_a_request_without_the_format(dialect: str, make_harness: Any) -> None:
    """A loopback server expecting a format answers 400 to a request without it."""
    server_type, model = SERVERS[dialect]
    with server_type([reply(GOOD)], output_schema=STRICT) as server:
        harness = make_harness(HarnessParams(model=model), [_provider(dialect, server, "sdk")])
        state, _ = _run(harness)
    assert state.exit_reason == "failed"
    assert state.error is not None
    assert f"expected the output schema {STRICT} in {server_type.format_field}, got None" in (
        state.error.message
    )


def test_fallback_anthropic_to_chat_keeps_a_valid_history(make_harness: Any) -> None:
    """Anthropic answers badly, takes the repair, then is rate limited to exhaustion; Chat
    Completions gets the same history (the repair as a user message) and answers well."""
    anthropic_script: list[Step] = [reply(BAD), *[RateLimit(None)] * 6]
    params = _params(CLAUDE, fallbacks=(GPT,))
    with (
        AnthropicServer(anthropic_script, output_schema=STRICT) as a,
        OpenAIServer([reply(GOOD)], output_schema=STRICT) as o,
    ):
        providers = [_provider("anthropic", a, "sdk"), _provider("openai", o, "sdk")]
        state, events = _run(make_harness(params, providers))
        to_chat = o.requests[0].body["messages"]
    assert state.exit_reason == "model_complete", state.diagnostic
    assert state.output == Weather(city="Lisbon", celsius=21.5)
    assert [(e.from_provider, e.to_provider) for e in events if isinstance(e, Fallback)] == [
        ("anthropic", "openai")
    ]
    assert [m["role"] for m in to_chat] == ["system", "user", "assistant", "user"]
    assert to_chat[2]["content"] == BAD
    assert to_chat[3]["content"].startswith(
        "Your answer does not match the required output format (Weather):\n"
        "- missing required field 'celsius'"
    )
    assert_valid_history(state.history)
