"""The whole machine (Harness) driving the real SDK clients over loopback HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, HarnessState
from innerloop._errors import ParamsError
from innerloop._events import Backoff, Event, Fallback, Transition
from innerloop._messages import Message, TextBlock, ThinkingBlock, ToolResultBlock
from innerloop.providers import AnthropicProvider, AsyncioTransport, OpenAIProvider
from innerloop.testing import (
    AnthropicServer,
    Fault,
    OpenAIServer,
    RateLimit,
    SlowReply,
    StreamError,
    Trickle,
    Truncated,
    reply,
    thinking,
    tool_call,
)
from innerloop.testing._servers import Step
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

ANTHROPIC_KEY = "sk-ant-api03-integration-0123456789abcdef"
OPENAI_KEY = "sk-proj-integration-0123456789abcdef"
CLAUDE = "anthropic:claude-sonnet-4-5-20250929"
GPT = "openai:gpt-4o-2024-08-06"


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("echo:" + str(args.get("x", "")))


ECHO = ToolSpec(
    "echo", "Echo x back", {"type": "object", "properties": {"x": {"type": "string"}}}, _echo
)


def _params(**kw: Any) -> HarnessParams:
    kw.setdefault("model", CLAUDE)
    return HarnessParams(system="You are terse.", tools=(ECHO,), **kw)


def _long_history() -> list[Message]:
    history = []
    for i in range(6):
        history += [Message.user(f"question {i} " * 200), Message.assistant(f"answer {i} " * 200)]
    return history


def _providers(a: AnthropicServer, o: OpenAIServer | None = None) -> list[Any]:
    out: list[Any] = [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)]
    if o is not None:
        out.append(OpenAIProvider(OPENAI_KEY, base_url=o.base_url))
    return out


def test_six_429s_fall_back_to_openai_mid_tool_run(make_harness: Any, clock: Any) -> None:
    """The first call plus five retries get 429; the run falls back to OpenAI with the
    tool-using history converted, and completes."""
    anthropic_script: list[Step] = [
        reply("Let me echo.", tool_call("echo", {"x": "hi"}, id="toolu_01A")),
        RateLimit(3.0, "seconds"),
        RateLimit(2.5, "ms"),
        RateLimit(None),
        RateLimit(4.0, "seconds"),
        RateLimit(0.5, "ms"),
        RateLimit(7.0, "seconds"),
    ]
    with AnthropicServer(anthropic_script) as a, OpenAIServer([reply("It said echo:hi.")]) as o:
        harness = make_harness(_params(fallbacks=(GPT,)), _providers(a, o))
        events: list[Event] = []
        state = harness.run_sync("Echo hi, please.", on_event=events.append)
    assert state.exit_reason == "model_complete"
    assert state.degraded is True
    assert [type(e).__name__ for e in events if isinstance(e, Backoff | Fallback)] == [
        "Backoff"
    ] * 5 + ["Fallback"]
    assert clock.sleeps == [3.0, 2.5, 4.0, 4.0, 0.5]  # Retry-After wins; 4.0 is 1 s doubled twice
    assert a.played == 7
    assert len(a.requests) == 7
    assert [m.role for m in state.history] == ["user", "assistant", "user", "assistant"]
    assert state.history[-1].text == "It said echo:hi."
    assert state.resolved_models == ["claude-sonnet-4-5-20250929", "gpt-4o-2024-08-06"]
    sent = o.requests[0]
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert sent.body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Echo hi, please."},
        {
            "role": "assistant",
            "content": "Let me echo.",
            "tool_calls": [
                {
                    "id": "toolu_01A",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"x":"hi"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01A", "content": "echo:hi"},
    ]
    assert sent.body["stream_options"] == {"include_usage": True}


def test_retry_after_as_http_date_sets_the_backoff(make_harness: Any, clock: Any) -> None:
    """A Retry-After HTTP date becomes seconds from now (whole seconds on the wire)."""
    with AnthropicServer([RateLimit(30.0, "date"), reply("ok")]) as a:
        state = make_harness(_params(), _providers(a)).run_sync("hi")
    assert state.exit_reason == "model_complete"
    assert len(clock.sleeps) == 1
    assert 27.0 <= clock.sleeps[0] <= 30.0


def test_overloaded_529_and_midstream_error_back_off(make_harness: Any, clock: Any) -> None:
    """A 529 and an in-stream overloaded_error both take the backoff branch."""
    script: list[Step] = [
        Fault.overloaded(),
        StreamError("overloaded_error", "Overloaded"),
        reply("fine"),
    ]
    with AnthropicServer(script) as a:
        state = make_harness(_params(), _providers(a)).run_sync("hi")
    assert state.exit_reason == "model_complete"
    assert clock.sleeps == [1.0, 2.0]
    assert state.errors == {"overloaded": 2}


def test_server_error_is_retried_once(make_harness: Any) -> None:
    """A 500 is transient: one immediate retry, then the run goes on."""
    with AnthropicServer([Fault.server_error(500), reply("after the retry")]) as a:
        state = make_harness(_params(), _providers(a)).run_sync("hi")
    assert state.exit_reason == "model_complete"
    assert state.history[-1].text == "after the retry"


def test_two_dropped_streams_abort_without_leaking_the_key(make_harness: Any) -> None:
    """A truncated stream then malformed JSON: the second transient failure aborts with a
    diagnostic that holds no API key."""
    script: list[Step] = [Truncated(reply("a long answer " * 20), 4), Fault.malformed()]
    with AnthropicServer(script) as a:
        state = make_harness(_params(), _providers(a)).run_sync("hi")
    assert state.final_state == "failed"
    assert state.diagnostic["error"]["category"] == "transient"
    assert "malformed JSON" in state.diagnostic["error"]["message"]
    assert ANTHROPIC_KEY not in repr(state.diagnostic)


@pytest.mark.parametrize("kind", ["wrong_shape", "missing_index", "corrupt_gzip"])
@pytest.mark.parametrize("route", ["sdk", "wire"])
@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
def test_a_malformed_stream_is_retried_once(
    make_harness: Any, kind: str, route: str, dialect: str
) -> None:
    """A malformed response is a model error: one immediate retry, then the run goes on
    (before, these ended the run as fatal)."""
    server_cls, provider_cls, key, model = {
        "anthropic": (AnthropicServer, AnthropicProvider, ANTHROPIC_KEY, CLAUDE),
        "openai": (OpenAIServer, OpenAIProvider, OPENAI_KEY, GPT),
    }[dialect]
    with server_cls([Fault(kind), reply("after the retry")]) as server:
        transport = AsyncioTransport() if route == "wire" else None
        provider = provider_cls(key, base_url=server.base_url, transport=transport)
        state = make_harness(_params(model=model), [provider]).run_sync("hi")
    assert state.exit_reason == "model_complete"
    assert state.history[-1].text == "after the retry"
    assert len(server.requests) == 2


def test_prompt_too_long_alerts_and_compacts(make_harness: Any) -> None:
    """Anthropic's prompt-too-long is a context overflow: emergency compaction, continue."""
    earlier = HarnessState(history=_long_history())
    with AnthropicServer([Fault.context_overflow(), reply("shorter now")]) as a:
        events: list[Event] = []
        harness = make_harness(_params(), _providers(a))
        state = harness.run_sync("hi", on_event=events.append, state=earlier)
    assert state.exit_reason == "model_complete"
    assert [e.type for e in events if e.type in ("alert", "compacted")] == ["alert", "compacted"]


