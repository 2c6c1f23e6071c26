"""The providers' wire handling against a real OpenAI-compatible server (llama.cpp's,
serving SmolLM2-135M with its default settings): what innerloop sends and how it reads
each answer. The model is small and unreliable, so each test asserts what innerloop does
with the outcome, never that the model behaves."""

from __future__ import annotations

from typing import Any

from innerloop import Harness, HarnessParams, HarnessState
from innerloop.events import Alert, Event, ModelError, ModelResponseEvent, Transition
from innerloop.local import LocalModelServer
from innerloop.providers import OpenAIProvider
from innerloop.testing import assert_valid_history
from innerloop.tools import tool

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "sky": {"type": "string"}},
    "required": ["city", "sky"],
}


@tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, 21C"


def _run(
    server: LocalModelServer, prompt: str, provider: OpenAIProvider | None = None, **kw: Any
) -> tuple[HarnessState, list[Event]]:
    kw.setdefault("max_turns", 2)
    params = HarnessParams(model=f"openai:{server.model}", **kw)
    provider = provider or OpenAIProvider(base_url=server.base_url)
    events: list[Event] = []
    state = Harness(params, [provider]).run_sync(prompt, on_event=events.append)
    return state, events


def _errors(events: list[Event]) -> list[str]:
    return [str(e.error) for e in events if isinstance(e, ModelError)]


def _alerts(events: list[Event], kind: str) -> list[Alert]:
    return [e for e in events if isinstance(e, Alert) and e.kind == kind]


def test_the_output_cap_is_read(llama_server: LocalModelServer) -> None:
    """max_output_tokens=5 reaches the server (as max_tokens): the answer is cut short,
    its stop reason max_tokens, and the continuation starts (stream -> compact)."""
    state, events = _run(
        llama_server, "Write a long story about a dragon.", max_output_tokens=5, max_turns=2
    )
    first = next(e.response for e in events if isinstance(e, ModelResponseEvent))
    assert first.stop_reason == "max_tokens"
    assert len(first.message.text) < 80
    truncated = [e for e in events if isinstance(e, Transition) and e.guard == "truncated"]
    assert truncated[0].source == "stream"
    assert truncated[0].target == "compact"
    assert any("truncated" in m.text for m in state.history[1:] if m.role == "user")
    assert _errors(events) == []


def test_a_tool_round_trip_is_accepted(llama_server: LocalModelServer) -> None:
    """A forced call, its result, and the next request carrying both: the server takes
    the assistant turn of calls (no content null: no 500), whatever the model wrote."""
    state, events = _run(
        llama_server, "Weather in Oslo?", tools=[weather], tool_choice="tool:weather"
    )
    assert _errors(events) == []
    assert state.turns == 2  # the second request, with the round trip, was answered
    assert state.history[1].tool_uses
    assert_valid_history(state.history)


def test_auto_tool_choice_is_asked_again_unstreamed(llama_server: LocalModelServer) -> None:
    """This server answers a streamed request with tools and tool_choice='auto' with an
    empty body: innerloop asks again without streaming, says so in an alert once, and
    the next turn goes unstreamed at once (no second alert, no empty-response error)."""
    provider = OpenAIProvider(base_url=llama_server.base_url)
    state, events = _run(llama_server, "Weather in Oslo?", provider, tools=[weather])
    [alert] = _alerts(events, "stream_unsupported")
    assert "with tools" in alert.message
    assert not any("empty response" in e for e in _errors(events))
    assert state.turns >= 1
    assert_valid_history(state.history)
    _, again = _run(llama_server, "Weather in Rome?", provider, tools=[weather], max_turns=1)
    assert _alerts(again, "stream_unsupported") == []


def test_over_context_is_a_context_overflow(llama_server: LocalModelServer) -> None:
    """A prompt past the server's context: the streamed request's empty body is asked
    again unstreamed, whose 400 is the context overflow the machine recovers from (not
    'empty response: no chunks')."""
    prompt = "Summarize: " + "the quick brown fox jumps over the lazy dog. " * 400
    _, events = _run(llama_server, prompt, max_turns=1)
    failures = [e.error for e in events if isinstance(e, ModelError)]
    overflow = [e for e in failures if e.category == "context_overflow"]
    assert overflow, _errors(events)
    assert overflow[0].status == 400
    assert "asked again without streaming" in overflow[0].message
    assert not any("empty response" in e for e in _errors(events))


def test_typed_output_falls_back_to_json_object(llama_server: LocalModelServer) -> None:
    """Native typed output: the server refuses json_schema (a 500), innerloop asks again
    as json_object with the schema in the prompt and says so; the answer is then
    validated as any (a typed value, or a repair), never a provider failure."""
    state, events = _run(
        llama_server,
        "Weather in Oslo as JSON.",
        output_type=WEATHER_SCHEMA,
        max_output_tokens=60,
        max_output_repairs=1,
        max_turns=3,
    )
    [alert] = _alerts(events, "output_format_fallback")
    assert "json_object" in alert.message
    assert _errors(events) == []
    assert state.exit_reason != "failed" or state.output is None
    if state.exit_reason == "model_complete":
        assert set(state.output) >= {"city", "sky"}  # type: ignore[arg-type]


def test_a_forced_final_result_is_the_answer(llama_server: LocalModelServer) -> None:
    """Tool mode with tool_choice='tool:final_result' is accepted; the forced call is the
    answer (valid: the typed value; invalid: its result says why), never a ParamsError or
    a provider failure."""
    state, events = _run(
        llama_server,
        "Weather in Oslo.",
        output_type=WEATHER_SCHEMA,
        output_mode="tool",
        tool_choice="tool:final_result",
        max_output_tokens=60,
        max_output_repairs=1,
        max_turns=3,
    )
    assert _errors(events) == []
    assert state.history[1].tool_uses[0].name == "final_result"
    assert_valid_history(state.history)
