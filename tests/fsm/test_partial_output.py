"""``PartialOutput``: the typed answer's prefix parsed as it streams, only when it
changed, at a cost linear in the answer; and ``OutputDelta`` in a run and in the log."""

from __future__ import annotations

import json
from typing import Any

import pydantic

from innerloop import Harness, HarnessParams
from innerloop._events import (
    Event,
    OutputDelta,
    TextDelta,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop._json import unreadable_input
from innerloop._messages import ToolUseBlock
from innerloop.fsm._output import FIRST_STEP, STEP_FRACTION, PartialOutput
from innerloop.testing import ScriptedProvider, reply, tool_call

FILLER = '{"note": "padding past the first step", '


def _native() -> PartialOutput:
    return PartialOutput(text=True, tool=False)


class TestNative:
    def test_nothing_before_the_first_step(self) -> None:
        """Fewer bytes than FIRST_STEP are not parsed; finish parses them."""
        partial = _native()
        assert partial.feed(TextDelta(0, '{"a": "b"')) is None
        assert partial.finish() == OutputDelta(0, {"a": "b"})
        assert partial.finish() is None  # nothing new since

    def test_a_number_at_the_end_waits(self) -> None:
        """A prefix ending in a digit is not parsed: jiter would read 21 of 21.5."""
        partial = _native()
        assert partial.feed(TextDelta(0, FILLER + '"celsius": 2')) is None
        assert partial.feed(TextDelta(0, "1")) is None
        delta = partial.feed(TextDelta(0, ".5, "))
        assert delta == OutputDelta(0, {"note": "padding past the first step", "celsius": 21.5})

    def test_a_string_being_written_is_cut_where_it_stands(self) -> None:
        partial = _native()
        delta = partial.feed(TextDelta(2, FILLER + '"summary": "Sunny al'))
        note = "padding past the first step"
        assert delta == OutputDelta(2, {"note": note, "summary": "Sunny al"})

    def test_only_changes_are_yielded(self) -> None:
        """Bytes that change nothing (spaces, a key not finished) give no delta."""
        partial = _native()
        assert partial.feed(TextDelta(0, FILLER)) == OutputDelta(
            0, {"note": "padding past the first step"}
        )
        assert partial.feed(TextDelta(0, " " * 40)) is None
        assert partial.feed(TextDelta(0, '"unfinished_key_of_some_length')) is None
        assert partial.finish() is None

    def test_prose_gives_nothing(self) -> None:
        """Text that is not a JSON object (prose, a bare array) is never an answer delta."""
        for text in ("Let me look that up first, then answer.", "[1, 2, 3, 4, 5, 6, 7, 8, 9]"):
            partial = _native()
            assert partial.feed(TextDelta(0, text)) is None
            assert partial.finish() is None

    def test_too_deep_is_not_an_error(self) -> None:
        """An answer nested past jiter's limit gives no delta and raises nothing (check
        repairs it later, as before)."""
        partial = _native()
        assert partial.feed(TextDelta(0, '{"a": ' + "[" * 100_000)) is None
        assert partial.finish() is None

    def test_cost_is_linear_in_the_answer(self) -> None:
        """A 100 kB answer in 4-byte deltas (25,000 events) is parsed about a hundred
        times, not at every delta; the last delta is the whole answer."""
        answer = {"items": [{"name": f"item {i}", "score": i} for i in range(3000)]}
        text = json.dumps(answer)
        assert len(text) > 90_000
        partial = _native()
        deltas = [partial.feed(TextDelta(0, text[i : i + 4])) for i in range(0, len(text), 4)]
        deltas.append(partial.finish())
        found = [d for d in deltas if d is not None]
        assert 90 < len(found) < 160  # FIRST_STEP up to 256 bytes, then 1/16 growth
        assert found[-1].data == answer
        assert (FIRST_STEP, STEP_FRACTION) == (16, 16)


class TestTool:
    def _partial(self, *, text: bool = False) -> PartialOutput:
        return PartialOutput(text=text, tool=True)

    def test_only_the_final_result_call_is_followed(self) -> None:
        """Text and another tool's input are not the answer; the final call's are."""
        partial = self._partial()
        assert partial.feed(TextDelta(0, FILLER + '"x": 1}')) is None
        assert partial.feed(ToolUseStart(1, "t1", "lookup")) is None
        assert partial.feed(ToolInputDelta(1, "t1", FILLER + '"x": "y"}')) is None
        assert partial.feed(ToolUseStart(2, "f1", "final_result")) is None
        delta = partial.feed(ToolInputDelta(2, "f1", FILLER + '"city": "Lis'))
        assert delta == OutputDelta(2, {"note": "padding past the first step", "city": "Lis"}, "f1")
        done = ToolUseComplete(2, ToolUseBlock("f1", "final_result", {"city": "Lisbon"}))
        assert partial.feed(done) == OutputDelta(2, {"city": "Lisbon"}, "f1")
        assert partial.finish() is None

    def test_a_final_call_stops_following_the_text(self) -> None:
        """Asked natively with a final-result call in the turn: the call is the answer."""
        partial = self._partial(text=True)
        assert partial.feed(TextDelta(0, FILLER + '"a": "b"}')) == OutputDelta(
            0, {"note": "padding past the first step", "a": "b"}
        )
        assert partial.feed(ToolUseStart(1, "f1", "final_result")) is None
        assert partial.feed(TextDelta(0, " more text that would change nothing anyway")) is None
        delta = partial.feed(ToolInputDelta(1, "f1", FILLER + '"a": "c"}'))
        assert delta == OutputDelta(1, {"note": "padding past the first step", "a": "c"}, "f1")

    def test_the_last_call_starts_afresh(self) -> None:
        partial = self._partial()
        partial.feed(ToolUseStart(0, "f1", "final_result"))
        partial.feed(ToolInputDelta(0, "f1", FILLER + '"a": 1}'))
        partial.feed(ToolUseStart(1, "f2", "final_result"))
        assert partial.feed(ToolInputDelta(0, "f1", FILLER + '"a": 2}')) is None
        assert partial.feed(ToolInputDelta(1, "f2", '{"a": 3}')) is None
        assert partial.finish() == OutputDelta(1, {"a": 3}, "f2")

    def test_an_unreadable_call_gives_no_delta(self) -> None:
        partial = self._partial()
        partial.feed(ToolUseStart(0, "f1", "final_result"))
        block = ToolUseBlock("f1", "final_result", unreadable_input("too deep"))
        assert partial.feed(ToolUseComplete(0, block)) is None

    def test_not_asked_through_the_tool(self) -> None:
        """Without the final-result tool, a call of that name is nobody's answer."""
        partial = PartialOutput(text=True, tool=False)
        partial.feed(ToolUseStart(0, "f1", "final_result"))
        assert partial.feed(ToolInputDelta(0, "f1", FILLER + '"a": 2}')) is None


class Weather(pydantic.BaseModel):
    city: str
    summary: str


def test_a_run_streams_each_turn_afresh() -> None:
    """A repaired answer: each turn's deltas start from nothing; a quiet run (run_sync
    without on_event) reaches the same output."""
    bad = '{"city": "Lisbon", "sky": "the answer breaks the schema"}'
    good = '{"city": "Lisbon", "summary": "sunny all day"}'
    params = HarnessParams(model="scripted:m", output_type=Weather)
    events: list[Event] = []

    def script() -> ScriptedProvider:
        return ScriptedProvider([reply(bad), reply(good)], chunk_size=8)

    state = Harness(params, [script()]).run_sync("Weather?", on_event=events.append)
    assert state.output == Weather(city="Lisbon", summary="sunny all day")
    assert [e.data for e in events if isinstance(e, OutputDelta)] == [
        {"city": "Lisbon"},
        {"city": "Lisbon", "sky": "the a"},
        {"city": "Lisbon", "sky": "the answer breaks the"},
        {"city": "Lisbon", "sky": "the answer breaks the schema"},
        {"city": "Lisbon"},
        {"city": "Lisbon", "summary": "s"},
        {"city": "Lisbon", "summary": "sunny all day"},
    ]
    assert Harness(params, [script()]).run_sync("Weather?").output == state.output


def test_tool_mode_in_a_run() -> None:
    params = HarnessParams(model="scripted:m", output_type=Weather, output_mode="tool")
    answer = {"city": "Lisbon", "summary": "sunny all day long"}
    model = ScriptedProvider([reply(tool_call("final_result", answer, id="f9"))], chunk_size=8)
    events: list[Event] = []
    state = Harness(params, [model]).run_sync("Weather?", on_event=events.append)
    assert state.exit_reason == "model_complete"
    deltas = [e for e in events if isinstance(e, OutputDelta)]
    assert deltas[-1] == OutputDelta(0, answer, "f9")
    assert {d.tool_use_id for d in deltas} == {"f9"}
    deltas[-1].data["city"] = "changed by the host"  # the history keeps its own copy
    assert state.history[1].tool_uses[0].input == answer


def test_the_log_form() -> None:
    """``output_delta`` lines carry index, data and tool_use_id, and read back."""
    delta = OutputDelta(3, {"city": "Lis", "tags": ["a"]}, "f1")
    line: dict[str, Any] = delta.to_dict()
    assert line == {
        "type": "output_delta",
        "index": 3,
        "data": {"city": "Lis", "tags": ["a"]},
        "tool_use_id": "f1",
    }
    assert Event.from_dict(json.loads(json.dumps(line))) == delta
    assert Event.from_dict({"type": "output_delta", "index": 0, "data": {}}) == OutputDelta(0, {})
