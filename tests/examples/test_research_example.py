"""The research example (innerloop.examples.research): its machine, the scouts' approval
of paid calls, and the demo's nested run over the real SDKs and the loopback servers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from innerloop import Harness, HarnessParams, HarnessState, RunTree, ToolResultBlock, read_event_log
from innerloop._demo import BRIEF as BRIEF_TEXT
from innerloop._demo import NESTED_SPEC, RESEARCH_TASK, nested_run, nested_scenario
from innerloop.examples import example_specs
from innerloop.examples.approval import DENIED
from innerloop.examples.research import (
    QUESTIONS,
    SCOUT_TOOLS,
    WRITER_MODEL,
    Brief,
    research_machine,
    scout_machine,
    writer,
)
from innerloop.fsm import Interrupt, MachineSpec
from innerloop.providers import AnthropicProvider, OpenAIProvider, WireRequest
from innerloop.testing import (
    AnthropicServer,
    FakeProvider,
    Fault,
    OpenAIServer,
    Reply,
    ScriptedProvider,
    TransitionCoverage,
    assert_valid_history,
    reply,
    tool_call,
)

SEARCH_RESULT = "IEA 2024: heat pump sales in Europe fell 21% in 2024 after a record 2022."
REPORT = "EHPA 2025: 2.3 million units sold in 2024; Poland -40%."


def scout_run(name: str, args: dict[str, str]) -> tuple[Harness, Any, HarnessState]:
    """A scout (its machine and tools) whose model calls ``name`` once, then answers."""
    script = [reply(tool_call(name, args, id="t1")), reply("found it")]
    params = HarnessParams(model="scripted:m", tools=SCOUT_TOOLS)
    harness = Harness(params, [ScriptedProvider(script)], machine=scout_machine())
    run = harness.start("look it up")
    return harness, run, run.run_sync()


class TestScoutMachine:
    def test_a_free_call_runs_without_asking(self) -> None:
        """A turn that calls no paid tool goes approve -> execute: the search runs."""
        _, _, state = scout_run("web_search", {"query": "heat pumps"})
        assert state.exit_reason == "model_complete"
        assert state.history[2].content == (ToolResultBlock("t1", SEARCH_RESULT, False),)

    def test_a_paid_call_asks_the_host(self) -> None:
        """A turn that calls buy_report suspends with the approval machine's interrupt;
        the host's True runs it."""
        harness, run, state = scout_run("buy_report", {"title": "EHPA market report 2025"})
        assert (state.exit_reason, state.interrupt) == (
            "suspended",
            Interrupt(
                "approval",
                {
                    "calls": [
                        {
                            "id": "t1",
                            "name": "buy_report",
                            "input": {"title": "EHPA market report 2025"},
                        }
                    ]
                },
                "approve",
                ("t1",),
                id="approve:1",
            ),
        )
        state = harness.resume(run, True).run_sync()
        assert state.exit_reason == "model_complete"
        assert state.history[2].content == (ToolResultBlock("t1", REPORT, False),)


def test_research_machine_structure() -> None:
    """survey sits on idle -> assemble, write on check -> model_complete, each leaving by
    its declared child edges; nothing else of the default machine changed."""
    spec = NESTED_SPEC
    assert spec.name == "research"
    assert [str(t) for t in spec.transitions_from("survey")] == [
        "survey -> abort [abort_requested]",
        "survey -> suspended [interrupted]",
        "survey -> assemble [child_succeeded]",
        "survey -> failed",
    ]
    assert [str(t) for t in spec.transitions_from("write")] == [
        "write -> abort [abort_requested]",
        "write -> suspended [interrupted]",
        "write -> model_complete [child_succeeded]",
        "write -> failed",
    ]
    # the example machine (default scouts and writer) is the demo's, edge for edge
    assert example_specs()["research"].transitions == spec.transitions


def routes(events: list[dict[str, Any]]) -> dict[str, list[list[str]]]:
    """Per run path (the top run is 'research'), the states of each of its runs."""
    out: dict[str, list[list[str]]] = {}
    for line in events:
        path, event = "research", line
        if line["type"] == "child_event":
            path, event = line["path"], line["event"]
        if event["type"] == "run_started":
            out.setdefault(path, []).append([event["state"]])
        elif event["type"] == "transition":
            out[path][-1].append(event["target"])
    return out


