"""The typed answer streamed (``OutputDelta``) over real HTTP: the real SDK clients (and the
wire route) against the loopback servers, in native structured output and through the
final-result tool, on Anthropic, Chat Completions and the Responses API."""

from __future__ import annotations

import json
from typing import Any, Literal

import pydantic
import pytest

from innerloop import HarnessParams
from innerloop._events import (
    Event,
    MessageComplete,
    OutputDelta,
    TextDelta,
    ToolInputDelta,
    ToolUseComplete,
)
from innerloop.fsm import output_spec
from innerloop.providers import (
    AnthropicProvider,
    AsyncioTransport,
    OpenAIProvider,
    OpenAIResponsesProvider,
)
from innerloop.testing import AnthropicServer, OpenAIServer, ResponsesServer, reply, tool_call
from innerloop.testing._servers import LoopbackServer

KEY = "sk-proj-outputstream-0123456789abcdef"


class Report(pydantic.BaseModel):
    city: str
    celsius: float
    summary: str


ANSWER: dict[str, Any] = {
    "city": "Lisbon",
    "celsius": 21.5,
    "summary": "Sunny all day, a light breeze from the sea in the afternoon.",
}
TEXT = json.dumps(ANSWER)
SPEC = output_spec(Report)
# what each server expects the request to carry
NATIVE = {"anthropic": dict(SPEC.anthropic_schema), "openai": dict(SPEC.strict_schema or {})}
TOOL = {"anthropic": dict(SPEC.schema), "openai": NATIVE["openai"]}
ROUTES: dict[str, tuple[type[LoopbackServer], str, str]] = {
    # dialect: server, a model asked natively, a model asked through the tool (auto)
    "anthropic": (AnthropicServer, "claude-sonnet-4-5-20250929", "claude-3-5-haiku-20241022"),
    "openai": (OpenAIServer, "gpt-4o-2024-08-06", "gpt-4o-2024-08-06"),
    "responses": (ResponsesServer, "gpt-5-2025-08-07", "gpt-5-2025-08-07"),
}
STEPS = [
    # each parse point of the 113-byte answer streamed in 4-byte pieces (FIRST_STEP 16)
    {"city": "Lisbon"},
    {"city": "Lisbon", "celsius": 21.5},
    {"city": "Lisbon", "celsius": 21.5, "summary": "Sunn"},
    {"city": "Lisbon", "celsius": 21.5, "summary": "Sunny all day, a lig"},
    {"city": "Lisbon", "celsius": 21.5, "summary": "Sunny all day, a light breeze from t"},
    {**ANSWER, "summary": "Sunny all day, a light breeze from the sea in the af"},
    ANSWER,
]


def _provider(dialect: str, server: LoopbackServer, route: str) -> Any:
    transport = AsyncioTransport() if route == "wire" else None
    kind = {"anthropic": AnthropicProvider, "openai": OpenAIProvider}.get(
        dialect, OpenAIResponsesProvider
    )
    return kind(KEY, base_url=server.base_url, transport=transport, name=dialect)


def _run(
    dialect: str, mode: Literal["native", "tool"], route: str, make_harness: Any
) -> tuple[Any, list[Event], LoopbackServer]:
    server_type, native_model, tool_model = ROUTES[dialect]
    schemas = NATIVE if mode == "native" else TOOL
    schema = schemas.get(dialect, schemas["openai"])
    step = reply(TEXT) if mode == "native" else reply(tool_call("final_result", ANSWER, id="f1"))
    model = native_model if mode == "native" else tool_model
    with server_type(
        [step], output_schema=schema, output_tool=mode == "tool", chunk_size=4
    ) as server:
        params = HarnessParams(
            model=f"{dialect}:{model}",
            output_type=Report,
            output_mode="auto" if dialect == "anthropic" else mode,
        )
        events: list[Event] = []
        harness = make_harness(params, [_provider(dialect, server, route)])
        state = harness.run_sync("Weather in Lisbon?", on_event=events.append)
    return state, events, server


@pytest.mark.parametrize("route", ["sdk", "wire"])
@pytest.mark.parametrize("mode", ["native", "tool"])
@pytest.mark.parametrize("dialect", list(ROUTES))
def test_the_answer_streams_as_parsed(
    dialect: str, mode: Literal["native", "tool"], route: str, make_harness: Any
) -> None:
    """The answer's data at each parse point, each right after the delta that changed it
    (the last one before the message completes), ending with the whole answer; the final
    value is validated as before."""
    state, events, server = _run(dialect, mode, route, make_harness)
    assert state.exit_reason == "model_complete", state.diagnostic
    assert state.output == Report(**ANSWER)
    deltas = [e for e in events if isinstance(e, OutputDelta)]
    assert [d.data for d in deltas] == STEPS
    call_id = None if mode == "native" else "f1"
    assert {d.tool_use_id for d in deltas} == {call_id}
    streamed = TextDelta if mode == "native" else ToolInputDelta
    for at, event in enumerate(events):
        if isinstance(event, OutputDelta):
            assert isinstance(events[at - 1], streamed | ToolUseComplete) or isinstance(
                events[at + 1], MessageComplete
            ), events[at - 1 : at + 2]
    first_piece = next(e for e in events if isinstance(e, streamed))
    assert deltas[0].index == first_piece.index
    assert len(server.requests) == 1


@pytest.mark.parametrize("dialect", list(ROUTES))
def test_a_run_without_output_type_has_no_deltas(dialect: str, make_harness: Any) -> None:
    """The same JSON text, with no output_type asked for: no OutputDelta."""
    server_type, model, _ = ROUTES[dialect]
    with server_type([reply(TEXT)], chunk_size=4) as server:
        harness = make_harness(
            HarnessParams(model=f"{dialect}:{model}"), [_provider(dialect, server, "sdk")]
        )
        events: list[Event] = []
        state = harness.run_sync("Weather?", on_event=events.append)
    assert state.exit_reason == "model_complete"
    assert [e for e in events if isinstance(e, OutputDelta)] == []
