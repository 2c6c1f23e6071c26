"""Replays of recorded runs: the demo's runs replay the same, a changed prompt, model or
limit names its first divergence, custom machines replay on their own machine, and an
older log is refused naming the fix."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from innerloop import EventLog, Harness, HarnessParams, ToolSpec, read_event_log
from innerloop._demo import NESTED_SPEC, Report, run_demo
from innerloop.checkpoint import MemoryCheckpointer
from innerloop.cli import main
from innerloop.examples import with_guardrail
from innerloop.fsm import MachineSpec
from innerloop.testing import (
    Divergence,
    FakeClock,
    Fault,
    ReplayError,
    ReplayResult,
    ScriptedProvider,
    areplay,
    replay,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput
from innerloop.tools._runner import ABORTED_TOOL


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The event log ``innerloop demo`` writes (its three runs)."""
    out = tmp_path_factory.mktemp("demo")
    run_demo(out, live=False)
    return out / "events.jsonl"


def recorded_transitions(log: Path, run: int) -> int:
    runs = [0]
    for line in read_event_log(log):
        if line["type"] == "run_started":
            runs.append(0)
        elif line["type"] == "transition":
            runs[-1] += 1
    return runs[run]


class TestDemoRuns:
    @pytest.mark.parametrize(
        ("run", "exit_reason", "calls"),
        [(1, "model_complete", 14), (2, "aborted", 1), (3, "model_complete", 2)],
    )
    def test_each_run_of_the_demo_replays_the_same(
        self, demo_log: Path, run: int, exit_reason: str, calls: int
    ) -> None:
        """Every recovery branch, the host's mid-stream abort and the repaired typed answer
        replay on the same path to the same end, serving every recorded call."""
        result = replay(demo_log, run).assert_same()
        assert result.ok
        assert result.where == f"run {run} of {demo_log}"
        assert result.state.exit_reason == exit_reason
        assert result.calls == calls
        assert result.transitions == recorded_transitions(demo_log, run)

    @pytest.mark.parametrize(("run", "exit_reason"), [(1, "suspended"), (2, "model_complete")])
    def test_the_demos_nested_run_replays_the_same(
        self, demo_log: Path, run: int, exit_reason: str
    ) -> None:
        """The demo's nested run (a research agent fanning out to two scouts, one asking
        for approval, a writer taking over) replays in both halves: to the scout's
        approval, and from the answer to the writer's Brief, every child on its record."""
        result = replay(demo_log.parent / "nested.jsonl", run, specs=[NESTED_SPEC]).assert_same()
        assert result.state.exit_reason == exit_reason

    def test_a_log_from_before_interrupt_ids_replays_the_same(
        self, demo_log: Path, tmp_path: Path
    ) -> None:
        """A suspended run logged before interrupts had ids (its ``finished.interrupt``
        has no ``id``) replays the same: the rest of the interrupt is compared."""
        lines = (demo_log.parent / "nested.jsonl").read_text().splitlines()
        old = []
        for line in lines:
            data = json.loads(line)
            if data.get("type") == "finished" and data.get("interrupt"):
                assert data["interrupt"].pop("id") == "survey:1"
            old.append(json.dumps(data))
        log = tmp_path / "old.jsonl"
        log.write_text("\n".join(old) + "\n")
        asked = replay(log, 1, specs=[NESTED_SPEC]).assert_same().state.interrupt
        assert asked is not None
        assert asked.id == "survey:1"

    def test_last_is_the_default_run(self, demo_log: Path) -> None:
        """Without ``run``, the log's last run is replayed (the typed one: its answer is
        checked against the recorded JSON Schema and read back as a dict, a log being
        data; the demo's own Report class comes back when the caller gives it)."""
        result = replay(demo_log)
        assert result.where == f"run 3 of {demo_log}"
        assert isinstance(result.state.output, dict)
        assert repr(result) == f"<ReplayResult run 3 of {demo_log}: same, 12 transitions>"
        typed = replay(demo_log, params=lambda p: p.evolve(output_type=Report)).assert_same()
        assert type(typed.state.output) is Report

    async def test_areplay_runs_on_the_running_loop(self, demo_log: Path) -> None:
        result = await areplay(demo_log, 2)
        assert result.ok
        assert result.state.exit_reason == "aborted"