LOOP = ["assemble", "normalize", "call", "stream"]
BRIEF = Brief(
    title="European heat pumps in 2024",
    findings=["Sales fell 21% in 2024.", "Poland fell most: -40%."],
    sources=["IEA 2024", "EHPA market report 2025"],
)


def test_the_demo_nested_run(tmp_path: Path) -> None:
    """The demo's nested run, over the real SDKs: the scouts run side by side, scout#2's
    paid call suspends the whole run, the host's True lands in scout#2, and the writer's
    typed Brief ends the run; the log keeps each run of the tree on its own path."""
    log = tmp_path / "nested.jsonl"
    state, tree, asked = nested_run(log)
    assert (state.exit_reason, state.output) == ("model_complete", BRIEF)
    assert asked.kind == "approval"
    assert asked.payload == {
        "calls": [
            {"id": "call_buy", "name": "buy_report", "input": {"title": "EHPA market report 2025"}}
        ]
    }
    assert (asked.path, asked.state) == ("scout#2", "survey")
    assert routes(read_event_log(log)) == {
        "research": [
            ["idle", "survey", "suspended"],
            ["survey", *LOOP, "check", "write", "model_complete"],
        ],
        "scout#1": [
            ["idle", *LOOP, "approve", "execute", "check", *LOOP, "check", "model_complete"]
        ],
        "scout#2": [
            ["idle", *LOOP, "approve", "suspended"],
            ["approve", "execute", "check", *LOOP, "check", "model_complete"],
        ],
        "writer": [["idle", *LOOP, "check", "model_complete"]],
    }
    assert [(m.role, m.text) for m in state.history] == [
        (
            "user",
            "How did European heat-pump sales do in 2024? Write me a brief."
            "[scout#1] Sales fell 21% in 2024 (IEA 2024).\n"
            "[scout#2] Poland fell most: -40% (EHPA market report 2025).",
        ),
        (
            "assistant",
            "Notes: heat-pump sales in Europe fell 21% in 2024 (IEA); Poland fell most, "
            "-40% (EHPA).",
        ),
        ("user", "You take this conversation over from here; answer the user."),
        ("assistant", BRIEF_TEXT),
    ]
    assert_valid_history(state.history)
    # every answer of the tree (1 research, 2 + 2 scouts, 1 writer) is 10 + 5 tokens; the
    # research agent's totals count its children's
    assert state.usage.total_tokens == 6 * 15
    assert state.cost_usd == pytest.approx(0.000198)
    loop, scouted = " -> ".join(LOOP), "approve -> execute -> check"
    assert tree.format(name="research").splitlines() == [
        "research [research]: model_complete, 6 turns, 90 tokens, $0.000198",
        "  states: idle -> survey -> suspended",
        f"  resumed: survey -> {loop} -> check -> write -> model_complete",
        "  scout#1 [scout]: model_complete, 2 turns, 30 tokens, $0.000009",
        f"    states: idle -> {loop} -> {scouted} ->",
        f"      {loop} -> check -> model_complete",
        "  scout#2 [scout]: model_complete, 2 turns, 30 tokens, $0.000009",
        f"    states: idle -> {loop} -> approve -> suspended",
        f"    resumed: {scouted} -> {loop} -> check ->",
        "      model_complete",
        "  writer [innerloop]: model_complete, 1 turn, 15 tokens, $0.000075",
        f"    states: idle -> {loop} -> check -> model_complete",
    ]
    assert RunTree.from_log(log, run=1) == tree  # the log holds the same tree


# The example machine (example_specs()["research"]: research_machine() with its default
# scouts, writer and questions), driven by fakes: the research agent's model is scripted,
# and the scouts and the writer (their children on the Harness's "openai" provider) are
# answered by what each request asks, so the scouts running side by side answer the same
# whatever their order.

RESEARCH = example_specs()["research"]
SEARCH = reply(tool_call("web_search", {"query": "heat pumps"}, id="t_search"))
BUY_INPUT = {"title": "EHPA market report 2025"}
BUY = reply(tool_call("buy_report", BUY_INPUT, id="t_buy"))
NOTES = "Notes: sales fell 21%; Poland fell most."


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(b.get("content", b.get("text", ""))) for b in content)