def test_openai_context_length_exceeded_is_overflow(make_harness: Any) -> None:
    """OpenAI's context_length_exceeded takes the same overflow branch."""
    earlier = HarnessState(history=_long_history())
    with OpenAIServer([Fault.context_overflow(), reply("ok")]) as o:
        provider = OpenAIProvider(OPENAI_KEY, base_url=o.base_url)
        state = make_harness(_params(model=GPT), [provider]).run_sync("hi", state=earlier)
    assert state.exit_reason == "model_complete"
    assert state.errors == {"context_overflow": 1}


def test_tool_cut_at_max_tokens_is_never_executed(make_harness: Any) -> None:
    """A tool call whose input was cut off at max_tokens is not run; the model is asked to
    continue."""
    cut = reply("Writing the file", stop_reason="max_tokens", incomplete_tool=("echo", '{"x": "ha'))
    with AnthropicServer([cut, reply("done")]) as a:
        state = make_harness(_params(), _providers(a)).run_sync("hi")
    assert state.exit_reason == "model_complete"
    assert not any(isinstance(b, ToolResultBlock) for m in state.history for b in m.content)
    continued = a.requests[1].body["messages"]
    assert continued[-1]["content"][-1]["text"].startswith("Your previous response was truncated")


def test_thinking_round_trips_with_its_signature(make_harness: Any) -> None:
    """Thinking blocks come back to Anthropic verbatim, signature included."""
    turn = reply(thinking("let me think", "sig-abc"), tool_call("echo", {"x": "1"}, id="toolu_T"))
    with AnthropicServer([turn, reply("ok")]) as a:
        state = make_harness(_params(), _providers(a)).run_sync("hi")
    assert state.history[1].content[0] == ThinkingBlock("let me think", "sig-abc")
    assistant = a.requests[1].body["messages"][1]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "let me think",
        "signature": "sig-abc",
    }
    assert a.requests[0].body["system"][0]["cache_control"] == {"type": "ephemeral"}


