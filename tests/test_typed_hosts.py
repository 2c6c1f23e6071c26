"""A host's code, typed: ``match event:`` over a run's events narrows each case, and a
harness's answer has the type of its params' ``output_type``. ``make lint`` type-checks
this file under ``mypy --strict`` (the ``assert_type`` calls are checked there, and no
cast is needed); running it checks the same code does what it says."""

from __future__ import annotations

import asyncio
from typing import Any, assert_never, assert_type

import pydantic
import pytest

from innerloop import Harness, HarnessParams, HarnessState, Message, tool
from innerloop.checkpoint import Checkpoint, MemoryCheckpointer
from innerloop.events import (
    Abort,
    Alert,
    Backoff,
    ChildEvent,
    Compacted,
    Fallback,
    Finished,
    MessageComplete,
    ModelCall,
    ModelError,
    ModelResponseEvent,
    OutputDelta,
    RunEvent,
    RunStarted,
    ServerToolEvent,
    TextDelta,
    ThinkingDelta,
    ToolExecuted,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
    Transition,
)
from innerloop.fsm import Run
from innerloop.testing import (
    AnthropicServer,
    FakeClock,
    Fault,
    RateLimit,
    ScriptedProvider,
    ScriptStep,
    reply,
    tool_call,
)


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


@tool(category="network")
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def _describe(event: RunEvent) -> str | None:  # noqa: C901 (one case per event class)
    """One line per event a host cares about; each case reads its class's own fields."""
    match event:
        case TextDelta(text=text):
            return f"text {text!r}"
        case ToolUseStart(name=name, id=call_id):
            return f"call {name} {call_id}"
        case ToolUseComplete(tool_use=use):
            return f"input {use.input}"
        case ToolExecuted():
            return f"ran {event.name} error={event.is_error} {event.output!r}"
        case ModelResponseEvent(turn=turn):
            return f"turn {turn} {event.response.stop_reason}"
        case Transition(source=source, target=target, guard=guard):
            return f"{source} -> {target}" + (f" [{guard}]" if guard else "")
        case Finished(exit_reason=reason, turns=turns):
            return f"finished {reason} {turns} {event.usage.output_tokens}"
        case RunStarted(machine=machine, state=state):
            return f"started {machine} at {state}"
        case OutputDelta(data=data):
            return f"answer so far {data}"
        case ServerToolEvent(block=block):
            return f"server tool {block.name} {block.kind}"
        case ThinkingDelta() | ToolInputDelta() | MessageComplete() | ModelCall():
            return None
        case ModelError(error=error, stage=stage):
            return f"failed at {stage}: {error.category}"
        case Backoff() | Fallback() | Compacted() | Alert() | Abort():
            return f"recovery {event.type}"
        case ChildEvent(path=path, event=inner):
            return f"child {path} {inner.type}"
        case _:
            assert_never(event)  # every class a run yields has a case above


def _harness() -> Harness:
    params = HarnessParams(model="scripted:m", tools=[weather])
    script = [reply(tool_call("weather", {"city": "Lisbon"}, id="c1")), reply("Sunny.")]
    return Harness(params, [ScriptedProvider(script)])


TRANSCRIPT = [
    "started innerloop at idle",
    "idle -> assemble",
    "assemble -> normalize",
    "normalize -> call",
    "call -> stream [call_opened]",
    "call weather c1",
    "input {'city': 'Lisbon'}",
    "turn 1 tool_use",
    "stream -> execute [has_tool_calls]",
    "ran weather error=False 'sunny in Lisbon'",
    "execute -> check",
    "check -> assemble",
    "assemble -> normalize",
    "normalize -> call",
    "call -> stream [call_opened]",
    "text 'Sunny.'",
    "turn 2 end_turn",
    "stream -> check",
    "check -> model_complete [model_finished]",
    "finished model_complete 2 10",
]


class TestEvents:
    def test_match_narrows_each_event_class(self) -> None:
        """An async host's ``match`` reads text, tool calls, transitions and the end."""

        async def host() -> list[str]:
            run = _harness().start("Weather in Lisbon?")
            lines: list[str] = []
            async for event in run.events():
                assert_type(event, RunEvent)
                line = _describe(event)
                if line is not None:
                    lines.append(line)
            return lines

        assert asyncio.run(host()) == TRANSCRIPT

    def test_type_tags_narrow_too(self) -> None:
        """``event.type == "text_delta"`` narrows as a class pattern does (sync host)."""
        run = _harness().start("Weather in Lisbon?")
        text: list[str] = []
        calls: list[tuple[str, str]] = []
        for event in run.iter_sync():
            if event.type == "text_delta":
                text.append(event.text)
            elif event.type == "tool_executed":
                calls.append((event.name, event.output))
        assert ("".join(text), calls) == ("Sunny.", [("weather", "sunny in Lisbon")])

    def test_run_sync_hands_the_union_to_on_event(self) -> None:
        """``run_sync(on_event=...)`` takes a function of :data:`RunEvent`."""
        seen: list[str] = []

        def on_event(event: RunEvent) -> None:
            if isinstance(event, Transition):
                seen.append(event.target)

        state = _harness().run_sync("Weather in Lisbon?", on_event=on_event)
        assert state.exit_reason == "model_complete"
        assert seen[-1] == "model_complete"
        assert seen.count("execute") == 1