def children_answer(
    faults: Mapping[str, Fault] | None = None,
    on_ask: Callable[[str], None] | None = None,
    writer_first: Reply | None = None,
) -> FakeProvider:
    """The "openai" provider of the scouts and the writer: a scout calls web_search for
    the first question and buy_report for the second, then answers with what its tool
    said; the writer answers the Brief (after ``writer_first``, when given). ``faults``
    fails the first request of a scout (by its question) or of the writer
    (``"writer"``); ``on_ask(who)`` is called as the first request of ``who`` arrives
    (to abort the run there, deterministically)."""
    faults = faults or {}

    def answer(request: WireRequest) -> Reply | Fault:
        payload = request.payload
        messages = payload["messages"]
        writing = "final brief" in _text(payload.get("system", ""))
        who = "writer" if writing else _text(messages[0]["content"])
        if on_ask is not None and len(messages) == (3 if writing else 1):
            on_ask(who)
        if who in faults and len(messages) == (3 if writing else 1):
            return faults[who]
        if writing:
            first = writer_first is not None and len(messages) == 3
            return writer_first if first and writer_first is not None else reply(BRIEF_TEXT)
        if messages[-1]["role"] == "user" and len(messages) > 1:  # the tool's result
            return reply(f"found: {_text(messages[-1]['content'])}")
        return SEARCH if who == QUESTIONS[0] else BUY

    return FakeProvider(answer, name="openai")


def research_harness(
    coverage: TransitionCoverage,
    children: FakeProvider,
    spec: MachineSpec = RESEARCH,
    lead: Sequence[Reply | Fault] = (reply(NOTES),),
) -> Harness:
    params = HarnessParams(model="scripted:lead")
    providers = [ScriptedProvider(lead), children]
    return Harness(params, providers, machine=spec, observers=[coverage])


def play(run: Any, events: list[dict[str, Any]]) -> HarnessState:
    """Drive ``run`` to its end, adding its events (its children's too) to ``events``
    as they are logged."""

    async def drive() -> None:
        events.extend([event.to_dict() async for event in run.events()])

    asyncio.run(drive())
    return run.state  # type: ignore[no-any-return]


def aborting_at(who: str, runs: list[Any]) -> Callable[[str], None]:
    """``on_ask`` for :func:`children_answer`: aborts the run (the last of ``runs``) as
    the first request of ``who`` arrives."""

    def on_ask(asking: str) -> None:
        if asking == who:
            runs[-1].abort("the host stops")

    return on_ask


def research_run(
    coverage: TransitionCoverage,
    children: FakeProvider,
    answer: Any = True,
    runs: list[Any] | None = None,
) -> tuple[HarnessState, dict[str, list[list[str]]]]:
    """Run the research machine on ``"task"``; when it suspends (scout#2's paid call),
    resume it with ``answer``. The final state and each run's states by path; ``runs``
    gets the run, then the resumed run, as each starts (see :func:`aborting_at`)."""
    harness = research_harness(coverage, children)
    events: list[dict[str, Any]] = []
    runs = runs if runs is not None else []
    runs.append(harness.start("task"))
    state = play(runs[-1], events)
    if state.exit_reason == "suspended":
        runs.append(harness.resume(runs[-1], answer))
        state = play(runs[-1], events)
    return state, routes(events)


SCOUT_1 = ["idle", *LOOP, "approve", "execute", "check", *LOOP, "check", "model_complete"]
SCOUT_2_ASKS = ["idle", *LOOP, "approve", "suspended"]
SCOUT_2_GOES_ON = ["approve", "execute", "check", *LOOP, "check", "model_complete"]
FOUND = f"[scout#1] found: {SEARCH_RESULT}\n[scout#2] found: {REPORT}"


