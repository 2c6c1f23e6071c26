"""The step interface without an engine: steps run in memory through a JSON round trip."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, ToolSpec
from innerloop._errors import ConversionError, ErrorCategory, ProviderError
from innerloop._messages import Message, ModelResponse, Usage
from innerloop.durable import (
    LoopApp,
    LoopDefinition,
    StepCall,
    StepLost,
    state_from_dict,
    state_to_dict,
)
from innerloop.fsm import HarnessState, Task
from innerloop.testing import FakeClock, Fault, ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput


async def echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    if args.get("fail"):
        raise RuntimeError("boom")
    return ToolOutput(f"echo {args['x']}")


ECHO = ToolSpec("echo", "Echo x.", {"type": "object"}, echo)
PARAMS = HarnessParams(model="scripted:m-20250101", tools=[ECHO], system="sys")


def script() -> ScriptedProvider:
    return ScriptedProvider(
        [
            Fault.rate_limited(retry_after=3),
            reply("one", tool_call("echo", {"x": "a"}, id="c1")),
            Fault.server_error(),
            reply("two", tool_call("echo", {"fail": True}, id="c2"), tool_call("nope", id="c3")),
            Fault.dropped(),
            reply("done"),
        ]
    )


def in_memory(app: LoopApp) -> StepCall:
    """An engine that records nothing: each step runs at once, its args and result pass
    through JSON as a real engine's would."""

    async def call(step: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await app.execute(step, json.loads(json.dumps(args)))
        return dict(json.loads(json.dumps(result)))

    return call


def comparable(state: HarnessState) -> dict[str, Any]:
    data = state_to_dict(state)
    data.pop("diagnostic")
    return data


def test_steps_give_the_in_process_run() -> None:
    """Through steps, faults, backoff, retries and tool errors end in the same state."""
    plain_clock, step_clock = FakeClock(), FakeClock()
    plain = Harness(PARAMS, [script()], clock=plain_clock).run_sync("go")
    app = LoopApp({"l": LoopDefinition(PARAMS, {"scripted": script()})})
    run = app.start_run({"loop": "l", "prompt": "go"}, in_memory(app), step_clock)
    stepped = asyncio.run(run.run())
    assert comparable(stepped) == comparable(plain)
    assert stepped.exit_reason == "model_complete"
    assert stepped.errors == {"rate_limited": 1, "transient": 2}
    assert step_clock.sleeps == plain_clock.sleeps == [3]


def test_a_lost_model_step_is_a_transient_error() -> None:
    """A model step the engine gave up on routes like a transient provider failure."""
    app = LoopApp({"l": LoopDefinition(PARAMS, {"scripted": ScriptedProvider([reply("ok")])})})
    lost = [True]

    async def call(step: str, args: dict[str, Any]) -> dict[str, Any]:
        if lost[0]:
            lost[0] = False
            raise StepLost("every worker died")
        return await app.execute(step, args)

    state = asyncio.run(app.start_run({"loop": "l", "prompt": "go"}, call, FakeClock()).run())
    assert state.exit_reason == "model_complete"
    assert state.errors == {"transient": 1}


def test_a_lost_tool_step_is_an_error_result() -> None:
    """A tool step the engine gave up on goes back to the model as an error result."""
    provider = ScriptedProvider([reply(tool_call("echo", {"x": "a"}, id="c1")), reply("ok")])
    app = LoopApp({"l": LoopDefinition(PARAMS, {"scripted": provider})})

    async def call(step: str, args: dict[str, Any]) -> dict[str, Any]:
        if step == "tool_call":
            raise StepLost("every worker died")
        return await app.execute(step, args)

    state = asyncio.run(app.start_run({"loop": "l", "prompt": "go"}, call, FakeClock()).run())
    result = state.history[2].tool_results[0]
    assert (result.content, result.is_error) == ("tool 'echo' was lost: every worker died", True)


def test_state_round_trips_through_json() -> None:
    """Every field the machine reads survives state_to_dict -> JSON -> state_from_dict."""
    state = HarnessState(
        history=[Message.user("hi"), Message.assistant("yo")],
        tasks=[Task("t1", "do it", True)],
        usage=Usage(1, 2, 3, 4, 5),
        turns=2,
        active=1,
        degraded=True,
        errors={"transient": 1},
        tool_failures={"echo": 2},
        rate_limit_failures=1,
        total_wait=4.0,
        resolved_models=["m"],
        error=ProviderError(ErrorCategory.RATE_LIMITED, "slow", provider="p", retry_after=2),
        last_response=ModelResponse(Message.assistant("yo"), "end_turn", Usage(1, 2), "m", "p"),
        notes={"k": [1, 2]},
    )
    state.request_abort("stop")
    back = state_from_dict(json.loads(json.dumps(state_to_dict(state))))
    assert state_to_dict(back) == state_to_dict(state)
    assert back.abort is not None
    assert back.abort.reason == "stop"
    assert back.error is not None
    assert back.error.retry_after == 2
    assert back.notes == {"k": [1, 2]}


def test_a_note_with_no_json_form_is_refused() -> None:
    """A notes value JSON cannot carry is an error naming its type, never silently dropped."""
    state = HarnessState(notes={"handle": object()})
    with pytest.raises(ConversionError, match="a value of type object is not JSON data"):
        state_to_dict(state)