def test_parallel_tool_calls_over_openai(make_harness: Any) -> None:
    """Two OpenAI tool calls in one turn are both executed and answered by tool messages."""
    turn = reply(
        tool_call("echo", {"x": "a"}, id="call_1"), tool_call("echo", {"x": "b"}, id="call_2")
    )
    with OpenAIServer([turn, reply("both done")]) as o:
        provider = OpenAIProvider(OPENAI_KEY, base_url=o.base_url)
        state = make_harness(_params(model=GPT), [provider]).run_sync("hi")
    assert state.exit_reason == "model_complete"
    tools = [m for m in o.requests[1].body["messages"] if m["role"] == "tool"]
    assert tools == [
        {"role": "tool", "tool_call_id": "call_1", "content": "echo:a"},
        {"role": "tool", "tool_call_id": "call_2", "content": "echo:b"},
    ]


def test_slow_stream_paces_tokens() -> None:
    """A slow reply streams at the set rate: 8 text frames at 100 tokens/s take >= 70 ms."""

    async def go() -> float:
        async with AnthropicServer([SlowReply(reply("x" * 32), 100.0)], chunk_size=4) as a:
            provider = AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)
            start = time.perf_counter()
            response = await provider.complete(
                _request("anthropic", {"max_tokens": 10, "messages": []})
            )
            assert response.message.content == (TextBlock("x" * 32),)
            await provider.aclose()
            return time.perf_counter() - start

    assert asyncio.run(go()) >= 0.07


def _request(dialect: str, payload: dict[str, Any]) -> Any:
    from innerloop.providers import WireRequest

    return WireRequest(dialect, "m", {"model": "m", "stream": True, **payload})


def test_hanging_server_stops_cleanly() -> None:
    """A server holding a request open stops without waiting for it."""
    server = AnthropicServer([Fault.hang()]).start()

    async def go() -> None:
        provider = AnthropicProvider(ANTHROPIC_KEY, base_url=server.base_url)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                provider.complete(_request("anthropic", {"max_tokens": 1, "messages": []})), 0.2
            )
        await provider.aclose()

    asyncio.run(go())
    start = time.perf_counter()
    server.stop()
    assert time.perf_counter() - start < 2.0
    assert len(server.requests) == 1


def test_harness_is_importable_from_package() -> None:
    """Harness and the providers share the provider names of the model chain."""
    assert AnthropicProvider(ANTHROPIC_KEY).name == "anthropic"
    assert OpenAIProvider(OPENAI_KEY).name == "openai"
    assert Harness is not None


@pytest.mark.parametrize("route", ["sdk", "wire"])
@pytest.mark.parametrize("server_cls", [AnthropicServer, OpenAIServer])
def test_a_trickling_stream_hits_the_call_deadline_and_is_retried(
    make_harness: Any, route: str, server_cls: type[AnthropicServer] | type[OpenAIServer]
) -> None:
    """A server sending one byte every 50 ms keeps each read within its timeout; the call
    deadline (0.5 s here) ends the call as a transient timeout, retried once at once."""
    script: list[Step] = [Trickle(piece=1, interval=0.05), reply("recovered")]
    with server_cls(script) as server:
        transport = AsyncioTransport() if route == "wire" else None
        if server_cls is AnthropicServer:
            provider: Any = AnthropicProvider(
                ANTHROPIC_KEY, base_url=server.base_url, transport=transport
            )
            model = CLAUDE
        else:
            provider = OpenAIProvider(OPENAI_KEY, base_url=server.base_url, transport=transport)
            model = GPT
        events: list[Any] = []
        started = time.monotonic()
        state = make_harness(_params(model=model, call_deadline=0.5), [provider]).run_sync(
            "hi", on_event=events.append
        )
        took = time.monotonic() - started
    assert state.exit_reason == "model_complete"
    assert state.history[-1].text == "recovered"
    assert state.errors == {"transient": 1}
    assert 0.5 <= took < 5
    path = [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]
    assert ("stream", "call", "transient_retry") in path


def test_the_call_deadline_is_checked_at_construction() -> None:
    for bad in (0, -1.0, float("nan"), float("inf"), "600"):
        with pytest.raises(ParamsError, match="call_deadline"):
            _params(call_deadline=bad)
    assert _params(call_deadline=None).call_deadline is None
