"""Exact request counts through Anthropic's count-tokens endpoint, against a loopback
server, with the real anthropic SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic

from innerloop import HarnessParams
from innerloop._events import Compacted, Event, Transition
from innerloop._messages import Message
from innerloop.fsm import HarnessState, request_settings
from innerloop.lowlevel import build_request
from innerloop.providers import WireRequest
from innerloop.recovery import AnthropicTokenCounter, RecoveryPolicy, RequestTokenCounter
from innerloop.testing import ScriptedProvider, reply
from tests.recovery._count_server import COUNT_PATH, count_server

PARAMS = HarnessParams(model="anthropic:claude-sonnet-4-5-20250929", system="be brief")


def client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=url, max_retries=0)


def request(dialect: str = "anthropic") -> WireRequest:
    return build_request(
        request_settings(PARAMS), [Message.user("hello")], dialect, PARAMS.model.model
    )


def count(counter: AnthropicTokenCounter, wire: WireRequest) -> int | None:
    async def go() -> int | None:
        try:
            return await counter.count_request(wire)
        finally:
            await counter.client.close()

    return asyncio.run(go())


class TestAnthropicTokenCounter:
    def test_counts_the_whole_request_exactly(self) -> None:
        """The endpoint gets model, system and messages (no stream or max_tokens) and its
        count is returned."""
        with count_server(1234) as server:
            counter = AnthropicTokenCounter(client(server.url))
            assert isinstance(counter, RequestTokenCounter)
            assert count(counter, request()) == 1234
        assert server.paths == [COUNT_PATH]
        assert server.bodies == [
            {
                "model": "claude-sonnet-4-5-20250929",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
                "system": [
                    {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}
                ],
            }
        ]

    def test_endpoint_failure_falls_back_to_the_local_count(self) -> None:
        """An error answer gives None (the local count stands) and is recorded."""
        error = {"type": "error", "error": {"type": "api_error", "message": "boom"}}
        with count_server((500, error)) as server:
            counter = AnthropicTokenCounter(client(server.url))
            assert count(counter, request()) is None
        assert len(counter.failures) == 1
        assert counter.failures[0].startswith("InternalServerError: ")

    def test_other_dialects_are_not_sent(self) -> None:
        """An OpenAI-format request is not counted by Anthropic's endpoint."""
        with count_server() as server:
            counter = AnthropicTokenCounter(client(server.url))
            assert count(counter, request("openai")) is None
        assert server.bodies == []
        assert counter.count_text("hello world") == 2


def test_exact_count_drives_the_context_budget(make_harness: Any) -> None:
    """When the endpoint says the request is over budget, the history is compacted even
    though the local count is under it, to a target scaled by how far the local count is
    off; the next exact count lets the call go."""
    history = [Message.user("task"), Message.assistant("old " * 300), Message.user("new")]
    history += [Message.assistant("ok"), Message.user("question")]
    params = HarnessParams(
        model="scripted:m",
        max_output_tokens=256,
        context_budget=1000,
        recovery=RecoveryPolicy(keep_recent_messages=2),
    )
    events: list[Event] = []
    with count_server(2000, 300) as server:
        counter = AnthropicTokenCounter(client(server.url))
        harness = make_harness(params, ScriptedProvider([reply("done")]), token_counter=counter)
        state = harness.run_sync(state=HarnessState(history=history), on_event=events.append)
    assert state.exit_reason == "model_complete"
    assert len(server.bodies) == 2
    assert state.context_tokens == 300
    hops = [(e.source, e.target) for e in events if isinstance(e, Transition)]
    assert hops[:4] == [
        ("idle", "assemble"),
        ("assemble", "compact"),
        ("compact", "assemble"),
        ("assemble", "normalize"),
    ]
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert [(e.reason, e.removed_messages) for e in compacted] == [("budget", 2)]
