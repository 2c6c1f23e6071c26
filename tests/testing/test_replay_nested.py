"""Replays of nested, suspended and resumed runs: each child's model calls are served from
its own record and checked, its path and end compared; a run that suspended replays to
the same interrupt, and a resumed run replays from the state it went on with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from innerloop import Child, EventLog, Harness, HarnessParams, agent_tool, read_event_log, tool
from innerloop.examples import with_approval
from innerloop.fsm import (
    DEFAULT_SPEC,
    StateSpec,
    child_handler,
    fan_out_handler,
    handoff_handler,
    with_child_state,
)
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.testing import (
    AnthropicServer,
    FakeClock,
    OpenAIServer,
    ScriptedProvider,
    replay,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput

ANTHROPIC_KEY = "sk-ant-api03-replay-0123456789abcdef"
OPENAI_KEY = "sk-proj-replay-0123456789abcdef"
CLAUDE = "anthropic:claude-sonnet-4-5-20250929"
GPT = "openai:gpt-4o-2024-08-06"


@tool
async def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


RESEARCHER = Child("research", HarnessParams(model=GPT, tools=[lookup], system="Research."))
SURVEYOR = Child("survey", HarnessParams(model=GPT, system="Survey one city."))

RESEARCHED = with_child_state(
    with_child_state(
        DEFAULT_SPEC,
        StateSpec("research", doc="a researcher answers first"),
        child_handler(RESEARCHER),
        source="idle",
        target="assemble",
        on_failure="failed",
    ),
    StateSpec("survey", doc="one surveyor per city"),
    fan_out_handler(SURVEYOR, lambda state: ["Lisbon", "Porto", "Faro"], limit=3),
    source="research",
    target="assemble",
    on_failure="failed",
).renamed("replay_researched")
"""A child state (with a tool call), then a fan-out of three, then the parent's model."""

HANDED = with_child_state(
    DEFAULT_SPEC,
    StateSpec("specialist", doc="a specialist takes the conversation over"),
    handoff_handler(Child("specialist", HarnessParams(model=GPT, system="Specialist."))),
    source="check",
    target="model_complete",
    on_failure="failed",
).renamed("replay_handed")


def _clients(a: AnthropicServer, o: OpenAIServer) -> list[Any]:
    """The real SDK clients, on the loopback servers."""
    return [
        AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url),
        OpenAIProvider(OPENAI_KEY, base_url=o.base_url),
    ]


def _record(log: Path, harness: Harness[Any], prompt: str) -> None:
    with EventLog(log) as events:
        for event in harness.start(prompt).iter_sync():
            events.write(event)