class TestOutput:
    def _harness(self, *answers: str) -> Harness[Weather]:
        params = HarnessParams(model="scripted:m", output_type=Weather)
        script = [reply(answer) for answer in answers]
        return Harness(params, [ScriptedProvider(script)], checkpointer=MemoryCheckpointer())

    def test_output_has_the_params_type(self) -> None:
        """``run_sync(...).output`` is a ``Weather | None`` (no cast to read its fields)."""
        harness = self._harness('{"city": "Lisbon", "celsius": 21.5}')
        assert_type(harness, Harness[Weather])
        state = harness.run_sync("Weather in Lisbon?")
        assert_type(state, HarnessState[Weather])
        assert_type(state.output, Weather | None)
        assert state.output is not None
        assert (state.output.city, state.output.celsius) == ("Lisbon", 21.5)

    def test_checkpoint_and_fork_keep_the_type(self) -> None:
        """A stored run read back, or forked (and so resumed), has the harness's type."""
        harness = self._harness(
            '{"city": "Porto", "celsius": 18.0}', '{"city": "Faro", "celsius": 24.0}'
        )
        run = harness.start("Weather in Porto?")
        assert_type(run, Run[Weather])
        assert run.run_id is not None
        run.run_sync()
        checkpoint = harness.checkpoint(run.run_id)
        assert_type(checkpoint, Checkpoint[Weather])
        assert_type(checkpoint.state.output, Weather | None)
        assert checkpoint.state.output == Weather(city="Porto", celsius=18.0)

        def edit(state: HarnessState[Weather]) -> None:
            state.history[-1:] = [Message.user("Weather in Faro?")]
            state.notes["forked"] = True

        forked = harness.fork(run.run_id, at=1, edit=edit)
        assert_type(forked, Run[Weather])
        state = forked.run_sync()
        assert_type(state.output, Weather | None)
        assert state.output == Weather(city="Faro", celsius=24.0)
        assert (state.history[0].text, state.notes) == ("Weather in Faro?", {"forked": True})

    def test_no_output_type_keeps_any(self) -> None:
        """Params without ``output_type`` make a ``Harness[Any]``, as before (a schema dict
        too: its answer is JSON data)."""
        untyped = Harness(HarnessParams(model="scripted:m"), [ScriptedProvider([reply("hi")])])
        assert_type(untyped, Harness[Any])
        schema = {"type": "object", "properties": {"city": {"type": "string"}}}
        params = HarnessParams(model="scripted:m", output_type=schema)
        assert_type(params, HarnessParams[Any])
        state = Harness(params, [ScriptedProvider([reply('{"city": "Faro"}')])]).run_sync("?")
        assert state.output == {"city": "Faro"}


class TestScripts:
    def test_a_mixed_script_is_a_list_of_steps(self) -> None:
        """A script mixing a fault and a reply needs no annotation: its steps share a base."""
        script = [Fault.server_error(503), reply("Fine.")]
        assert_type(script, list[ScriptStep])
        params = HarnessParams(model="scripted:m")
        state = Harness(params, [ScriptedProvider(script)], clock=FakeClock()).run_sync("?")
        assert (state.exit_reason, state.errors) == ("model_complete", {"transient": 1})

    def test_a_step_its_player_cannot_play_is_refused(self) -> None:
        """A server's own step given to a ScriptedProvider, or a string to a server, is
        refused when the script is given, naming the step and what may be played."""
        with pytest.raises(TypeError) as err:
            ScriptedProvider([reply("hi"), RateLimit(1.0)])
        assert str(err.value) == (
            "ScriptedProvider cannot play step 1 of its script (RateLimit); its steps are "
            "Reply, Fault"
        )
        with pytest.raises(TypeError) as err:
            AnthropicServer(["hi"])  # type: ignore[list-item]
        assert str(err.value) == (
            "AnthropicServer cannot play step 0 of its script (str); its steps are Reply, "
            "Fault, RateLimit, SlowReply, Truncated, StreamError, Raw, Oversized, Trickle"
        )
