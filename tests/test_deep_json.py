"""JSON from outside nested too deep: one parse with a depth limit
(``innerloop._json.parse_json``, ``MAX_JSON_DEPTH``), and an ordinary error in each place
instead of a ``RecursionError``: a repair for a model's answer, an ``is_error`` result for
tool arguments (a repair for ``final_result``), a ``ResumeError`` for an answer (exit 2 for
``--answer``), a ``ValueError`` naming the line for an event log, ``CheckpointCorrupt``
for a checkpoint row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from innerloop import HarnessParams, ParamsError, ResumeError, ToolSpec
from innerloop._eventlog import SCHEMA, read_event_log
from innerloop._events import Event, Transition
from innerloop._json import MAX_JSON_DEPTH, STORED_JSON_DEPTH, JSONTooDeep, json_depth, parse_json
from innerloop.checkpoint import (
    CheckpointCorrupt,
    CheckpointInfo,
    SQLiteCheckpointer,
    StoredRows,
    decode,
)
from innerloop.testing import (
    AnthropicServer,
    OpenAIServer,
    ScriptedProvider,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput
from tests.providers.test_structured_output import (
    GOOD,
    GOOD_INPUT,
    STRICT,
    TOOL_SCHEMAS,
    Weather,
    _params,
    _provider,
)
from tests.test_cli import cli

DEEP = "[" * 100_000 + "]" * 100_000


def _nested(depth: int) -> dict[str, Any]:
    data: dict[str, Any] = {"city": "Lisbon", "celsius": 1.0}
    for _ in range(depth - 1):
        data = {"a": data}
    return data


class TestParse:
    def test_too_deep_is_a_json_error_never_a_recursion_error(self) -> None:
        """100,000 levels, or one past the limit: JSONTooDeep, a JSONDecodeError."""
        for text in (DEEP, json.dumps(_nested(MAX_JSON_DEPTH + 1))):
            with pytest.raises(JSONTooDeep, match="nested deeper than 100 levels") as caught:
                parse_json(text)
            assert isinstance(caught.value, json.JSONDecodeError)

    def test_the_limit_itself_is_read(self) -> None:
        """Exactly the limit parses; brackets inside strings do not count."""
        data = _nested(MAX_JSON_DEPTH)
        assert parse_json(json.dumps(data)) == data
        assert json_depth(data) == MAX_JSON_DEPTH
        assert parse_json(json.dumps(["[" * 500, "{" * 500])) == ["[" * 500, "{" * 500]

    def test_the_limit_is_a_setting(self) -> None:
        """``max_depth`` sets it per call."""
        with pytest.raises(JSONTooDeep, match="deeper than 2 levels"):
            parse_json("[[[1]]]", max_depth=2)
        assert parse_json("[[1]]", max_depth=2) == [[1]]


def _transitions(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.source, e.target) for e in events if isinstance(e, Transition)]


def test_a_model_answer_nested_100000_deep_is_repaired(make_harness: Any) -> None:
    """With an output_type, the answer too deep to read is sent back for a repair, and
    the next answer completes the run (through the real SDK, over loopback HTTP)."""
    with AnthropicServer([reply(DEEP), reply(GOOD)], output_schema=STRICT) as server:
        harness = make_harness(
            _params("anthropic:claude-sonnet-4-5-20250929"), [_provider("anthropic", server, "sdk")]
        )
        events: list[Event] = []
        state = harness.run_sync("Weather in Lisbon?", on_event=events.append)
        repair = server.requests[1].body["messages"][-1]["content"]
    assert state.exit_reason == "model_complete", state.diagnostic
    assert state.output == Weather(city="Lisbon", celsius=21.5)
    assert state.output_repairs == 1
    assert ("check", "repair") in _transitions(events)
    assert "nested deeper than 100 levels" in json.dumps(repair)


@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
def test_a_final_result_call_nested_400_deep_is_repaired(dialect: str, make_harness: Any) -> None:
    """A final_result call too deep to read gets an error result and a repair, never a
    RecursionError; the next call completes the run (through the real SDK)."""
    server_type = {"anthropic": AnthropicServer, "openai": OpenAIServer}[dialect]
    model = {"anthropic": "claude-3-5-haiku-20241022", "openai": "gpt-4o-2024-08-06"}[dialect]
    script = [
        reply(tool_call("final_result", _nested(400), id="c1")),
        reply(tool_call("final_result", GOOD_INPUT, id="c2")),
    ]
    with server_type(script, output_schema=TOOL_SCHEMAS[dialect], output_tool=True) as server:
        params = _params(f"{dialect}:{model}", output_mode="tool")
        harness = make_harness(params, [_provider(dialect, server, "sdk")])
        events: list[Event] = []
        state = harness.run_sync("Weather in Lisbon?", on_event=events.append)
    assert state.exit_reason == "model_complete", state.diagnostic
    assert state.output == Weather(city="Lisbon", celsius=21.5)
    assert state.output_repairs == 1
    assert ("check", "repair") in _transitions(events)
    (result,) = state.history[2].tool_results
    assert result.is_error
    assert "nested deeper than 100 levels" in result.content
    assert_valid_history(state.history)


def test_tool_arguments_nested_400_deep_are_an_error_result(make_harness: Any) -> None:
    """Arguments too deep to read: the tool is not run, its call gets an is_error result
    saying why, and the run goes on (through the real SDK)."""
    ran: list[Any] = []

    async def look(args: Any, ctx: ToolContext) -> ToolOutput:
        ran.append(args)
        return ToolOutput("seen")

    script = [reply(tool_call("look", _nested(400), id="t1")), reply("done")]
    with AnthropicServer(script) as server:
        params = HarnessParams(
            model="anthropic:claude-sonnet-4-5-20250929",
            tools=(ToolSpec("look", "Look", {"type": "object"}, look),),
        )
        state = make_harness(params, [_provider("anthropic", server, "sdk")]).run_sync("go")
    assert state.exit_reason == "model_complete", state.diagnostic
    assert ran == []
    (result,) = state.history[2].tool_results
    assert result.is_error
    assert result.content == (
        "the arguments of tool 'look' could not be read (nested deeper than 100 levels of "
        "arrays and objects), the tool was not run; call it again with flatter arguments"
    )
    assert_valid_history(state.history)


def test_answer_on_the_command_line_nested_5000_deep_exits_2(tmp_path: Path) -> None:
    """``runs resume --answer`` with JSON nested 5,000 deep: one line, exit 2."""
    answer = "[" * 5000 + "]" * 5000
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    done = cli("runs", "resume", "r1", "--db", db, "--answer", answer,
               env={"ANTHROPIC_API_KEY": "sk-ant-test"})  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "innerloop runs: error: --answer: the JSON is nested deeper than 100 levels of arrays "
        "and objects; give a flatter answer\n"
    )


def test_an_event_log_line_nested_deep_names_its_line(tmp_path: Path) -> None:
    """A log line too deep is a ValueError naming the file and line."""
    log = tmp_path / "run.jsonl"
    header = json.dumps({"type": "log_header", "schema": SCHEMA})
    log.write_text(header + "\n" + DEEP + "\n")
    with pytest.raises(ValueError, match=r"run.jsonl:2: not JSON: nested deeper than 232"):
        read_event_log(log)


def test_a_checkpoint_row_nested_deep_is_corrupt() -> None:
    """A stored row too deep reads back as CheckpointCorrupt, never a RecursionError."""
    info = CheckpointInfo(
        run_id="r1", seq=1, state="assemble", source=None, guard=None,
        history_start=0, history_len=0, created=0.0,
    )  # fmt: skip
    rows = StoredRows(info, [(1, '{"full": ' + DEEP + "}")], [])
    with pytest.raises(CheckpointCorrupt, match=f"nested deeper than {STORED_JSON_DEPTH}"):
        decode(rows)


def test_a_resume_answer_nested_5000_deep_is_a_resume_error(make_harness: Any) -> None:
    """Through the API, an answer nested 5,000 deep is a ResumeError; nothing changes."""

    async def ask(args: Any, ctx: ToolContext) -> ToolOutput:
        ctx.interrupt({"question": "which?"})

    params = HarnessParams(
        model="scripted:m", tools=(ToolSpec("ask", "Ask", {"type": "object"}, ask),)
    )
    provider = ScriptedProvider([reply(tool_call("ask", {}, id="a1")), reply("done")])
    harness = make_harness(params, provider)
    run = harness.start("go")
    assert run.run_sync().exit_reason == "suspended"
    answer: Any = "leaf"
    for _ in range(5000):
        answer = [answer]
    with pytest.raises(ResumeError, match="nested 5000 levels deep, deeper than the 100"):
        harness.resume(run, answer)
    assert run.state.interrupt is not None
    assert not run.state.interrupt.answered
    assert harness.resume(run, "this one").run_sync().exit_reason == "model_complete"


class TestTheRunsSetting:
    """``HarnessParams.max_json_depth`` sets the limit for what a run reads from outside."""

    @pytest.mark.parametrize("value", [0, 201, True, "100", 1.5])
    def test_checked_at_construction(self, value: Any) -> None:
        with pytest.raises(ParamsError) as caught:
            HarnessParams(model="scripted:m", max_json_depth=value)
        assert str(caught.value) == (
            f"max_json_depth: must be an integer between 1 and 200, got {value!r}"
        )
        assert HarnessParams(model="scripted:m").max_json_depth == MAX_JSON_DEPTH == 100

    @pytest.mark.parametrize(("limit", "depth", "runs"), [(20, 30, False), (150, 120, True)])
    def test_tool_arguments(
        self, limit: int, depth: int, runs: bool, make_harness: Any, tmp_path: Path
    ) -> None:
        """Lower, the arguments past it are an error result; higher, arguments past the
        default run the tool, and the run's checkpoints read back (real SDK, loopback)."""
        ran: list[Any] = []

        async def look(args: Any, ctx: ToolContext) -> ToolOutput:
            ran.append(args)
            return ToolOutput("seen")

        script = [reply(tool_call("look", _nested(depth), id="t1")), reply("done")]
        with AnthropicServer(script) as server:
            params = HarnessParams(
                model="anthropic:claude-sonnet-4-5-20250929",
                tools=(ToolSpec("look", "Look", {"type": "object"}, look),),
                max_json_depth=limit,
            )
            harness = make_harness(
                params,
                [_provider("anthropic", server, "sdk")],
                checkpointer=SQLiteCheckpointer(tmp_path / "runs.db"),
            )
            run = harness.start("go", run_id="deep")
            state = run.run_sync()
        assert state.exit_reason == "model_complete", state.diagnostic
        (result,) = state.history[2].tool_results
        if runs:
            assert ran == [_nested(depth)]
            assert (result.is_error, result.content) == (False, "seen")
        else:
            assert ran == []
            assert result.content.startswith(
                "the arguments of tool 'look' could not be read (nested deeper than 20 levels "
            )
        assert harness.checkpointer is not None
        back = decode(harness.checkpointer.rows("deep"))
        assert back.state.history == state.history

    def test_a_native_answer(self, make_harness: Any) -> None:
        """An answer deeper than the run's limit is repaired naming the limit."""
        deep = json.dumps(_nested(30))
        with AnthropicServer([reply(deep), reply(GOOD)], output_schema=STRICT) as server:
            params = _params("anthropic:claude-sonnet-4-5-20250929", max_json_depth=20)
            harness = make_harness(params, [_provider("anthropic", server, "sdk")])
            state = harness.run_sync("Weather in Lisbon?")
            repair = server.requests[1].body["messages"][-1]["content"]
        assert state.exit_reason == "model_complete", state.diagnostic
        assert state.output_repairs == 1
        assert "nested deeper than 20 levels" in json.dumps(repair)
