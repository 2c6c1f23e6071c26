"""Context recovery through the real SDK clients over loopback HTTP."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from innerloop import HarnessParams, Message, ToolSpec
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.recovery import RecoveryPolicy
from innerloop.testing import (
    AnthropicServer,
    Fault,
    OpenAIServer,
    Reply,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput


async def _read(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("line\n" * 400)


TOOLS = (ToolSpec("read", "Read a long file.", {"type": "object"}, _read),)
SERVERS = {
    "anthropic": (AnthropicServer, AnthropicProvider),
    "openai": (OpenAIServer, OpenAIProvider),
}


@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
def test_overflow_then_max_tokens_over_http(dialect: str, make_harness: Any) -> None:
    """Prompt too long: alert and emergency compaction; then max_tokens: compaction and the
    continuation message; the replayed turns finish the run with a valid history."""
    server_cls, provider_cls = SERVERS[dialect]
    script: list[Reply | Fault] = [
        reply("reading", tool_call("read", id="r1")),
        reply("again", tool_call("read", id="r2")),
        reply("once more", tool_call("read", id="r3")),
        Fault.context_overflow(),
        reply("The summary is", stop_reason="max_tokens", incomplete_tool=("read", '{"pa')),
        reply("... that the file has 400 lines."),
    ]
    params = HarnessParams(
        model=f"{dialect}:model-20250101",
        tools=TOOLS,
        context_budget=50_000,
        max_output_tokens=1000,
        recovery=RecoveryPolicy(keep_recent_messages=2),
    )
    with server_cls(script) as server:
        provider = provider_cls(api_key="sk-test-key-000000000000", base_url=server.base_url)
        events: list[Any] = []
        state = make_harness(params, {dialect: provider}).run_sync(
            "Summarise the file", on_event=events.append
        )
        bodies = [r.body for r in server.requests]
    assert state.exit_reason == "model_complete"
    alerts = [e for e in events if e.type == "alert"]
    assert [a.kind for a in alerts] == ["context_overflow"]
    compacted = [e for e in events if e.type == "compacted"]
    assert [c.reason for c in compacted] == ["overflow", "max_tokens"]
    assert compacted[0].tokens_after < compacted[0].tokens_before
    assert_valid_history(state.history)
    assert state.history[-2] == Message.user(
        "Your previous response was truncated. Continue from where you left off."
    )
    # the overflowed turn was replayed smaller, and the last request carries the continuation
    assert len(str(bodies[4])) < len(str(bodies[3]))
    assert "Continue from where you left off." in str(bodies[-1]["messages"][-1])