class TestExampleMachine:
    """example_specs()["research"] (research_machine() with its defaults), every edge it
    adds to the default machine, and its scouts' approve edges, driven by fakes."""

    def test_the_survey_asks_and_the_writer_answers(
        self, transition_coverage: TransitionCoverage
    ) -> None:
        """idle -> survey; scout#2's paid call: approve -> suspended, survey -> suspended
        [interrupted]; resumed with True: approve -> execute, survey -> assemble
        [child_succeeded]; check -> write -> model_complete [child_succeeded]."""
        state, runs = research_run(transition_coverage, children_answer())
        assert (state.exit_reason, state.output) == ("model_complete", BRIEF)
        assert runs == {
            "research": [
                ["idle", "survey", "suspended"],
                ["survey", *LOOP, "check", "write", "model_complete"],
            ],
            "scout#1": [SCOUT_1],
            "scout#2": [SCOUT_2_ASKS, SCOUT_2_GOES_ON],
            "writer": [["idle", *LOOP, "check", "model_complete"]],
        }
        assert [(m.role, m.text) for m in state.history] == [
            ("user", f"task{FOUND}"),
            ("assistant", NOTES),
            ("user", "You take this conversation over from here; answer the user."),
            ("assistant", BRIEF_TEXT),
        ]
        assert_valid_history(state.history)

    def test_a_denied_paid_call_is_answered_denied(
        self, transition_coverage: TransitionCoverage
    ) -> None:
        """Resumed with False, scout#2's buy_report never runs (approve -> execute gives
        it the DENIED result); the scout answers with that and the run goes on."""
        state, runs = research_run(transition_coverage, children_answer(), answer=False)
        assert state.exit_reason == "model_complete"
        assert runs["scout#2"] == [SCOUT_2_ASKS, SCOUT_2_GOES_ON]
        assert state.history[0].text == f"task[scout#1] found: {SEARCH_RESULT}\n" + (
            f"[scout#2] found: {DENIED}"
        )
        assert [c["output"] for c in state.notes["children"]["scout"]] == [
            f"found: {SEARCH_RESULT}",
            f"found: {DENIED}",
        ]

    def test_a_failing_scout_fails_the_survey(
        self, transition_coverage: TransitionCoverage
    ) -> None:
        """survey -> failed: scout#2's provider refuses its request (it ends in failed,
        scout#1 runs to its end); the research agent never calls its model."""
        fault = Fault.fatal(400, "bad scout request")
        state, runs = research_run(transition_coverage, children_answer({QUESTIONS[1]: fault}))
        assert state.exit_reason == "failed"
        assert runs == {
            "research": [["idle", "survey", "failed"]],
            "scout#1": [SCOUT_1],
            "scout#2": [["idle", *LOOP[:3], "abort", "failed"]],
        }
        assert [c["exit_reason"] for c in state.notes["children"]["scout"]] == [
            "model_complete",
            "failed",
        ]
        assert [m.text for m in state.history] == ["task"]

    def test_an_abort_during_the_survey_aborts_every_scout(
        self, transition_coverage: TransitionCoverage
    ) -> None:
        """survey -> abort [abort_requested]: the host aborts as scout#1 calls its model;
        both scouts end in aborted (their events all reach the parent's stream), then the
        research agent, with its history as it was."""
        runs: list[Any] = []
        children = children_answer(on_ask=aborting_at(QUESTIONS[0], runs))
        state, found = research_run(transition_coverage, children, runs=runs)
        assert (state.exit_reason, state.abort and state.abort.reason) == (
            "aborted",
            "the host stops",
        )
        assert found == {
            "research": [["idle", "survey", "abort", "aborted"]],
            "scout#1": [["idle", *LOOP[:3], "abort", "aborted"]],
            "scout#2": [["idle", "assemble", "abort", "aborted"]],
        }
        assert [(c["exit_reason"], c["turns"]) for c in state.notes["children"]["scout"]] == [
            ("aborted", 0),
            ("aborted", 0),
        ]
        assert [m.text for m in state.history] == ["task"]
        assert_valid_history(state.history)

    def test_a_failing_writer_fails_the_run(self, transition_coverage: TransitionCoverage) -> None:
        """write -> failed: the writer's provider refuses its request; the research
        agent's notes stay its last answer and no Brief is set."""
        fault = Fault.fatal(400, "bad writer request")
        state, runs = research_run(transition_coverage, children_answer({"writer": fault}))
        assert (state.exit_reason, state.output) == ("failed", None)
        assert runs["research"][-1] == ["survey", *LOOP, "check", "write", "failed"]
        assert runs["writer"] == [["idle", *LOOP[:3], "abort", "failed"]]
        assert state.notes["children"]["writer"]["exit_reason"] == "failed"
        assert_valid_history(state.history)

    def test_an_abort_during_the_handoff_aborts_the_writer(
        self, transition_coverage: TransitionCoverage
    ) -> None:
        """write -> abort [abort_requested]: the host aborts as the writer calls its
        model; the writer ends in aborted, then the research agent."""
        runs: list[Any] = []
        children = children_answer(on_ask=aborting_at("writer", runs))
        state, found = research_run(transition_coverage, children, runs=runs)
        assert state.exit_reason == "aborted"
        assert found["research"][-1] == ["survey", *LOOP, "check", "write", "abort", "aborted"]
        assert found["writer"] == [["idle", *LOOP[:3], "abort", "aborted"]]
        assert state.notes["children"]["writer"]["exit_reason"] == "aborted"
        assert_valid_history(state.history)

    def test_a_writer_that_asks_suspends_the_run(
        self, transition_coverage: TransitionCoverage
    ) -> None:
        """write -> suspended [interrupted]: a writer on the scout's machine with the
        scouts' tools asks before buying a report; the whole run suspends on its
        question, and the host's True lands in the writer, whose Brief ends the run."""
        plain = writer(WRITER_MODEL)
        tooled = attrs.evolve(plain.params, tools=SCOUT_TOOLS)
        asking = attrs.evolve(plain, params=tooled, machine=scout_machine())
        spec = research_machine(writer=asking)
        harness = research_harness(transition_coverage, children_answer(writer_first=BUY), spec)
        events: list[dict[str, Any]] = []
        run = harness.start("task")
        play(run, events)  # the survey asks first (scout#2's paid call)
        run = harness.resume(run, True)
        state = play(run, events)
        assert state.exit_reason == "suspended"
        assert state.interrupt is not None
        assert (state.interrupt.path, state.interrupt.payload) == (
            "writer",
            {"calls": [{"id": "t_buy", "name": "buy_report", "input": BUY_INPUT}]},
        )
        state = play(harness.resume(run, True), events)
        assert (state.exit_reason, state.output) == ("model_complete", BRIEF)
        found = routes(events)
        assert found["research"] == [
            ["idle", "survey", "suspended"],
            ["survey", *LOOP, "check", "write", "suspended"],
            ["write", "model_complete"],
        ]
        assert found["writer"] == [
            ["idle", *LOOP, "approve", "suspended"],
            ["approve", "execute", "check", *LOOP, "check", "model_complete"],
        ]
        assert state.history[-2].content == (ToolResultBlock("t_buy", REPORT, False),)


