"""The scripted providers emit the same stream events as a real provider."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable
from typing import Any

import pytest

from innerloop import HarnessParams, Message, ProviderError, ToolUseBlock
from innerloop._events import (
    MessageComplete,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop.fsm import request_settings
from innerloop.lowlevel import build_request
from innerloop.testing import (
    FakeClock,
    FakeProvider,
    Fault,
    ScriptedProvider,
    assert_valid_history,
    history_problems,
    reply,
    thinking,
    tool_call,
)

PARAMS = HarnessParams(model="scripted:m-20250101")


def request() -> Any:
    return build_request(request_settings(PARAMS), [Message.user("hi")], "anthropic", "m-20250101")


async def drain(provider: Any) -> list[Any]:
    stream = await provider.open(request())
    return [e async for e in stream]


def test_reply_streams_blocks_in_order() -> None:
    """Thinking, text and a tool call become deltas, then one MessageComplete."""
    p = ScriptedProvider(
        [reply(thinking("hmm", "sig1"), "hello world", tool_call("f", {"a": 1}, id="t1"))],
        chunk_size=5,
    )
    events = asyncio.run(drain(p))
    assert events[:4] == [
        ThinkingDelta(0, "hmm"),
        TextDelta(1, "hello"),
        TextDelta(1, " worl"),
        TextDelta(1, "d"),
    ]
    assert events[4] == ToolUseStart(2, "t1", "f")
    assert [e.partial_json for e in events if isinstance(e, ToolInputDelta)] == ['{"a":', " 1}"]
    assert events[-2] == ToolUseComplete(2, ToolUseBlock("t1", "f", {"a": 1}))
    done = events[-1]
    assert isinstance(done, MessageComplete)
    assert done.response.stop_reason == "tool_use"
    assert done.response.model == "m-20250101"


def test_incomplete_tool_is_reported_not_completed() -> None:
    """A tool input cut off at max_tokens is streamed but never completed."""
    p = ScriptedProvider([reply("x", stop_reason="max_tokens", incomplete_tool=("f", '{"a'))])
    events = asyncio.run(drain(p))
    assert not any(isinstance(e, ToolUseComplete) for e in events)
    response = events[-1].response
    assert response.stop_reason == "max_tokens"
    assert len(response.incomplete_tool_uses) == 1
    assert response.message == Message.assistant("x")


@pytest.mark.parametrize(
    ("fault", "category", "status"),
    [
        (Fault.rate_limited(3), "rate_limited", 429),
        (Fault.overloaded(), "overloaded", 529),
        (Fault.server_error(503), "transient", 503),
        (Fault.context_overflow(), "context_overflow", 400),
        (Fault.fatal(401), "fatal", 401),
    ],
)
def test_open_faults(fault: Fault, category: str, status: int) -> None:
    """Faults with a status fail at open with the matching category."""
    with pytest.raises(ProviderError) as info:
        asyncio.run(drain(ScriptedProvider([fault])))
    assert (info.value.category.value, info.value.status) == (category, status)


async def drain_into(stream: AsyncIterable[Any], into: list[Any]) -> None:
    """Append every event of ``stream`` to ``into``, keeping those before an error."""
    async for e in stream:
        into.append(e)  # noqa: PERF401  a comprehension would lose them when the stream fails


@pytest.mark.parametrize("fault", [Fault.malformed(), Fault.empty(), Fault.dropped(1)])
def test_stream_faults(fault: Fault) -> None:
    """Malformed, empty and dropped fail mid-stream as transient errors."""

    async def main() -> list[Any]:
        stream = await ScriptedProvider([fault]).open(request())
        seen: list[Any] = []
        with pytest.raises(ProviderError) as info:
            await drain_into(stream, seen)
        assert info.value.category.value == "transient"
        return seen

    seen = asyncio.run(main())
    assert not any(isinstance(e, MessageComplete) for e in seen)


def test_script_exhausted_is_a_clear_fatal_error() -> None:
    """Running past the script says how many steps were played."""
    p = ScriptedProvider([reply("one")])
    asyncio.run(drain(p))
    with pytest.raises(ProviderError, match=r"script exhausted: all 1 scripted steps"):
        asyncio.run(drain(p))


def test_fake_provider_takes_async_handler() -> None:
    """FakeProvider calls a sync or async handler with the wire request."""

    async def handler(req: Any) -> Any:
        return reply(f"echo {req.payload['messages'][0]['content'][0]['text']}")

    events = asyncio.run(drain(FakeProvider(handler)))
    assert events[-1].response.message == Message.assistant("echo hi")


def test_fake_clock_records_sleeps() -> None:
    """Sleeping on the fake clock advances it at once."""
    clock = FakeClock()
    asyncio.run(clock.sleep(64))
    assert clock.monotonic() == 64
    assert clock.sleeps == [64]


def test_history_problems() -> None:
    """The history checker names orphan results, unanswered calls and broken alternation."""
    bad = [
        Message.assistant("first"),
        Message("assistant", (ToolUseBlock("a", "f", {}),)),
        Message.user("no result"),
    ]
    assert history_problems(bad) == [
        "history does not start with a user message",
        "messages 0 and 1 are both 'assistant'",
        "tool_use 'a' in message 1 has no tool_result",
    ]
    with pytest.raises(AssertionError, match="invalid history"):
        assert_valid_history(bad)
