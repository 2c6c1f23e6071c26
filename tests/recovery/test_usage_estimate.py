"""A response without usage: the run counts it with its token counter, marks it
estimated, says so once, and spends it."""

from __future__ import annotations

from typing import Any

from innerloop import HarnessParams, SpendBudget
from innerloop._events import Alert, Event, ModelResponseEvent
from innerloop._messages import Message, Usage
from innerloop.recovery import MessageTokenCache, TiktokenCounter
from innerloop.testing import ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

NONE = Usage()
TOKENS = MessageTokenCache(TiktokenCounter())


async def _echo(args: Any, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("echoed")


ECHO = ToolSpec("echo", "Echo.", {"type": "object"}, _echo)


def test_unreported_usage_is_counted_and_marked(make_harness: Any) -> None:
    """Each turn without usage books the request and the answer as counted, estimated;
    one alert says so for the run."""
    params = HarnessParams(model="scripted:m", system="sys", tools=[ECHO])
    script = [reply(tool_call("echo", id="e1"), usage=NONE), reply("done", usage=NONE)]
    events: list[Event] = []
    state = make_harness(params, ScriptedProvider(script)).run_sync("go", on_event=events.append)
    static = TOKENS.count_static("sys", params.tool_definitions)
    first = [Message.user("go")]
    second = state.history[:3]
    expected = Usage(
        2 * static + TOKENS.count_history(first) + TOKENS.count_history(second),
        TOKENS.count(state.history[1]) + TOKENS.count(state.history[3]),
        estimated=True,
    )
    assert state.usage == expected
    responses = [e.response.usage for e in events if isinstance(e, ModelResponseEvent)]
    assert [u.estimated for u in responses] == [True, True]
    alerts = [e for e in events if isinstance(e, Alert)]
    assert [a.kind for a in alerts] == ["usage_estimated"]
    assert alerts[0].message.startswith(
        f"scripted:m reported no token usage: innerloop counted {responses[0].input_tokens} "
        f"tokens in and {responses[0].output_tokens} out with TiktokenCounter("
    )


def test_reported_usage_is_taken_as_is(make_harness: Any) -> None:
    """A server that reports usage is believed: nothing estimated, no alert."""
    events: list[Event] = []
    harness = make_harness(HarnessParams(model="scripted:m"), ScriptedProvider([reply("hi")]))
    state = harness.run_sync("go", on_event=events.append)
    assert state.usage == Usage(10, 5)
    assert not [e for e in events if isinstance(e, Alert)]


def test_a_token_budget_fires_on_counted_usage(make_harness: Any) -> None:
    """SpendBudget(max_tokens=...) ends a run whose server reports no usage."""
    params = HarnessParams(
        model="scripted:m", tools=[ECHO], spend_budget=SpendBudget(max_tokens=20)
    )
    script = [reply(tool_call("echo"), usage=NONE) for _ in range(5)]
    state = make_harness(params, ScriptedProvider(script)).run_sync("go")
    assert state.exit_reason == "budget_exceeded"
    assert state.usage.estimated
    assert state.turns < 5