@pytest.fixture(scope="module")
def researched_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run on RESEARCHED over the loopback servers: the parent on the Anthropic SDK,
    its children on the OpenAI SDK."""
    log = tmp_path_factory.mktemp("nested") / "run.jsonl"
    child_script = [
        reply("Looking.", tool_call("lookup", {"topic": "tides"}, id="call_l1")),
        reply("Tides are high."),
        reply("Sunny."),
        reply("Cloudy."),
        reply("Windy."),
    ]
    lead = [reply("Done: tides high, weather mixed.")]
    with AnthropicServer(lead) as a, OpenAIServer(child_script) as o:
        params = HarnessParams(model=CLAUDE, system="Lead.")
        harness = Harness(params, _clients(a, o), machine=RESEARCHED, clock=FakeClock())
        _record(log, harness, "Plan a trip.")
    return log


def _lines(log: Path) -> list[dict[str, Any]]:
    return list(read_event_log(log))


def _write(log: Path, lines: list[dict[str, Any]]) -> None:
    header = log.read_text().splitlines()[0]
    log.write_text("\n".join([header, *(json.dumps(x) for x in lines)]) + "\n")


class TestChildren:
    def test_a_child_state_and_a_fan_out_replay_the_same(self, researched_log: Path) -> None:
        """Each child's calls are served from its own record (the fan-out's three
        branches ran concurrently, each its own path), checked by fingerprint, and the
        children's paths and ends compared."""
        result = replay(researched_log, specs=[RESEARCHED]).assert_same()
        assert result.state.exit_reason == "model_complete"
        assert result.calls == 1  # the parent's own; its children served 6 more
        notes = result.state.notes["children"]
        assert notes["research"]["output"] == "Tides are high."
        assert sorted(n["output"] for n in notes["survey"]) == ["Cloudy.", "Sunny.", "Windy."]

    def test_a_childs_changed_request_is_named_with_its_path(
        self, researched_log: Path, tmp_path: Path
    ) -> None:
        """The second call of the ``research`` child recorded another request: the
        divergence names that call, in that child."""
        lines, calls = _lines(researched_log), 0
        for line in lines:
            inner = line.get("event", {})
            if line.get("path") == "research" and inner.get("type") == "model_call":
                calls += 1
                if calls == 2:
                    inner["fingerprint"] = "0" * 64
        log = tmp_path / "edited.jsonl"
        log.write_text(researched_log.read_text())
        _write(log, lines)
        d = replay(log, specs=[RESEARCHED]).divergence
        assert d is not None
        assert (d.kind, d.path, d.state, d.step) == ("request", "research", "call", 2)
        assert str(d).startswith("model call 2 in state 'call' of child 'research'\n")
        assert d.recorded.endswith("request 000000000000")

    def test_a_childs_changed_tool_result_diverges_inside_it(
        self, researched_log: Path, tmp_path: Path
    ) -> None:
        lines = _lines(researched_log)
        for line in lines:
            inner = line.get("event", {})
            if inner.get("type") == "tool_executed":
                inner["output"] = "notes on rain"
        log = tmp_path / "edited.jsonl"
        _write_from(researched_log, log, lines)
        d = replay(log, specs=[RESEARCHED]).divergence
        assert d is not None
        assert (d.kind, d.path, d.step) == ("request", "research", 2)
        assert d.request == (
            "messages: recorded 4, replayed 4; the replayed last one: "
            '{"role":"tool","tool_call_id":"call_l1","content":"notes on rain"}',
        )

    def test_a_fan_out_branch_ending_otherwise_names_its_end(
        self, researched_log: Path, tmp_path: Path
    ) -> None:
        """A branch recorded with other turns parts at that branch's end."""
        lines = _lines(researched_log)
        for line in lines:
            inner = line.get("event", {})
            if line.get("path") == "survey#2" and inner.get("type") == "finished":
                inner["turns"] = 7
        log = tmp_path / "edited.jsonl"
        _write_from(researched_log, log, lines)
        d = replay(log, specs=[RESEARCHED]).divergence
        assert d is not None
        assert (d.kind, d.path, d.state) == ("end", "survey#2", "model_complete")
        assert (d.recorded, d.replayed) == ("turns=7", "turns=1")

    def test_a_child_the_record_lacks_is_a_divergence(
        self, researched_log: Path, tmp_path: Path
    ) -> None:
        lines = [x for x in _lines(researched_log) if x.get("path") != "survey#3"]
        log = tmp_path / "edited.jsonl"
        _write_from(researched_log, log, lines)
        d = replay(log, specs=[RESEARCHED]).divergence
        assert d is not None
        assert (d.kind, d.path, d.state) == ("child", "", "survey")
        assert (d.recorded, d.replayed) == (
            "no run of child 'survey#3' was recorded",
            "child 'survey#3' started (run 1)",
        )
        assert str(d).startswith(f"child run {d.step} in state 'survey'\n")

    def test_a_handoff_replays_the_same(self, tmp_path: Path) -> None:
        log = tmp_path / "run.jsonl"
        specialist = [reply("The specialist's answer.")]
        with AnthropicServer([reply("Let me hand you over.")]) as a, OpenAIServer(specialist) as o:
            harness = Harness(
                HarnessParams(model=CLAUDE), _clients(a, o), machine=HANDED, clock=FakeClock()
            )
            _record(log, harness, "Help.")
        result = replay(log, specs=[HANDED]).assert_same()
        assert result.state.notes["children"]["specialist"]["output"] == "The specialist's answer."


