"""Typed structured output: ``output_type`` checked at construction, the answer validated in
``check``, repaired through the ``repair`` state, kept across JSON and checkpoints."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict

from innerloop import HarnessParams, HarnessState, ParamsError
from innerloop._convert import structure, unstructure
from innerloop._events import Alert, Event, Transition
from innerloop._messages import Message, ToolResultBlock, ToolUseBlock
from innerloop.fsm._output import ALONE, InvalidOutput, output_spec
from innerloop.testing import ScriptedProvider, assert_valid_history, reply, tool_call
from innerloop.tools import tool
from innerloop.tools._runner import ToolBatch, ToolRunner

MODEL = "scripted:m-20250101"
OLD_CLAUDE = "anthropic:claude-3-5-haiku-20241022"


class Weather(pydantic.BaseModel):
    city: str
    celsius: float
    note: str | None = None


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Pair(TypedDict):
    left: str
    right: list[int]


SCHEMA = {
    "type": "object",
    "title": "Answer",
    "properties": {"answer": {"type": "integer", "minimum": 0}},
    "required": ["answer"],
}
GOOD = '{"city": "Lisbon", "celsius": 21.5}'
BAD = '{"city": "Lisbon", "celsius": "warm"}'


def _params(**kw: Any) -> HarnessParams:
    kw.setdefault("output_type", Weather)
    return HarnessParams(model=MODEL, **kw)


class TestParams:
    def test_model_schema_is_sent_in_strict_form(self) -> None:
        """A pydantic model: its name, and the strict form OpenAI is sent (every field
        required, the optional one nullable, no extra keys)."""
        spec = _params().output_spec
        assert spec is not None
        assert spec.name == "Weather"
        assert spec.strict_schema == {
            "title": "Weather",
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "celsius": {"type": "number"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            "required": ["city", "celsius", "note"],
            "additionalProperties": False,
        }

    @pytest.mark.parametrize(
        ("output_type", "name", "required"),
        [
            (Point, "Point", ["x", "y"]),
            (Pair, "Pair", ["left", "right"]),
            (SCHEMA, "Answer", ["answer"]),
        ],
    )
    def test_each_kind_of_type(self, output_type: Any, name: str, required: list[str]) -> None:
        """A dataclass, a TypedDict and a JSON schema dict each compile to a named schema."""
        spec = _params(output_type=output_type).output_spec
        assert spec is not None
        assert spec.strict_schema is not None
        assert (spec.name, spec.strict_schema["required"]) == (name, required)

    def test_no_output_type_no_spec(self) -> None:
        """Without output_type nothing is compiled; the repair budget defaults to 2."""
        params = HarnessParams(model=MODEL)
        assert (params.output_spec, params.max_output_repairs) == (None, 2)

    def test_type_pydantic_cannot_build_is_refused(self) -> None:
        """A type pydantic has no schema for is refused, naming the field and the fix."""

        class Opaque:
            pass

        with pytest.raises(ParamsError) as err:
            _params(output_type=Opaque)
        assert err.value.field == "output_type"
        assert "unsupported annotation" in str(err.value)
        assert "a pydantic model or an attrs class" in str(err.value)

    def test_non_object_is_refused(self) -> None:
        """The providers take object schemas only: a list type says to wrap it."""
        with pytest.raises(ParamsError) as err:
            _params(output_type=list[int])
        assert str(err.value) == (
            "output_type: list is not a JSON object (its schema has type 'array'); the "
            "providers' structured output takes objects only: wrap the value in a model, "
            "dataclass or TypedDict with one field"
        )

    def test_invalid_schema_dict_is_refused(self) -> None:
        """A schema dict is checked as a Draft 2020-12 schema."""
        bad = {"type": "object", "properties": {"a": {"type": "strin"}}}
        with pytest.raises(ParamsError, match=r"^output_type: the schema is not a valid JSON"):
            _params(output_type=bad)

    def test_forced_tool_choice_is_refused(self) -> None:
        """A forced tool call on every turn would never let the model answer."""

        @tool
        async def look(city: str) -> str:
            """Look."""
            return city

        with pytest.raises(ParamsError, match=r"^tool_choice: 'any' forces a tool call"):
            _params(tools=[look], tool_choice="any")

    def test_forcing_final_result_outside_tool_mode_is_refused(self) -> None:
        """Forcing the final-result tool where a model is asked natively is refused, the
        way that works named."""
        with pytest.raises(ParamsError) as err:
            _params(tool_choice="tool:final_result")
        assert err.value.reason == (
            "'tool:final_result' forces a tool call on every turn, so the model can never "
            "give the typed final answer output_type asks for; use 'auto', or "
            "'tool:final_result' with output_mode='tool' (that call is the answer)"
        )

    def test_native_mode_refuses_claude_without_native_output(self) -> None:
        """output_mode='native': a Claude model older than structured output, even as a
        fallback, is refused, the fix named."""
        with pytest.raises(ParamsError) as err:
            _params(fallbacks=[OLD_CLAUDE], output_mode="native")
        assert err.value.field == "fallbacks[0]"
        assert err.value.reason == (
            "claude-3-5-haiku-20241022 has no native structured output, which "
            "output_mode='native' needs: use output_mode='auto' (the final-result tool for "
            "this model) or pick Claude Sonnet 4.5, Opus 4.1, Haiku 4.5 or later"
        )

    def test_auto_mode_picks_the_tool_per_model(self) -> None:
        """output_mode='auto': the tool for the older Claude only; 'tool': for every model;
        no output_type: for none."""
        params = _params(fallbacks=[OLD_CLAUDE, "anthropic:claude-sonnet-4-5-20250929"])
        assert [params.output_tool(c.model) for c in params.model_chain] == [False, True, False]
        forced = _params(output_mode="tool")
        assert forced.output_tool("gpt-4o-2024-08-06")
        assert not HarnessParams(model=MODEL).output_tool("claude-3-5-haiku-20241022")

    @pytest.mark.parametrize(
        ("kw", "message"),
        [
            ({"output_mode": "yaml"}, "output_mode: expected one of 'auto', 'native', 'tool', "),
            (
                {"output_mode": "json", "fallbacks": [OLD_CLAUDE]},
                "fallbacks[0]: claude-3-5-haiku-20241022 has no native structured output, "
                "which output_mode='json' needs: use output_mode='auto'",
            ),
            (
                {"output_mode": "tool", "output_type": None},
                "output_mode: 'tool' asks for a typed answer but output_type is None; set "
                "output_type or leave output_mode='auto'",
            ),
            (
                {"output_mode": "tool", "tool_choice": "none"},
                "tool_choice: 'none' forbids the final-result tool that output_type asks "
                "m-20250101 for; use 'auto'",
            ),
            (
                {"fallbacks": [OLD_CLAUDE], "tool_choice": "none"},
                "tool_choice: 'none' forbids the final-result tool that output_type asks "
                "claude-3-5-haiku-20241022 for; use 'auto'",
            ),
        ],
    )
    def test_output_mode_is_validated(self, kw: dict[str, Any], message: str) -> None:
        """A bad mode, a mode without a type, a tool choice that forbids the tool."""
        with pytest.raises(ParamsError) as err:
            _params(**kw)
        assert str(err.value).startswith(message)

    def test_final_result_name_is_reserved_in_tool_mode(self) -> None:
        """A tool of the run named final_result collides with the final-result tool; in
        native mode the name is free."""

        @tool
        async def final_result(text: str) -> str:
            """Log the result."""
            return text

        with pytest.raises(ParamsError) as err:
            _params(tools=[final_result], fallbacks=[OLD_CLAUDE])
        assert str(err.value) == (
            "tools: the tool name 'final_result' is taken by the final-result tool that "
            "output_type asks claude-3-5-haiku-20241022 for; rename the tool"
        )
        assert _params(tools=[final_result]).tool("final_result") is final_result

    @pytest.mark.parametrize("bad", [-1, True, 1.5])
    def test_repair_budget_is_validated(self, bad: Any) -> None:
        """max_output_repairs is an int >= 0."""
        with pytest.raises(ParamsError, match=r"^max_output_repairs: "):
            _params(max_output_repairs=bad)


class TestParse:
    def test_valid_answer(self) -> None:
        """The typed value and its JSON data; strict mode's null for an optional field is
        read as "not given"."""
        spec = output_spec(Weather)
        value, data = spec.parse('{"city": "Lisbon", "celsius": 21, "note": null}')
        assert value == Weather(city="Lisbon", celsius=21.0)
        assert data == {"city": "Lisbon", "celsius": 21.0, "note": None}
        assert spec.rebuild(data) == value

    def test_schema_violations_name_each_field(self) -> None:
        """Every problem names its field."""
        with pytest.raises(InvalidOutput) as err:
            output_spec(Weather).parse('{"celsius": "warm"}')
        assert err.value.problems == (
            "missing required field 'city'",
            "field 'celsius': expected number, got string 'warm'",
        )

    def test_prose_is_not_json(self) -> None:
        """Prose instead of JSON is one problem quoting the answer."""
        with pytest.raises(InvalidOutput) as err:
            output_spec(Weather).parse("It is sunny.")
        assert err.value.problems == (
            "the answer is not JSON (Expecting value: line 1 column 1 (char 0)): 'It is sunny.'",
        )

    def test_schema_dict(self) -> None:
        """A schema dict is validated by jsonschema; its value is the JSON data."""
        spec = output_spec(SCHEMA)
        assert spec.parse('{"answer": 3}') == ({"answer": 3}, {"answer": 3})
        with pytest.raises(InvalidOutput) as err:
            spec.parse('{"answer": -1}')
        assert len(err.value.problems) == 1
        assert "answer" in err.value.problems[0]


def _transitions(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.source, e.target) for e in events if isinstance(e, Transition)]


def _run(harness: Any, prompt: str = "Weather in Lisbon?") -> tuple[HarnessState, list[Event]]:
    events: list[Event] = []
    state = harness.run_sync(prompt, on_event=events.append)
    return state, events


REPAIR = (
    "Your answer does not match the required output format (Weather):\n"
    "- field 'celsius': expected number, got string 'warm'\n"
    "Answer again with only the corrected JSON object."
)


class TestRuns:
    def test_valid_answer_needs_no_repair(self, make_harness: Any) -> None:
        """A valid first answer ends in model_complete with the typed value."""
        harness = make_harness(_params(), ScriptedProvider([reply(GOOD)]))
        state, events = _run(harness)
        assert state.exit_reason == "model_complete"
        assert state.output == Weather(city="Lisbon", celsius=21.5)
        assert state.output_data == {"city": "Lisbon", "celsius": 21.5, "note": None}
        assert ("check", "repair") not in _transitions(events)

    @pytest.mark.parametrize("engine", ["table", "statemachine"])
    def test_one_repair(self, make_harness: Any, engine: str) -> None:
        """An invalid answer is sent back once as a user message; the second one passes
        (on both engines)."""
        script = ScriptedProvider([reply(BAD), reply(GOOD)])
        harness = make_harness(_params(), script, engine=engine)
        state, events = _run(harness)
        assert state.exit_reason == "model_complete"
        assert state.output == Weather(city="Lisbon", celsius=21.5)
        assert (state.output_repairs, state.output_problems) == (1, [])
        assert state.history == [
            Message.user("Weather in Lisbon?"),
            Message.assistant(BAD),
            Message.user(REPAIR),
            Message.assistant(GOOD),
        ]
        assert _transitions(events)[4:7] == [
            ("stream", "check"),
            ("check", "repair"),
            ("repair", "assemble"),
        ]
        alerts = [e for e in events if isinstance(e, Alert)]
        assert [a.kind for a in alerts] == ["output_invalid"]
        assert alerts[0].message == (
            "repair 1 of 2: the answer does not match output_type Weather: "
            "field 'celsius': expected number, got string 'warm'"
        )

    def test_repairs_exhausted_fail_with_diagnostic(self, make_harness: Any) -> None:
        """Still invalid after the last repair: failed, the diagnostic naming the problem."""
        params = _params(max_output_repairs=1)
        harness = make_harness(params, ScriptedProvider([reply(BAD), reply("Sunny, 21C.")]))
        state, events = _run(harness)
        assert state.exit_reason == "failed"
        assert state.output is None
        assert _transitions(events)[-2:] == [("check", "repair"), ("repair", "failed")]
        problem = (
            "the answer is not JSON (Expecting value: line 1 column 1 (char 0)): 'Sunny, 21C.'"
        )
        assert state.diagnostic == {
            "reason": f"the answer does not match output_type Weather after 1 repairs: {problem}",
            "output_type": "Weather",
            "problems": [problem],
            "answer": "Sunny, 21C.",
            "repairs": 1,
        }
        assert_valid_history(state.history)

    def test_zero_repairs_fail_at_once(self, make_harness: Any) -> None:
        """max_output_repairs=0: the first invalid answer fails the run."""
        harness = make_harness(_params(max_output_repairs=0), ScriptedProvider([reply(BAD)]))
        state, _ = _run(harness)
        assert (state.exit_reason, state.output_repairs, len(state.history)) == ("failed", 0, 2)

    def test_tool_turns_are_not_validated(self, make_harness: Any) -> None:
        """A turn that calls tools is not the answer; the answer after it is validated."""

        @tool
        async def look(city: str) -> str:
            """Look outside."""
            return f"{city}: 21.5C"

        script = [reply(tool_call("look", {"city": "Lisbon"}, id="t1")), reply(GOOD)]
        harness = make_harness(_params(tools=[look]), ScriptedProvider(script))
        state, events = _run(harness)
        assert (state.exit_reason, state.output_repairs) == ("model_complete", 0)
        assert state.output == Weather(city="Lisbon", celsius=21.5)
        assert ("execute", "check") in _transitions(events)

    def test_turn_limit_during_repair(self, make_harness: Any) -> None:
        """A repair needs a turn: with none left the run ends at the turn limit."""
        harness = make_harness(_params(max_turns=1), ScriptedProvider([reply(BAD)]))
        state, events = _run(harness)
        assert state.exit_reason == "max_turns_exceeded"
        assert _transitions(events)[-3:] == [
            ("check", "repair"),
            ("repair", "assemble"),
            ("assemble", "max_turns_exceeded"),
        ]

    def test_without_output_type_nothing_changes(self, make_harness: Any) -> None:
        """No output_type: a JSON-looking answer is plain text, no output, same path."""
        harness = make_harness(HarnessParams(model=MODEL), ScriptedProvider([reply(BAD)]))
        state, events = _run(harness)
        assert (state.exit_reason, state.output, state.output_data) == (
            "model_complete",
            None,
            None,
        )
        assert [t for _, t in _transitions(events)] == [
            "assemble",
            "normalize",
            "call",
            "stream",
            "check",
            "model_complete",
        ]


GOOD_INPUT = {"city": "Lisbon", "celsius": 21.5}
BAD_INPUT = {"city": "Lisbon", "celsius": "warm"}
TOOL_REPAIR = (
    "Not accepted: the input does not match the required output format (Weather):\n"
    "- field 'celsius': expected number, got string 'warm'\n"
    "Call final_result again with the corrected input."
)


def _final(data: dict[str, Any], id: str) -> Any:
    return reply(tool_call("final_result", data, id=id))


@tool
async def look(city: str) -> str:
    """Look outside."""
    return f"{city}: 21.5C"


class TestToolMode:
    """output_mode='tool': the answer is the input of a final_result call."""

    def test_valid_call_ends_the_run(self, make_harness: Any) -> None:
        """A valid call: model_complete with the typed value; the call answered
        'accepted', so the history ends valid; the request carried the tool."""
        provider = ScriptedProvider([_final(GOOD_INPUT, "f1")])
        state, events = _run(make_harness(_params(output_mode="tool"), provider))
        payload = provider.requests[0].payload
        assert [t["name"] for t in payload["tools"]] == ["final_result"]
        assert payload["tool_choice"] == {"type": "auto"}
        assert "output_config" not in payload
        assert state.exit_reason == "model_complete"
        assert state.output == Weather(city="Lisbon", celsius=21.5)
        call = tool_call("final_result", GOOD_INPUT, id="f1")
        assert state.history == [
            Message.user("Weather in Lisbon?"),
            Message("assistant", (call,)),
            Message("user", (ToolResultBlock("f1", "accepted"),)),
        ]
        assert _transitions(events)[-2:] == [("stream", "check"), ("check", "model_complete")]
        assert_valid_history(state.history)

    def test_forced_final_result_is_the_answer(self, make_harness: Any) -> None:
        """In tool mode, tool_choice='tool:final_result' is taken (not a ParamsError): the
        request forces the call, and that call ends the run with the typed value."""
        params = _params(output_mode="tool", tools=[look], tool_choice="tool:final_result")
        provider = ScriptedProvider([_final(GOOD_INPUT, "f1")])
        state, _ = _run(make_harness(params, provider))
        payload = provider.requests[0].payload
        assert [t["name"] for t in payload["tools"]] == ["look", "final_result"]
        assert payload["tool_choice"] == {"type": "tool", "name": "final_result"}
        assert state.exit_reason == "model_complete"
        assert state.output == Weather(city="Lisbon", celsius=21.5)
        assert_valid_history(state.history)

    @pytest.mark.parametrize("engine", ["table", "statemachine"])
    def test_invalid_call_is_repaired_by_its_result(self, make_harness: Any, engine: str) -> None:
        """An invalid input: the call's result is the error naming the problem (no user
        message), the repair is counted, the next call passes."""
        script = ScriptedProvider([_final(BAD_INPUT, "f1"), _final(GOOD_INPUT, "f2")])
        harness = make_harness(_params(output_mode="tool"), script, engine=engine)
        state, events = _run(harness)
        assert state.exit_reason == "model_complete"
        assert state.output == Weather(city="Lisbon", celsius=21.5)
        assert state.output_repairs == 1
        assert state.history[2:] == [
            Message("user", (ToolResultBlock("f1", TOOL_REPAIR, is_error=True),)),
            Message("assistant", (tool_call("final_result", GOOD_INPUT, id="f2"),)),
            Message("user", (ToolResultBlock("f2", "accepted"),)),
        ]
        assert _transitions(events)[4:7] == [
            ("stream", "check"),
            ("check", "repair"),
            ("repair", "assemble"),
        ]
        assert_valid_history(state.history)

    def test_prose_answer_is_asked_for_the_call(self, make_harness: Any) -> None:
        """Text instead of the call (even valid JSON text) is repaired with a user message
        asking for the call."""
        script = ScriptedProvider([reply(GOOD), _final(GOOD_INPUT, "f1")])
        harness = make_harness(_params(output_mode="tool"), script)
        state, events = _run(harness)
        assert (state.exit_reason, state.output_repairs) == ("model_complete", 1)
        assert state.history[1:3] == [
            Message.assistant(GOOD),
            Message.user(
                "Give your final answer by calling the final_result tool with it as the "
                "input (Weather), not as text."
            ),
        ]
        alerts = [e.message for e in events if isinstance(e, Alert)]
        assert alerts == [
            "repair 1 of 2: the answer does not match output_type Weather: the answer was "
            "given as text, not through the final_result tool"
        ]
        assert_valid_history(state.history)

    def test_repairs_exhausted_fail_with_a_valid_history(self, make_harness: Any) -> None:
        """Still invalid with no repair left: failed, the diagnostic giving the call's
        input; the call has its error result, so the history is valid."""
        script = ScriptedProvider([_final(BAD_INPUT, "f1")])
        harness = make_harness(_params(output_mode="tool", max_output_repairs=0), script)
        state, events = _run(harness)
        assert state.exit_reason == "failed"
        assert _transitions(events)[-2:] == [("check", "repair"), ("repair", "failed")]
        assert state.diagnostic is not None
        assert state.diagnostic["answer"] == '{"city":"Lisbon","celsius":"warm"}'
        assert state.diagnostic["problems"] == [
            "field 'celsius': expected number, got string 'warm'"
        ]
        assert state.history[-1] == Message(
            "user", (ToolResultBlock("f1", TOOL_REPAIR, is_error=True),)
        )
        assert_valid_history(state.history)

    @pytest.mark.parametrize("eager", [False, True])
    def test_call_beside_other_tools_waits_for_them(self, make_harness: Any, eager: bool) -> None:
        """final_result beside another call: the other tool runs, the final call is
        answered with an error asking for it alone (never an unknown-tool error of the
        runner, eager or not), no repair is spent, and the lone call after it passes."""
        mixed = reply(
            tool_call("look", {"city": "Lisbon"}, id="t1"),
            tool_call("final_result", GOOD_INPUT, id="f1"),
        )
        script = ScriptedProvider([mixed, _final(GOOD_INPUT, "f2")])
        params = _params(output_mode="tool", tools=[look], eager_tools=eager)
        seen: list[str] = []

        class Recording(ToolRunner):
            def prestart(self, scope: Any, call: ToolUseBlock) -> None:
                seen.append(f"prestart {call.name}")
                super().prestart(scope, call)

            async def run_calls(self, scope: Any, calls: Sequence[ToolUseBlock]) -> ToolBatch:
                seen.append(f"run {[c.name for c in calls]}")
                return await super().run_calls(scope, calls)

        harness = make_harness(params, script, tool_runner_factory=Recording)
        state, events = _run(harness)
        assert seen == [*(["prestart look"] if eager else []), "run ['look']"]
        assert (state.exit_reason, state.output_repairs) == ("model_complete", 0)
        assert state.history[2] == Message(
            "user",
            (
                ToolResultBlock("t1", "Lisbon: 21.5C"),
                ToolResultBlock("f1", ALONE, is_error=True),
            ),
        )
        assert ("stream", "execute") in _transitions(events)
        assert state.tool_failures == {"look": 0}
        assert_valid_history(state.history)

    def test_static_count_includes_the_tool(self, make_harness: Any) -> None:
        """With a context budget, the run's static token count includes the final-result
        tool and its system line."""
        counts = {}
        for mode, script in (("native", reply(GOOD)), ("tool", _final(GOOD_INPUT, "f1"))):
            params = _params(output_mode=mode, system="Be brief.", context_budget=100_000)
            run = make_harness(params, ScriptedProvider([script])).start("Weather?")
            assert run.run_sync().exit_reason == "model_complete"
            counts[mode] = run.scope.static_tokens
        tokens = run.deps.tokens
        line = "When you have the final answer, give it by calling the final_result tool"
        assert counts["tool"] > counts["native"] + tokens.counter.count_text(line)

    def test_run_tools_first_then_answer(self, make_harness: Any) -> None:
        """A tool turn, then the final call: the run's tool runs as usual."""
        script = [reply(tool_call("look", {"city": "Lisbon"}, id="t1")), _final(GOOD_INPUT, "f1")]
        params = _params(output_mode="tool", tools=[look])
        state, _ = _run(make_harness(params, ScriptedProvider(script)))
        assert state.exit_reason == "model_complete"
        assert state.history[2] == Message("user", (ToolResultBlock("t1", "Lisbon: 21.5C"),))
        assert_valid_history(state.history)