def test_a_failing_scout_over_the_real_sdks(transition_coverage: TransitionCoverage) -> None:
    """The example machine over the real SDK clients and the loopback servers: the
    research agent on Anthropic, its scouts on OpenAI (the Harness's providers); the
    OpenAI server refuses scout#2's request with a 400, so scout#2 ends in failed,
    scout#1 runs to its end (its free call needs no approval) and the survey takes
    ``survey -> failed`` without calling the research agent's model."""
    _, scouts, _ = nested_scenario()

    def answer(body: Any) -> Reply | Fault:
        if body["messages"][1]["content"] == QUESTIONS[1]:
            return Fault.fatal(400, "bad scout request")
        return scouts(body)  # type: ignore[no-any-return]

    with AnthropicServer([]) as lead, OpenAIServer(respond=answer) as kids:
        providers = [
            AnthropicProvider(api_key="test-key", base_url=lead.base_url),
            OpenAIProvider(api_key="test-key", base_url=kids.base_url),
        ]
        params = HarnessParams(model="anthropic:claude-sonnet-4-5-20250929")
        harness = Harness(params, providers, machine=RESEARCH, observers=[transition_coverage])
        events: list[dict[str, Any]] = []
        state = play(harness.start(RESEARCH_TASK), events)
        for provider in providers:
            asyncio.run(provider.aclose())
        assert (len(lead.requests), len(kids.requests)) == (0, 3)
    assert state.exit_reason == "failed"
    assert routes(events) == {
        "research": [["idle", "survey", "failed"]],
        "scout#1": [
            ["idle", *LOOP, "approve", "execute", "check", *LOOP, "check", "model_complete"]
        ],
        "scout#2": [["idle", *LOOP[:3], "abort", "failed"]],
    }
    assert [(c["exit_reason"], c["output"]) for c in state.notes["children"]["scout"]] == [
        ("model_complete", "Sales fell 21% in 2024 (IEA 2024)."),
        ("failed", ""),
    ]
