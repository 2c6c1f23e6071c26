"""Random scripts of faults and tool calls: every run ends well-formed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from innerloop import Harness, HarnessParams, ToolSpec, Usage
from innerloop.fsm import DEFAULT_SPEC, compile_spec
from innerloop.testing import (
    FakeClock,
    Fault,
    Reply,
    ScriptedProvider,
    TransitionCoverage,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput

SYSTEM = "Fixed system prompt."
MACHINE = compile_spec(DEFAULT_SPEC)


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("ok")


async def _fail(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("nope", is_error=True)


TOOLS = (
    ToolSpec("echo", "e", {"type": "object"}, _echo),
    ToolSpec("fail", "f", {"type": "object"}, _fail),
)

faults = st.sampled_from(
    [
        Fault.rate_limited(),
        Fault.rate_limited(retry_after=3),
        Fault.overloaded(),
        Fault.server_error(),
        Fault.malformed(),
        Fault.empty(),
        Fault.dropped(1),
        Fault.context_overflow(),
        Fault.fatal(),
    ]
)
usages = st.builds(Usage, st.integers(0, 500), st.integers(0, 200), st.integers(0, 50))
tool_replies = st.builds(
    lambda names, text, u: reply(text, *[tool_call(n) for n in names], usage=u),
    st.lists(st.sampled_from(["echo", "fail", "missing"]), min_size=1, max_size=3),
    st.text(max_size=30),
    usages,
)
text_replies = st.builds(lambda t, u: reply(t or "done", usage=u), st.text(max_size=30), usages)
truncated = st.builds(
    lambda t, u: reply(t, stop_reason="max_tokens", usage=u, incomplete_tool=("echo", '{"a')),
    st.text(min_size=1, max_size=30),
    usages,
)
steps = st.lists(st.one_of(faults, tool_replies, text_replies, truncated), max_size=14)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=steps, max_turns=st.integers(1, 6), with_fallback=st.booleans())
def test_random_runs_end_well_formed(
    script: list[Any],
    max_turns: int,
    with_fallback: bool,
    transition_coverage: TransitionCoverage,
) -> None:
    """Any script ends in a final state within max_turns, with a valid history, the system
    prompt untouched and counters that add up."""
    fallbacks = ["backup:b-20250101"] if with_fallback else []
    params = HarnessParams(
        model="scripted:m-20250101",
        fallbacks=fallbacks,
        system=SYSTEM,
        tools=TOOLS,
        max_turns=max_turns,
        context_budget=200_000,
    )
    primary = ScriptedProvider(script, name="scripted")
    backup = ScriptedProvider(list(script), name="backup", dialect="openai")
    harness = Harness(
        params,
        {"scripted": primary, "backup": backup},
        machine=MACHINE,
        clock=FakeClock(),
        observers=(transition_coverage,),
    )
    state = harness.run_sync("start")

    assert state.final_state in MACHINE.finals
    assert state.exit_reason == MACHINE.exit_reason(state.final_state)
    assert state.turns <= max_turns
    assert_valid_history(state.history)
    for provider in (primary, backup):
        for request in provider.requests:
            body = request.payload
            if request.dialect == "anthropic":
                assert body["system"][0]["text"] == SYSTEM
            else:
                assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    played = primary.script[: primary.played] + backup.script[: backup.played]
    replies = [s for s in played if isinstance(s, Reply)]
    assert state.turns == len(replies)
    total = Usage()
    for r in replies:
        total = total + r.usage
    if all(r.usage.input_tokens or r.usage.output_tokens for r in replies):
        assert state.usage == total
    else:  # a reply without usage is counted, and the total says it is estimated
        assert state.usage.estimated
        assert state.usage.input_tokens > total.input_tokens
    played_faults = [s for s in played if isinstance(s, Fault)]
    past_script = sum(max(0, len(p.requests) - len(p.script)) for p in (primary, backup))
    assert sum(state.errors.values()) == len(played_faults) + past_script