class TestPersistence:
    def test_state_json_round_trip(self, make_harness: Any) -> None:
        """The JSON form keeps output_data; the typed value is rebuilt from it."""
        harness = make_harness(_params(), ScriptedProvider([reply(BAD), reply(GOOD)]))
        state, _ = _run(harness)
        back = structure(json.loads(json.dumps(unstructure(state))), HarnessState)
        assert (back.output, back.output_data, back.output_repairs) == (
            None,
            state.output_data,
            1,
        )
        spec = harness.params.output_spec
        assert spec.rebuild(back.output_data) == state.output

    def test_checkpoint_reads_back_typed_and_resumes(
        self, make_harness: Any, tmp_path: Path
    ) -> None:
        """A checkpointed run's output reads back typed; a fork from its repair checkpoint
        runs on to a typed answer, and a fork from its end starts with the output rebuilt."""
        db = f"sqlite:///{tmp_path / 'runs.db'}"
        first = make_harness(
            _params(), ScriptedProvider([reply(BAD), reply(GOOD)]), checkpointer=db
        )
        run = first.start("Weather in Lisbon?")
        final = run.run_sync()
        last = first.checkpoint(run.run_id)
        assert last.state.output == Weather(city="Lisbon", celsius=21.5)
        assert isinstance(last.state.output, Weather)
        at_repair = next(
            i for i in first.checkpointer.checkpoints(run.run_id) if i.state == "repair"
        )

        better = '{"city": "Lisbon", "celsius": 22.0}'
        second = make_harness(_params(), ScriptedProvider([reply(better)]), checkpointer=db)
        state = second.fork(run.run_id, at=at_repair.seq).run_sync()
        assert (state.exit_reason, state.output) == (
            "model_complete",
            Weather(city="Lisbon", celsius=22.0),
        )
        assert state.history[:2] == final.history[:2]
        assert_valid_history(state.history)

        def ask_again(s: HarnessState) -> None:
            s.history.append(Message.user("And in Porto?"))

        third = make_harness(_params(), ScriptedProvider([reply(GOOD)]), checkpointer=db)
        forked = third.fork(run.run_id, edit=ask_again)
        assert forked.state.output == Weather(city="Lisbon", celsius=21.5)  # rebuilt
        assert forked.run_sync().exit_reason == "model_complete"

    def test_tool_mode_forks_from_every_checkpoint_stay_valid(
        self, make_harness: Any, tmp_path: Path
    ) -> None:
        """Tool mode, an invalid call then a valid one: a fork from each checkpoint before
        the end runs on to the typed answer with a valid history, each final_result call
        answered exactly once."""
        db = f"sqlite:///{tmp_path / 'runs.db'}"
        params = _params(output_mode="tool")
        script = [_final(BAD_INPUT, "f1"), _final(GOOD_INPUT, "f2")]
        first = make_harness(params, ScriptedProvider(script), checkpointer=db)
        run = first.start("Weather in Lisbon?")
        assert run.run_sync().exit_reason == "model_complete"
        infos = first.checkpointer.checkpoints(run.run_id)
        assert {"check", "repair"} <= {i.state for i in infos}
        forked = 0
        for info in infos[:-1]:
            done = make_harness(params, ScriptedProvider(script), checkpointer=db)
            state = done.fork(run.run_id, at=info.seq).run_sync()
            assert (info.state, state.exit_reason) == (info.state, "model_complete")
            assert state.output == Weather(city="Lisbon", celsius=21.5)
            assert_valid_history(state.history)
            forked += 1
        assert forked >= 6
