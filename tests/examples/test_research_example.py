"""The research example (innerloop.examples.research): its machine, the scouts' approval
of paid calls, and the demo's nested run over the real SDKs and the loopback servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, HarnessState, ToolResultBlock, read_event_log
from innerloop._demo import BRIEF as BRIEF_TEXT
from innerloop._demo import NESTED_SPEC, nested_run
from innerloop.examples.research import SCOUT_TOOLS, Brief, scout_machine
from innerloop.fsm import Interrupt
from innerloop.testing import ScriptedProvider, assert_valid_history, reply, tool_call

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
    assert tree.tree() == [
        "  research: idle -> survey -> suspended | resumed: survey -> "
        f"{loop} -> check -> write -> model_complete (90 tokens, $0.000198)",
        f"    scout#1: idle -> {loop} -> {scouted} -> {loop} -> check -> model_complete "
        "(30 tokens, $0.000009)",
        f"    scout#2: idle -> {loop} -> approve -> suspended | resumed: {scouted} -> {loop} "
        "-> check -> model_complete (30 tokens, $0.000009)",
        f"    writer: idle -> {loop} -> check -> model_complete (15 tokens, $0.000075)",
    ]