class TestDivergence:
    def test_a_changed_prompt_fails_at_the_first_call(self, demo_log: Path) -> None:
        """A new system prompt changes the first request: the divergence names the call,
        the state, the part that differs (both prompts) and what the run got."""
        result = replay(demo_log, 1, params=lambda p: attrs.evolve(p, system="Be careless."))
        d = result.divergence
        assert d is not None
        assert (d.kind, d.state, d.step) == ("request", "call", 1)
        assert d.request == (
            'system: recorded "You are the innerloop demo agent. Use tools; be brief.", '
            'replayed "Be careless."',
        )
        assert d.recorded.startswith("anthropic:claude-sonnet-4-5-20250929, 1 messages, request ")
        rate_limited = "anthropic HTTP 429 rate_limited: rate_limit_error: rate limit exceeded"
        assert str(d.response) == rate_limited  # the first call was a 429
        with pytest.raises(AssertionError) as raised:
            result.assert_same()
        message = str(raised.value)
        assert message.startswith(f"replay of run 1 of {demo_log} diverged: model call 1 in ")
        assert (
            "state 'call'\n  recorded: anthropic:claude-sonnet-4-5-20250929, 1 messages" in message
        )
        assert "\n  request system: recorded " in message
        assert message.endswith(f"\n  recorded response: failed: {rate_limited}")

    def test_a_changed_model_fails_naming_both_models(self, demo_log: Path) -> None:
        opus = "anthropic:claude-opus-4-5-20251101"
        result = replay(demo_log, 3, params=lambda p: attrs.evolve(p, model=opus))
        d = result.divergence
        assert d is not None
        assert (d.kind, d.state, d.step) == ("request", "call", 1)
        assert d.request == (
            "model: recorded 'claude-sonnet-4-5-20250929', replayed 'claude-opus-4-5-20251101'",
        )
        assert str(d).endswith(
            '\n  recorded response: [end_turn] \'{"city": "Lisbon", "sum_a": 5}\''
        )

    def test_a_lower_turn_limit_parts_at_a_transition(self, demo_log: Path) -> None:
        """Same requests, another limit: the path parts where the turn limit fires."""
        result = replay(demo_log, 1, params=lambda p: attrs.evolve(p, max_turns=2))
        assert result.divergence == Divergence(
            "transition",
            "check",
            result.transitions,
            "check -> assemble",
            "check -> max_turns_exceeded [turn_limit_continuing]",
        )

    def test_a_changed_tool_result_shows_in_the_next_request(self, tmp_path: Path) -> None:
        """A tool that now answers otherwise (its recorded result edited) sends another
        history: the next call's messages differ, naming the new last message."""
        log = record(tmp_path / "run.jsonl")
        lines = log.read_text().splitlines()
        edited = [
            line.replace('"output":"4"', '"output":"5"') if '"tool_executed"' in line else line
            for line in lines
        ]
        log.write_text("\n".join(edited) + "\n")
        d = replay(log, specs=[with_guardrail()]).divergence
        assert d is not None
        assert (d.kind, d.state, d.step) == ("request", "call", 2)
        assert d.request == (
            "messages: recorded 3, replayed 3; the replayed last one: "
            '{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1",'
            '"content":"5"}]}',
        )


# -- custom machines, and logs a replay cannot read ----------------------------------------