def _write_from(source: Path, log: Path, lines: list[dict[str, Any]]) -> None:
    log.write_text(source.read_text())
    _write(log, lines)


FORECASTER = Child("forecaster", HarnessParams(model=GPT, system="Forecast."))


class TestAgentTool:
    @pytest.fixture
    def agent_log(self, tmp_path: Path) -> tuple[Path, HarnessParams[Any]]:
        params = HarnessParams(
            model=CLAUDE, tools=[agent_tool(FORECASTER, "Ask the forecaster.")], system="Lead."
        )
        script = [
            reply(tool_call("forecaster", {"task": "Lisbon?"}, id="toolu_01")),
            reply("Sunny in Lisbon."),
        ]
        log = tmp_path / "run.jsonl"
        with AnthropicServer(script) as a, OpenAIServer([reply("Sunny, 24 C.")]) as o:
            _record(log, Harness(params, _clients(a, o), clock=FakeClock()), "Weather?")
        return log, params

    def test_with_its_params_the_agents_child_replays(
        self, agent_log: tuple[Path, HarnessParams[Any]], tmp_path: Path
    ) -> None:
        """Given the params (an agent tool is code a log cannot rebuild), the agent tool
        runs its child in the replay, on the child's record: a changed child request is
        a divergence in ``forecaster[toolu_01]``."""
        log, params = agent_log
        assert replay(log, params=params).assert_same().state.exit_reason == "model_complete"
        lines = _lines(log)
        for line in lines:
            if line.get("event", {}).get("type") == "model_call":
                line["event"]["fingerprint"] = "f" * 64
        edited = tmp_path / "edited.jsonl"
        _write_from(log, edited, lines)
        d = replay(edited, params=params).divergence
        assert d is not None
        assert (d.kind, d.path, d.step) == ("request", "forecaster[toolu_01]", 1)

    def test_from_the_log_alone_its_recorded_result_serves(
        self, agent_log: tuple[Path, HarnessParams[Any]]
    ) -> None:
        """Without the params, the agent call's recorded result is served and its child
        (which then does not run) is no divergence."""
        log, _ = agent_log
        result = replay(log).assert_same()
        assert result.state.history[2].tool_results[0].content == "Sunny, 24 C."


# -- suspended and resumed runs ---------------------------------------------------------


async def _ask(args: Any, ctx: ToolContext) -> ToolOutput:
    """Ask the user (the run suspends)."""
    ctx.interrupt({"question": args["q"]})


