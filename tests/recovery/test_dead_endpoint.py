"""A dead endpoint falls back to the next model of the chain, and the error names where and
why: the real openai SDK against a port nothing listens on and a live loopback server."""

from __future__ import annotations

import socket
from typing import Any

from innerloop import HarnessParams
from innerloop._events import Event, Fallback, ModelError
from innerloop.providers import AsyncioTransport, OpenAIProvider
from innerloop.testing import OpenAIServer, Truncated, reply

KEY = "sk-proj-dead-endpoint-0123456789abcdef"


def dead_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def params() -> HarnessParams:
    return HarnessParams(model="primary:m-20250101", fallbacks=["backup:m-20250101"])


def run(make_harness: Any, primary: OpenAIProvider, backup: OpenAIProvider) -> Any:
    events: list[Event] = []
    state = make_harness(params(), [primary, backup]).run_sync("hi", on_event=events.append)
    return state, events


def test_a_refused_primary_falls_back_to_the_live_second(make_harness: Any) -> None:
    """Connection refused twice (the retry, then the fallback edge): the run goes on with
    the next model, and each error names the URL and the cause."""
    url = f"http://127.0.0.1:{dead_port()}/v1"
    with OpenAIServer([reply("from the backup")]) as live:
        primary = OpenAIProvider(KEY, base_url=url, name="primary")
        backup = OpenAIProvider(KEY, base_url=live.base_url, name="backup")
        state, events = run(make_harness, primary, backup)
    assert state.exit_reason == "model_complete"
    assert state.history[-1].text == "from the backup"
    errors = [e.error for e in events if isinstance(e, ModelError)]
    assert len(errors) == 2
    for error in errors:
        assert error.category == "transient"
        assert f"(connection to {url}/chat/completions refused)" in error.message
    assert [e for e in events if isinstance(e, Fallback)] == [
        Fallback("primary", "m-20250101", "backup", "m-20250101", "transient")
    ]
    hops = [(e.source, e.target, e.guard) for e in events if e.type == "transition"]
    assert ("call", "fallback", "transient_fallback") in hops


def test_a_refused_wire_route_names_its_url(make_harness: Any) -> None:
    """innerloop's own wire route (AsyncioTransport) names the URL it could not reach."""
    url = f"http://127.0.0.1:{dead_port()}/v1"
    with OpenAIServer([reply("from the backup")]) as live:
        primary = OpenAIProvider(KEY, base_url=url, name="primary", transport=AsyncioTransport())
        backup = OpenAIProvider(KEY, base_url=live.base_url, name="backup")
        state, events = run(make_harness, primary, backup)
    assert state.exit_reason == "model_complete"
    errors = [e.error for e in events if isinstance(e, ModelError)]
    assert f"(connection to {url}/chat/completions refused)" in errors[0].message


def test_streams_cut_twice_move_to_the_next_model(make_harness: Any) -> None:
    """A primary whose streams are cut mid-answer twice falls back too."""
    cut = Truncated(reply("a long answer " * 20), 4)
    with OpenAIServer([cut, cut]) as bad, OpenAIServer([reply("whole")]) as good:
        primary = OpenAIProvider(KEY, base_url=bad.base_url, name="primary")
        backup = OpenAIProvider(KEY, base_url=good.base_url, name="backup")
        state, events = run(make_harness, primary, backup)
    assert state.exit_reason == "model_complete"
    assert state.history[-1].text == "whole"
    assert [e.reason for e in events if isinstance(e, Fallback)] == ["transient"]