async def _add(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(str(args["a"] + args["b"]))


ADD = ToolSpec(
    "add",
    "Add two numbers.",
    {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
    _add,
)
PARAMS = HarnessParams(model="scripted:scripted-model-20250101", tools=[ADD], system="Add.")
SCRIPT = [
    reply("Adding.", tool_call("add", {"a": 2, "b": 2}, id="call_1")),
    reply("2 + 2 = 4."),
]
HOUSE = with_guardrail().renamed("house-guardrail")
"""A custom machine with no import path: a replay needs it passed in."""


def house_harness() -> Harness:
    """The harness HOUSE's runs ran on (for ``--harness``): its params hold the real tool."""
    return Harness(PARAMS, [ScriptedProvider(SCRIPT)], machine=HOUSE)


def record(path: Path, machine: MachineSpec | None = None) -> Path:
    harness = Harness(PARAMS, [ScriptedProvider(SCRIPT)], machine=machine or with_guardrail())
    run = harness.start("What is 2 + 2?")
    with EventLog(path, {"command": "test"}) as log:
        for event in run.iter_sync():
            log.write(event)
    return path


def lines_of(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_text().splitlines():
        yield json.loads(line)


class TestMachines:
    def test_a_custom_machine_is_named_not_imported(self, tmp_path: Path) -> None:
        """The guardrail example's run replays on the guardrail machine, its redact state
        included, when the caller names it; without, the import path the run recorded is
        named as the spec to pass, not imported."""
        log = record(tmp_path / "run.jsonl")
        with pytest.raises(ReplayError) as raised:
            replay(log)
        assert str(raised.value) == (
            f"run 1 of {log} ran on machine 'guardrail' (fingerprint "
            f"{with_guardrail().fingerprint}), which is not at hand; it was made by the spec "
            "at innerloop.examples:with_guardrail (a file is data: that path is not "
            "imported); pass --spec innerloop.examples:with_guardrail naming that spec"
        )
        result = replay(log, specs=["innerloop.examples:with_guardrail"]).assert_same()
        assert result.transitions == recorded_transitions(tmp_path / "run.jsonl", 1)
        assert ("execute", "redact") in [(a, b) for a, b, *_ in _path(tmp_path / "run.jsonl")]

    def test_real_tools_run_the_tools_given(self, tmp_path: Path) -> None:
        """``real_tools=True`` runs the tools the caller gives in ``params``: it adds as it
        did. The function path the log recorded (this module's ``_add``) is only shown:
        without the tools given, the replay is refused naming what to pass."""
        log = record(tmp_path / "run.jsonl", HOUSE)
        tools = [
            t
            for line in lines_of(log)
            if line["type"] == "run_started"
            for t in line["params"]["tools"]
        ]
        assert [t["function"] for t in tools] == ["tests.testing.test_replay:_add"]
        with pytest.raises(ReplayError) as raised:
            replay(log, specs=[HOUSE], real_tools=True)
        assert str(raised.value) == (
            f"cannot replay run 1 of {log} with real tools: the log keeps no code, and tool "
            "'add' is only its record (a recorded function path is never imported); pass "
            "params= holding the real tools (e.g. params=lambda p: p.evolve(tools=[...]))"
        )
        given = replay(log, specs=[HOUSE], params=lambda p: p.evolve(tools=[ADD]), real_tools=True)
        given.assert_same()

    def test_a_machine_without_import_path_needs_specs(self, tmp_path: Path) -> None:
        log = record(tmp_path / "run.jsonl", HOUSE)
        with pytest.raises(ReplayError) as raised:
            replay(log)
        assert str(raised.value) == (
            f"run 1 of {log} ran on machine 'house-guardrail' (fingerprint "
            f"{HOUSE.fingerprint}), which is not at hand; pass --spec MODULE:ATTR naming "
            "that spec"
        )
        assert replay(log, specs=[HOUSE]).ok
        assert replay(log, specs=["tests.testing.test_replay:HOUSE"]).ok

    def test_a_log_from_before_replay_is_refused_naming_the_fix(self, tmp_path: Path) -> None:
        """A log written before runs kept their params and request fingerprints."""
        log = record(tmp_path / "run.jsonl")
        old = []
        for line in lines_of(log):
            if line["type"] == "model_call":
                continue
            line.pop("params", None)
            old.append(json.dumps(line))
        log.write_text("\n".join(old) + "\n")
        with pytest.raises(ReplayError) as raised:
            replay(log)
        assert str(raised.value) == (
            f"cannot replay run 1 of {log}: it was recorded by an innerloop that did not "
            "keep what a replay needs (the run's params and each model call's request "
            "fingerprint); record it again with this innerloop (innerloop run --log, or an "
            "EventLog) and replay that"
        )

    def test_a_log_without_model_calls_says_how_to_record_them(self, tmp_path: Path) -> None:
        """An observer of a quiet ``run()`` sees no model_call events."""
        log = record(tmp_path / "run.jsonl")
        kept = [json.dumps(line) for line in lines_of(log) if line["type"] != "model_call"]
        log.write_text("\n".join(kept) + "\n")
        with pytest.raises(ReplayError) as raised:
            replay(log)
        assert str(raised.value) == (
            f"cannot replay run 1 of {log}: its model calls have no model_call event (a "
            "quiet run() makes none: its events were read by an observer); record the run "
            "from run.events(), iter_sync() or run_sync(on_event=...)"
        )

    def test_the_first_demo_log_is_refused_naming_the_fix(self) -> None:
        """The demo's log as the first innerloop wrote it (kept as a fixture)."""
        log = Path(__file__).parents[1] / "fixtures" / "eventlog" / "demo-v1.jsonl"
        with pytest.raises(ReplayError, match=r"^cannot replay run 1 of .*demo-v1.jsonl: it was"):
            replay(log, 1)

    def test_a_run_cut_off_is_refused(self, tmp_path: Path) -> None:
        log = record(tmp_path / "run.jsonl")
        kept = [json.dumps(line) for line in lines_of(log) if line["type"] != "finished"]
        log.write_text("\n".join(kept) + "\n")
        with pytest.raises(ReplayError, match=r"no finished event \(still going, or cut off\)"):
            replay(log)

    def test_the_events_of_a_log_replay_as_its_file_does(self, tmp_path: Path) -> None:
        """A log's events as dicts (what a durable engine streams) replay too."""
        events = read_event_log(record(tmp_path / "run.jsonl"))
        result = replay(events, specs=[with_guardrail()])
        assert isinstance(result, ReplayResult)
        assert result.ok
        assert result.where == "run 1 of the events given"


def test_a_conversations_later_message_replays_with_its_totals(tmp_path: Path) -> None:
    """The second message of a conversation starts from the first one's turns, tokens and
    history: its replay starts there too."""
    script = [*SCRIPT, reply("3 + 3 = 6.")]
    harness = Harness(PARAMS, [ScriptedProvider(script)], checkpointer=MemoryCheckpointer())
    session = harness.session("c1")
    log = tmp_path / "conversation.jsonl"
    with EventLog(log) as events:
        session.send_sync("What is 2 + 2?", on_event=events.write)
        assert session.send_sync("And 3 + 3?", on_event=events.write).turns == 3
    second = replay(log, 2).assert_same()
    assert second.state.turns == 3
    assert len(second.state.history) == 6
    assert replay(log, 1).ok


def _path(log: Path) -> list[tuple[str, str, str | None]]:
    return [
        (line["source"], line["target"], line["guard"])
        for line in lines_of(log)
        if line["type"] == "transition"
    ]


class TestCommandLine:
    def test_ok_names_the_run(self, demo_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["replay", str(demo_log), "--run", "1"]) == 0
        assert capsys.readouterr().out == (
            f"OK run 1 of {demo_log}: 55 transitions, 14 model calls, exit_reason=model_complete\n"
        )

    def test_a_divergence_exits_1_with_the_request_and_response(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A log whose recorded prompt was edited no longer matches its own requests."""
        log = record(tmp_path / "run.jsonl")
        log.write_text(log.read_text().replace('"system":"Add."', '"system":"Subtract."'))
        assert main(["replay", str(log), "--spec", "innerloop.examples:with_guardrail"]) == 1
        out = capsys.readouterr().out
        assert out.startswith(f"DIVERGED run 1 of {log}: model call 1 in state 'call'\n")
        assert '  request system: recorded "Subtract.", replayed "Subtract."' not in out
        assert "  request system: differs, replayed " in out
        assert '  recorded response: [tool_use] \'Adding.\' add({"a":2,"b":2})\n' in out

    def test_spec_names_the_machine_a_run_ran_on(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        log = record(tmp_path / "run.jsonl", HOUSE)
        assert main(["replay", str(log)]) == 2
        assert "pass --spec MODULE:ATTR naming that spec\n" in capsys.readouterr().err
        spec = "tests.testing.test_replay:HOUSE"
        assert main(["replay", str(log), "--spec", spec]) == 0
        assert capsys.readouterr().out == (
            f"OK run 1 of {log}: 13 transitions, 2 model calls, exit_reason=model_complete\n"
        )

    def test_real_tools_needs_the_harness_that_holds_them(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--real-tools`` runs the tools of ``--harness``: a log keeps no code."""
        log = record(tmp_path / "run.jsonl", HOUSE)
        spec = "tests.testing.test_replay:HOUSE"
        assert main(["replay", str(log), "--spec", spec, "--real-tools"]) == 2
        assert capsys.readouterr().err == (
            "innerloop replay: --real-tools runs the tools you give, and a log keeps no code "
            "(its recorded function paths are never imported); pass --harness MODULE:ATTR "
            "naming the Harness whose tools to run\n"
        )
        harness = "tests.testing.test_replay:house_harness"
        assert main(["replay", str(log), "--harness", harness, "--real-tools"]) == 0

    def test_an_unreplayable_log_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        log = record(tmp_path / "run.jsonl")
        assert main(["replay", str(log), "--run", "2"]) == 2
        assert capsys.readouterr().err == (
            f"innerloop replay: {log} has no run '2': its runs are 1 to 1, or last\n"
        )

    def test_every_run_of_a_log_is_replayed(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --run every run of the log replays, one line each and one over them
        all; one run that differs (its recorded prompt edited) makes the exit 1; --run
        still picks one, the differing one shown whole."""
        log = tmp_path / "runs.jsonl"
        with EventLog(log, {"command": "test"}) as events:
            for _ in range(3):
                harness = Harness(PARAMS, [ScriptedProvider(SCRIPT)], machine=with_guardrail())
                for event in harness.start("What is 2 + 2?").iter_sync():
                    events.write(event)
        lines = log.read_text().splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if '"type":"run_started"' in line]
        assert len(starts) == 3
        lines[starts[1]] = lines[starts[1]].replace('"system":"Add."', '"system":"Subtract."')
        log.write_text("".join(lines))
        spec = "innerloop.examples:with_guardrail"
        n = recorded_transitions(log, 1)
        ok = f"{n} transitions, 2 model calls, exit_reason=model_complete"
        assert main(["replay", str(log), "--spec", spec]) == 1
        assert capsys.readouterr() == (
            f"OK run 1 of {log}: {ok}\n"
            f"DIVERGED run 2 of {log}: model call 1 in state 'call'\n"
            f"OK run 3 of {log}: {ok}\n"
            "3 runs: 2 the same, 1 different; the whole difference: --run 2\n",
            "",
        )
        assert main(["replay", str(log), "--spec", spec, "--run", "2"]) == 1
        out = capsys.readouterr().out
        assert out.startswith(f"DIVERGED run 2 of {log}: model call 1 in state 'call'\n")
        assert "  recorded response: " in out
        assert main(["replay", str(log), "--spec", spec, "--run", "3"]) == 0
        assert capsys.readouterr().out == f"OK run 3 of {log}: {ok}\n"
        log.write_text("".join(lines).replace('"system":"Subtract."', '"system":"Add."'))
        assert main(["replay", str(log), "--spec", spec]) == 0
        assert capsys.readouterr().out.endswith("3 runs: 3 the same, 0 different\n")

    def test_the_help_says_every_run_is_replayed(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit):
            main(["replay", "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "Every run of the log is replayed, unless --run picks one." in out
        assert "replay only this run of the log (1 = first); without it, every run" in out

    def test_a_run_that_cannot_be_replayed_among_several_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Every run is still tried; the one that cannot be replayed says why on stderr."""
        log = tmp_path / "runs.jsonl"
        with EventLog(log, {"command": "test"}) as events:
            for machine in (with_guardrail(), HOUSE):
                harness = Harness(PARAMS, [ScriptedProvider(SCRIPT)], machine=machine)
                for event in harness.start("What is 2 + 2?").iter_sync():
                    events.write(event)
        assert main(["replay", str(log), "--spec", "innerloop.examples:with_guardrail"]) == 2
        out, err = capsys.readouterr()
        assert out.splitlines()[0].startswith(f"OK run 1 of {log}: ")
        assert out.splitlines()[1] == "2 runs: 1 the same, 0 different, 1 could not be replayed"
        assert err.startswith(f"innerloop replay: run 2 of {log} ran on machine 'house-guardrail'")
        assert len(err.splitlines()) == 1


# -- stored runs ------------------------------------------------------------------------------


async def _add_one_more(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(str(args["a"] + args["b"] + 1))


STORED_SCRIPT = [Fault.rate_limited(retry_after=1), *SCRIPT]


def stored(tmp_path: Path) -> tuple[str, str]:
    """A run checkpointed into SQLite at every transition (a 429 first): the store's URL
    and the run's id."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    harness = Harness(
        PARAMS, [ScriptedProvider(STORED_SCRIPT)], checkpointer=url, clock=FakeClock()
    )
    run = harness.start("What is 2 + 2?", run_id="r1")
    assert run.run_sync().exit_reason == "model_complete"
    assert harness.checkpointer is not None
    harness.checkpointer.close()
    return url, "r1"


class TestStoredRuns:
    def test_a_stored_run_replays_from_its_checkpoints(self, tmp_path: Path) -> None:
        """The path, the 429 and its backoff, the answers and the tool result come from
        the checkpoints; the params from the caller (a store keeps none)."""
        url, run_id = stored(tmp_path)
        result = replay(url, run_id, params=PARAMS).assert_same()
        assert result.where == f"run r1 of {url}"
        assert result.calls == 3
        assert replay(url, "last", params=PARAMS).ok

    def test_a_tool_answering_otherwise_parts_at_the_next_call(self, tmp_path: Path) -> None:
        """With real tools that now answer 5, the next call's history differs: the first
        message that differs is named."""
        url, run_id = stored(tmp_path)
        other = attrs.evolve(PARAMS, tools=[attrs.evolve(ADD, handler=_add_one_more)])
        d = replay(url, run_id, params=other, real_tools=True).divergence
        assert d == Divergence(
            "request",
            "call",
            3,
            "3 messages",
            "3 messages (scripted:scripted-model-20250101)",
            (
                'messages[2]: recorded {"role":"user","content":[{"type":"tool_result",'
                '"tool_use_id":"call_1","content":"4","is_error":false}]}, replayed '
                '{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1",'
                '"content":"5","is_error":false}]}',
            ),
            d.response if d is not None else None,
        )
        assert d is not None
        assert str(d).endswith("recorded response: [end_turn] '2 + 2 = 4.'")

    def test_a_stored_run_needs_its_params(self, tmp_path: Path) -> None:
        url, run_id = stored(tmp_path)
        with pytest.raises(ReplayError) as raised:
            replay(url, run_id)
        assert str(raised.value) == (
            f"cannot replay run r1 of {url}: a checkpoint store keeps no params; pass "
            "params=HarnessParams(...), the params the run ran with"
        )


# -- an abort in the middle of a batch -----------------------------------------------------


def _batch_params(slow_started: asyncio.Event) -> HarnessParams[Any]:
    """Two quick tools and a slow one that holds until it is cancelled; one call at a
    time (``max_parallel_tools=1``), so the quick calls have finished when the slow one
    starts (and sets ``slow_started``)."""

    async def quick(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(f"quick {args['n']}")

    async def slow(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        slow_started.set()
        await asyncio.Event().wait()  # cancelled by the abort
        return ToolOutput("never")

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    return HarnessParams(
        model="scripted:scripted-model-20250101",
        system="Work.",
        tools=[
            ToolSpec("quick", "Quick work.", schema, quick),
            ToolSpec("slow", "Slow.", schema, slow),
        ],
        max_parallel_tools=1,
    )


BATCH = [
    reply("Two first.", tool_call("quick", {"n": 0}, id="call_0")),
    reply(
        "Now three.",
        tool_call("quick", {"n": 1}, id="call_1"),
        tool_call("quick", {"n": 2}, id="call_2"),
        tool_call("slow", {"n": 3}, id="call_3"),
    ),
    reply("never asked"),
]


async def _aborted_mid_batch(
    checkpointer: MemoryCheckpointer | None = None,
) -> list[dict[str, Any]]:
    """A run (``r1`` in ``checkpointer``) the host aborts while its second batch runs:
    two calls of it finished, the third is cancelled. Its events as dicts."""
    slow_started = asyncio.Event()
    harness = Harness(
        _batch_params(slow_started), [ScriptedProvider(BATCH)], checkpointer=checkpointer
    )
    run = harness.start("Go.", run_id="r1" if checkpointer is not None else None)

    async def host() -> None:
        await slow_started.wait()
        run.abort("the host said stop")

    aborting = asyncio.ensure_future(host())
    events = [event.to_dict() async for event in run.events()]
    await aborting
    return events


class TestAbortMidBatch:
    async def test_an_abort_during_a_batch_replays_the_same(self) -> None:
        """The calls that had finished keep their results (reported as ``tool_executed``),
        the cancelled one gets the aborted result; the replay serves the abort inside the
        same batch and ends with the same history."""
        events = await _aborted_mid_batch()
        finished = events[-1]
        assert (finished["type"], finished["exit_reason"]) == ("finished", "aborted")
        executed = [e["tool_use_id"] for e in events if e["type"] == "tool_executed"]
        assert executed == ["call_0", "call_1", "call_2"]
        result = (await areplay(events)).assert_same()
        results = [
            (b.tool_use_id, b.content, b.is_error) for b in result.state.history[-1].tool_results
        ]
        assert results == [
            ("call_1", "quick 1", False),
            ("call_2", "quick 2", False),
            ("call_3", ABORTED_TOOL, True),
        ]

    async def test_a_changed_result_of_a_finished_call_parts_at_the_end(self) -> None:
        """The batch's history is the run's last: a finished call's result edited in the
        record parts the replay at the run's end, naming both histories."""
        events = await _aborted_mid_batch()
        edited = [
            {**e, "output": "quick 9"} if e.get("tool_use_id") == "call_2" else e for e in events
        ]
        result = await areplay(edited)
        d = result.divergence
        assert d is not None
        assert (d.kind, d.state) == ("end", "aborted")
        assert d.recorded == f"history={events[-1]['history']!r}"
        assert d.replayed != d.recorded
        with pytest.raises(
            AssertionError,
            match=r"^replay of run 1 of the events given diverged: "
            r"the run's end in state 'aborted'\n  recorded: history=",
        ):
            result.assert_same()

    async def test_a_record_without_the_abort_parts_at_the_cancelled_call(self) -> None:
        """Without its abort event the batch runs whole: the call the abort cancelled has
        no recorded result, and the replay parts there."""
        events = await _aborted_mid_batch()
        result = await areplay([e for e in events if e["type"] != "abort"])
        assert result.divergence == Divergence(
            "tool", "execute", 4, "no such call recorded", 'slow({"n":3}) (id call_3)'
        )

    async def test_a_stored_run_aborted_mid_batch_replays_the_same(self) -> None:
        """A checkpoint store keeps the finished calls' results in the history the abort
        closed: its replay serves them in the same batch too."""
        store = MemoryCheckpointer()
        await _aborted_mid_batch(store)
        params = _batch_params(asyncio.Event())
        result = (await areplay(store, "r1", params=params)).assert_same()
        assert result.state.exit_reason == "aborted"
        assert [b.content for b in result.state.history[-1].tool_results] == [
            "quick 1",
            "quick 2",
            ABORTED_TOOL,
        ]


class TestLongLogs:
    def test_a_log_is_read_as_a_stream(self, tmp_path: Path) -> None:
        """A log of about 4 MB (sixty runs, each streaming a long answer): replaying its
        last run, its first or one by number holds about one run's lines, not the log's
        (tracemalloc's peak stays under a fifth of the file), and gives what reading the
        whole log gives."""
        import tracemalloc

        one = tmp_path / "one.jsonl"
        long = reply(" ".join(f"word{i}" for i in range(4000)))
        params = HarnessParams(model="scripted:model-20250101")
        with EventLog(one) as log:
            for event in Harness(params, [ScriptedProvider([long])]).start("go").iter_sync():
                log.write(event)
        header, *body = one.read_text().splitlines(keepends=True)
        big = tmp_path / "big.jsonl"
        big.write_text(header + "".join(body) * 60)
        size = big.stat().st_size
        assert size > 3_000_000
        for run in ("last", 1, 37):
            tracemalloc.start()
            try:
                result = replay(big, run)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert result.divergence is None
            assert peak < size / 5, (run, peak, size)
        with pytest.raises(ReplayError, match=r"has no run 61: its runs are 1 to 60, or last"):
            replay(big, 61)
