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
    tool_call,
)
from innerloop.testing._servers import LoopbackServer, Step
from innerloop.tools import tool

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


# -- the final-result tool ------------------------------------------------------------------

OLD_CLAUDE = "anthropic:claude-3-5-haiku-20241022"
SCHEMA = dict(output_spec(Weather).schema)
"""What the final-result tool takes as input schema where no strict form is sent."""
TOOL_SCHEMAS = {"anthropic": SCHEMA, "openai": STRICT, "responses": STRICT}
TOOL_MODELS = {"anthropic": OLD_CLAUDE, "openai": GPT, "responses": GPT5}
GOOD_INPUT = {"city": "Lisbon", "celsius": 21.5}
BAD_INPUT = {"city": "Lisbon"}
SYSTEM_LINE = (
    "When you have the final answer, give it by calling the final_result tool (alone, not "
    "together with other tools), not as text."
)


def _final(data: dict[str, Any], id: str) -> Step:
    return reply(tool_call("final_result", data, id=id))


class TestToolPayload:
    def _payload(self, params: HarnessParams, dialect: str, model: str) -> dict[str, Any]:
        request = build_request(request_settings(params), [Message.user("hi")], dialect, model)
        return request.payload

    def test_anthropic_tool_for_an_older_claude(self) -> None:
        """auto: the older Claude gets the tool (the schema as its input schema, tool choice
        not forced) and the system line, no output_config; a newer Claude the format."""
        params = _params(OLD_CLAUDE, fallbacks=(CLAUDE,))
        payload = self._payload(params, "anthropic", OLD_CLAUDE.partition(":")[2])
        assert payload["tools"] == [
            {
                "name": "final_result",
                "description": (
                    "Give the final answer of the task. Call this tool once, when you are "
                    "done, with the answer as its input; it ends the conversation. Do not "
                    "answer in plain text."
                ),
                "input_schema": SCHEMA,
            }
        ]
        assert payload["tool_choice"] == {"type": "auto"}
        assert payload["system"][0]["text"] == f"Answer in JSON.\n\n{SYSTEM_LINE}"
        assert "output_config" not in payload
        native = self._payload(params, "anthropic", CLAUDE.partition(":")[2])
        assert "tools" not in native
        assert native["output_config"]["format"]["schema"] == STRICT

    def test_openai_tools_are_strict_and_follow_the_run_tools(self) -> None:
        """output_mode='tool' on OpenAI: the tool after the run's own, in strict form, no
        native format, on both APIs."""

        @tool
        async def look(city: str) -> str:
            """Look outside."""
            return city

        params = _params(GPT, tools=[look], output_mode="tool")
        chat = self._payload(params, "openai", "gpt-4o-2024-08-06")
        assert [t["function"]["name"] for t in chat["tools"]] == ["look", "final_result"]
        assert chat["tools"][1]["function"]["parameters"] == STRICT
        assert chat["tools"][1]["function"]["strict"] is True
        assert chat["tool_choice"] == "auto"
        assert chat["messages"][0] == {
            "role": "system",
            "content": f"Answer in JSON.\n\n{SYSTEM_LINE}",
        }
        assert "response_format" not in chat
        responses = self._payload(params, "responses", "gpt-5-2025-08-07")
        assert responses["tools"][1] == {
            "type": "function",
            "name": "final_result",
            "description": chat["tools"][1]["function"]["description"],
            "parameters": STRICT,
            "strict": True,
        }
        assert "text" not in responses


@pytest.mark.parametrize("dialect", list(SERVERS))
def test_tool_mode_repair_over_http_on_both_routes(dialect: str, make_harness: Any) -> None:
    """Through the SDK and the wire route alike: the server sees the final-result tool on
    every request (it refuses one without), the invalid call gets an error result, the next
    call passes, and both routes send the same bodies."""
    server_type, _ = SERVERS[dialect]
    model = f"{dialect}:{TOOL_MODELS[dialect].partition(':')[2]}"
    bodies: dict[str, list[Any]] = {}
    for route in ("sdk", "wire"):
        script = [_final(BAD_INPUT, "call_1"), _final(GOOD_INPUT, "call_2")]
        expected = TOOL_SCHEMAS[dialect]
        with server_type(script, output_schema=expected, output_tool=True) as server:
            params = _params(model, output_mode="tool")
            harness = make_harness(params, [_provider(dialect, server, route)])
            state, _ = _run(harness)
            bodies[route] = [r.body for r in server.requests]
        assert state.exit_reason == "model_complete", state.diagnostic
        assert state.output == Weather(city="Lisbon", celsius=21.5)
        assert state.output_repairs == 1
        assert state.history[2].tool_results[0].is_error
        assert state.history[-1].tool_results[0].content == "accepted"
        assert_valid_history(state.history)
    assert len(bodies["sdk"]) == 2
    assert bodies["sdk"] == bodies["wire"]