def _asking_params() -> HarnessParams[Any]:
    from innerloop import ToolSpec

    ask = ToolSpec(
        "ask_user",
        "Ask the user.",
        {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        _ask,
    )
    return HarnessParams(model=CLAUDE, tools=[ask, lookup], system="Ask when unsure.")


def _write_run(events: EventLog, run: Any) -> Any:
    for event in run.iter_sync():
        events.write(event)
    return run.state


class TestSuspended:
    def test_a_suspended_run_and_its_resume_replay(self, tmp_path: Path) -> None:
        """A run whose tool asks (beside a call that finished) replays to the same
        interrupt; the resumed run replays from the state it went on with, the answer
        included, to the same end."""
        log = tmp_path / "run.jsonl"
        script = [
            reply(
                tool_call("lookup", {"topic": "flights"}, id="toolu_1"),
                tool_call("ask_user", {"q": "Which day?"}, id="toolu_2"),
            ),
            reply("Booked for Monday."),
        ]
        params = _asking_params()
        with AnthropicServer(script) as a, OpenAIServer([]) as o:
            harness = Harness(params, _clients(a, o), clock=FakeClock())
            with EventLog(log) as events:
                first = _write_run(events, harness.start("Book a flight."))
                assert first.exit_reason == "suspended"
                second = _write_run(events, harness.resume(first, "Monday"))
        assert second.exit_reason == "model_complete"
        suspended = replay(log, 1, params=params).assert_same()
        assert suspended.state.exit_reason == "suspended"
        asked = suspended.state.interrupt
        assert asked is not None
        assert asked.payload == {
            "questions": [
                {
                    "tool_use_id": "toolu_2",
                    "tool": "ask_user",
                    "question": {"question": "Which day?"},
                }
            ]
        }
        assert [b.content for b in asked.done] == ["notes on flights"]
        resumed = replay(log, 2, params=params).assert_same()
        assert resumed.state.exit_reason == "model_complete"
        assert [r.content for r in resumed.state.history[2].tool_results] == [
            "notes on flights",
            "Monday",
        ]

    def test_another_answer_in_the_record_diverges(self, tmp_path: Path) -> None:
        """The resumed run's record keeps its answer: edited, the next request differs."""
        log = tmp_path / "run.jsonl"
        script = [reply(tool_call("ask_user", {"q": "Day?"}, id="toolu_1")), reply("Monday.")]
        params = _asking_params()
        harness = Harness(params, [ScriptedProvider(script, name="anthropic")], clock=FakeClock())
        with EventLog(log) as events:
            first = _write_run(events, harness.start("Book."))
            _write_run(events, harness.resume(first, "Monday"))
        lines = _lines(log)
        started = [x for x in lines if x["type"] == "run_started"][1]
        assert started["resumed"]["interrupt"]["answer"] == "Monday"
        started["resumed"]["interrupt"]["answer"] = "Tuesday"
        _write(log, lines)
        d = replay(log, 2, params=params).divergence
        assert d is not None
        assert (d.kind, d.step) == ("request", 1)
        assert d.request[0].endswith('"tool_use_id":"toolu_1","content":"Tuesday"}]}')

    def test_an_approval_asked_in_a_child_replays_both_halves(self, tmp_path: Path) -> None:
        """A child on the approval machine asks; the parent suspends on its question and
        is resumed with the answer, which goes to the child: both runs replay."""
        log = tmp_path / "run.jsonl"
        kid_script = [
            reply(tool_call("lookup", {"topic": "build.log"}, id="k1")),
            reply("Looked it up."),
        ]
        with AnthropicServer([reply("Done.")]) as a, OpenAIServer(kid_script) as o:
            harness = Harness(
                HarnessParams(model=CLAUDE), _clients(a, o), machine=APPROVED, clock=FakeClock()
            )
            with EventLog(log) as events:
                first = _write_run(events, harness.start("Look build.log up."))
                assert first.exit_reason == "suspended"
                second = _write_run(events, harness.resume(first, True))
        assert second.exit_reason == "model_complete"
        suspended = replay(log, 1, specs=[APPROVED]).assert_same()
        assert suspended.state.interrupt is not None
        assert suspended.state.interrupt.kind == "approval"
        resumed = replay(log, 2, specs=[APPROVED]).assert_same()
        assert resumed.state.notes["children"]["checker"]["output"] == "Looked it up."


APPROVED = with_child_state(
    DEFAULT_SPEC,
    StateSpec("vet", doc="a checker whose calls a person approves"),
    child_handler(
        Child("checker", HarnessParams(model=GPT, tools=[lookup]), machine=with_approval())
    ),
    source="idle",
    target="assemble",
    on_failure="failed",
).renamed("replay_approved")


def test_the_request_digests_are_those_of_hashing_each_apart() -> None:
    """One serialization of the body serves the whole request's fingerprint and each
    part's hash: the same digests as the recorded logs' (each hashed apart)."""
    import hashlib

    from innerloop.lowlevel import request_fingerprint
    from innerloop.providers._fingerprint import request_digests
    from innerloop.providers._normalize import WireRequest

    def apart(data: Any) -> str:
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    payload = {
        "model": "m",
        "messages": [{"role": "user", "content": 'é \n "q"'}],
        "system": None,
        "max_tokens": 1.5,
        "a b": [True, {"z": 1, "a": 2}],
    }
    request = WireRequest("anthropic", "m", payload)
    fingerprint, parts = request_digests(request)
    assert fingerprint == apart({"dialect": "anthropic", "payload": payload})
    assert fingerprint == request_fingerprint(request)
    assert parts == {k: apart(v)[:12] for k, v in payload.items()}