@pytest.mark.parametrize("dialect", list(SERVERS))
def test_server_in_tool_mode_refuses_the_native_format(dialect: str, make_harness: Any) -> None:
    """A loopback server expecting the final-result tool answers 400 to a request that
    asks for the native format instead, or has no final_result tool."""
    server_type, model = SERVERS[dialect]
    with server_type([reply(GOOD)], output_schema=STRICT, output_tool=True) as server:
        harness = make_harness(_params(model), [_provider(dialect, server, "sdk")])
        state, _ = _run(harness)
    assert state.exit_reason == "failed"
    assert state.error is not None
    assert f"expected the final_result tool, not {server_type.format_field}" in (
        state.error.message
    )
    with server_type([reply(GOOD)], output_schema=STRICT, output_tool=True) as server:
        harness = make_harness(HarnessParams(model=model), [_provider(dialect, server, "sdk")])
        state, _ = _run(harness)
    assert state.error is not None
    assert (
        f"expected the output schema {STRICT} as the input schema of the final_result tool, "
        "got None"
    ) in state.error.message


def test_fallback_old_claude_tool_to_chat_native_keeps_a_valid_history(
    make_harness: Any,
) -> None:
    """An older Claude (tool mode) calls final_result with a bad input and gets the error
    result, then is rate limited to exhaustion; Chat Completions (native format) is sent
    the same history (the call and its error result; the tool still declared, without the
    system line) and answers in JSON text."""
    anthropic_script: list[Step] = [_final(BAD_INPUT, "toolu_1"), *[RateLimit(None)] * 6]
    params = _params(OLD_CLAUDE, fallbacks=(GPT,))
    with (
        AnthropicServer(anthropic_script, output_schema=SCHEMA, output_tool=True) as a,
        OpenAIServer([reply(GOOD)], output_schema=STRICT) as o,
    ):
        providers = [_provider("anthropic", a, "sdk"), _provider("openai", o, "sdk")]
        state, events = _run(make_harness(params, providers))
        to_chat = o.requests[0].body
    assert state.exit_reason == "model_complete", state.diagnostic
    assert state.output == Weather(city="Lisbon", celsius=21.5)
    assert [(e.from_provider, e.to_provider) for e in events if isinstance(e, Fallback)] == [
        ("anthropic", "openai")
    ]
    assert [t["function"]["name"] for t in to_chat["tools"]] == ["final_result"]
    assert to_chat["response_format"]["json_schema"]["schema"] == STRICT
    messages = to_chat["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[0]["content"] == "Answer in JSON."
    assert messages[2]["tool_calls"][0]["function"] == {
        "name": "final_result",
        "arguments": '{"city":"Lisbon"}',
    }
    assert messages[3]["content"].startswith(
        "[tool error] Not accepted: the input does not match the required output format "
        "(Weather):\n- missing required field 'celsius'"
    )
    assert_valid_history(state.history)


def test_fallback_old_claude_to_new_claude_declares_the_called_tool(make_harness: Any) -> None:
    """Older Claude (tool mode) to a newer one (native format): the history calls
    final_result, so the newer Claude's request declares the tool beside output_config
    (Anthropic refuses a history that calls an undeclared tool); its own final_result
    call is the answer."""
    old: list[Step] = [_final(BAD_INPUT, "toolu_1"), *[RateLimit(None)] * 6]
    params = _params(OLD_CLAUDE, fallbacks=(CLAUDE.replace("anthropic:", "anthropic-new:"),))
    with (
        AnthropicServer(old, output_schema=SCHEMA, output_tool=True) as a,
        AnthropicServer([_final(GOOD_INPUT, "toolu_2")], output_schema=STRICT) as b,
    ):
        providers = [
            _provider("anthropic", a, "sdk"),
            AnthropicProvider(ANTHROPIC_KEY, base_url=b.base_url, name="anthropic-new"),
        ]
        state, _ = _run(make_harness(params, providers))
        to_new = b.requests[0].body
    assert state.exit_reason == "model_complete", state.diagnostic
    assert state.output == Weather(city="Lisbon", celsius=21.5)
    assert [t["name"] for t in to_new["tools"]] == ["final_result"]
    assert to_new["system"][0]["text"] == "Answer in JSON."
    assert [m["role"] for m in to_new["messages"]] == ["user", "assistant", "user"]
    assert [r.content for m in state.history for r in m.tool_results] == [
        to_new["messages"][2]["content"][0]["content"],
        "accepted",
    ]
    assert_valid_history(state.history)
