"""The tree of runs (``RunTree``): the same tree from a live run, a checkpoint store and an
event log, on the default machine and on custom ones, with grandchildren, agent tools,
suspensions and conversations; stores and logs read as data; the printer's lines."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

from innerloop import (
    DEFAULT_SPEC,
    Child,
    EventLog,
    Harness,
    HarnessParams,
    MachineSpec,
    RunTree,
    StateSpec,
    agent_tool,
    tool,
)
from innerloop.events import Event
from innerloop.examples import with_approval
from innerloop.fsm import Run, child_handler, fan_out_handler, with_child_state
from innerloop.testing import FakeClock, FakeProvider, ScriptedProvider, reply, tool_call

LOOP = ("assemble", "normalize", "call", "stream")


@tool
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def _scripted(name: str, *answers: Any) -> dict[str, ScriptedProvider]:
    return {name: ScriptedProvider(list(answers), name=name)}


def _custom_spec() -> MachineSpec:
    """A custom machine: ``sweep`` fans out to two different children; ``cleaner`` runs on
    the approval machine; ``inspector`` runs a machine with a child state of its own
    (``probe``, a grandchild)."""
    probe = Child("probe", HarnessParams(model="p:m"), providers=_scripted("p", reply("ok")))
    inspector_machine = with_child_state(
        DEFAULT_SPEC,
        StateSpec("probing"),
        child_handler(probe),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("inspect")
    inspector = Child(
        "inspector",
        HarnessParams(model="i:m"),
        machine=inspector_machine,
        providers=_scripted("i", reply("Disk is fine.")),
    )
    cleaner = Child(
        "cleaner",
        HarnessParams(model="c:m", tools=[delete_file]),
        machine=with_approval(),
        providers=_scripted(
            "c", reply(tool_call("delete_file", {"path": "old.log"}, id="k1")), reply("Deleted.")
        ),
    )
    return with_child_state(
        DEFAULT_SPEC,
        StateSpec("sweep"),
        fan_out_handler([inspector, cleaner]),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("sweep")


def _drive(run: Run[Any], log: EventLog) -> None:
    for event in run.iter_sync():
        log.write(event)


def _suspended_then_answered(tmp_path: Path, store: str) -> tuple[Harness, Run[Any], Path]:
    harness = Harness(
        HarnessParams(model="scripted:m"),
        [ScriptedProvider([reply("All done.")])],
        machine=_custom_spec(),
        checkpointer=store,
        clock=FakeClock(),
    )
    log = tmp_path / "run.jsonl"
    with EventLog(log) as events:
        run = harness.start("Tidy the disk", run_id="tidy")
        _drive(run, events)
        run = harness.resume(run, answer=True)
        _drive(run, events)
    return harness, run, log


def _stored(harness: Harness, run_id: str) -> RunTree:
    assert harness.checkpointer is not None
    return RunTree.from_store(harness.checkpointer, run_id)


def _one_tree(harness: Harness, prompt: str, run_id: str, tmp_path: Path) -> RunTree:
    """Run ``prompt`` to its end (or its suspension), logged and stored: its tree, the
    same from the live run, the store and the log."""
    log = tmp_path / "run.jsonl"
    seen: list[Event] = []
    with EventLog(log) as events:
        run = harness.start(prompt, run_id=run_id)
        for event in run.iter_sync():
            events.write(event)
            seen.append(event)
    tree = RunTree.of(run)
    assert _stored(harness, run_id) == tree == RunTree.from_log(log) == RunTree.from_log(seen)
    return tree


def _tokens(tree: RunTree) -> dict[str, tuple[str | None, int, int]]:
    return {r.path: (r.exit_reason, r.turns, r.tokens) for r in tree.walk()}


@pytest.mark.parametrize("store", ["memory:", "sqlite"])
def test_three_sources_give_one_tree_on_a_custom_machine(tmp_path: Path, store: str) -> None:
    """A run on a custom machine with a fan-out over different children, one asking for
    an approval and one with a grandchild, suspended and answered: the live run, its
    store (in memory and SQLite) and its log give the same tree, to the last field."""
    url = store if store == "memory:" else f"sqlite:///{tmp_path / 'runs.db'}"
    harness, run, log = _suspended_then_answered(tmp_path, url)
    live = RunTree.of(run)
    assert _stored(harness, "tidy") == live
    assert RunTree.from_log(log) == live
    if store == "sqlite":
        assert RunTree.from_store(url, "tidy") == live  # opened by URL, and closed
    assert [(r.path, r.machine) for r in live.walk()] == [
        ("", "sweep"),
        ("cleaner", "approval"),
        ("inspector", "inspect"),
        ("inspector/probe", "innerloop"),
    ]
    assert live.run_id == "tidy"
    assert live.states == (
        ("idle", "sweep", "suspended"),
        ("sweep", *LOOP, "check", "model_complete"),
    )
    assert live.find("cleaner").states == (
        ("idle", *LOOP, "approve", "suspended"),
        ("approve", "execute", "check", *LOOP, "check", "model_complete"),
    )
    assert live.find("inspector").states == (("idle", "probing", *LOOP, "check", "model_complete"),)
    assert _tokens(live) == {
        "": ("model_complete", 5, 75),
        "cleaner": ("model_complete", 2, 30),
        "inspector": ("model_complete", 2, 30),
        "inspector/probe": ("model_complete", 1, 15),
    }
    assert all(r.waits_on is None for r in live.walk())


def test_a_suspended_tree_says_what_each_run_waits_on(tmp_path: Path) -> None:
    """Suspended, the top run and the child that asked each wait on their interrupt (the
    top run's names the child's path); the three sources agree on it too."""
    harness = Harness(
        HarnessParams(model="scripted:m"),
        [ScriptedProvider([reply("All done.")])],
        machine=_custom_spec(),
        checkpointer="memory:",
    )
    tree = _one_tree(harness, "Tidy the disk", "tidy", tmp_path)
    top, cleaner = tree.waits_on, tree.find("cleaner").waits_on
    assert top is not None
    assert cleaner is not None
    assert (top.kind, top.id, top.state, top.path) == ("approval", "sweep:1", "sweep", "cleaner")
    assert (cleaner.kind, cleaner.id, cleaner.state, cleaner.path) == (
        "approval",
        "approve:1",
        "approve",
        "",
    )
    assert cleaner.payload == {
        "calls": [{"id": "k1", "name": "delete_file", "input": {"path": "old.log"}}]
    }
    assert tree.format().splitlines() == [
        "tidy [sweep]: suspended, 3 turns, 45 tokens, cost unknown",
        "  states: idle -> sweep -> suspended",
        "  waits on: approval 'sweep:1' in sweep (asked by cleaner)",
        "  cleaner [approval]: suspended, 1 turn, 15 tokens, cost unknown",
        "    states: idle -> assemble -> normalize -> call -> stream -> approve -> suspended",
        "    waits on: approval 'approve:1' in approve",
        "  inspector [inspect]: model_complete, 2 turns, 30 tokens, cost unknown",
        "    states: idle -> probing -> assemble -> normalize -> call -> stream -> check -> "
        "model_complete",
        "    probe [innerloop]: model_complete, 1 turn, 15 tokens, cost unknown",
        "      states: idle -> assemble -> normalize -> call -> stream -> check -> model_complete",
    ]
    assert tree.format(name="sweep", width=60).splitlines()[:3] == [
        "sweep [sweep]: suspended, 3 turns, 45 tokens, cost unknown",
        "  states: idle -> sweep -> suspended",
        "  waits on: approval 'sweep:1' in sweep (asked by cleaner)",
    ]
    assert tree.find("inspector").format(width=60).splitlines()[1:3] == [
        "    states: idle -> probing -> assemble -> normalize -> call",
        "      -> stream -> check -> model_complete",
    ]


def test_agent_tools_on_the_default_machine(tmp_path: Path) -> None:
    """On ``DEFAULT_SPEC``, two agent-tool calls in one turn are two children named by
    their call ids, with prices: the three sources agree, costs included."""
    forecaster = Child(
        "forecaster",
        HarnessParams(model="anthropic:claude-sonnet-4-5-20250929"),
        providers=_scripted("anthropic", reply("Sunny."), reply("Rain.")),
    )
    params = HarnessParams(
        model="anthropic:claude-sonnet-4-5-20250929",
        tools=[agent_tool(forecaster, "Forecast the weather.")],
    )
    lead = ScriptedProvider(
        [
            reply(
                tool_call("forecaster", {"task": "Lisbon?"}, id="t1"),
                tool_call("forecaster", {"task": "Porto?"}, id="t2"),
            ),
            reply("Sunny in Lisbon, rain in Porto."),
        ],
        name="anthropic",
    )
    harness = Harness(params, [lead], checkpointer="memory:")
    tree = _one_tree(harness, "Weather?", "w", tmp_path)
    assert [(r.path, r.machine, r.exit_reason) for r in tree.walk()] == [
        ("", "innerloop", "model_complete"),
        ("forecaster[t1]", "innerloop", "model_complete"),
        ("forecaster[t2]", "innerloop", "model_complete"),
    ]
    assert tree.states == (("idle", *LOOP, "execute", "check", *LOOP, "check", "model_complete"),)
    assert tree.cost_usd == pytest.approx(4 * 0.000105)
    assert tree.find("forecaster[t2]").cost_usd == pytest.approx(0.000105)


def test_a_stored_conversation_has_a_stretch_per_message(tmp_path: Path) -> None:
    """A session's messages are one stored run: its tree (from the store, and from a log
    of both messages) has one stretch per message."""
    model = ScriptedProvider([reply("Hi."), reply("Bye.")])
    harness = Harness(HarnessParams(model="scripted:m"), [model], checkpointer="memory:")
    chat = harness.session("c1")
    log = tmp_path / "chat.jsonl"
    with EventLog(log) as events:
        chat.send_sync("Hello", on_event=events.write)
        chat.send_sync("Goodbye", on_event=events.write)
    stored = _stored(harness, "c1")
    assert stored == RunTree.from_log(log)
    one = ("idle", *LOOP, "check", "model_complete")
    assert (stored.states, stored.turns, stored.exit_reason) == ((one, one), 2, "model_complete")


TRAP = """
raise RuntimeError("tree_trap_module was imported")
"""


def test_stores_and_logs_are_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose machine names an import path (a module that raises when imported):
    its tree from the store and from the log is built without importing it."""
    (tmp_path / "tree_trap_module.py").write_text(TRAP)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = _custom_spec().with_import_path("tree_trap_module:SPEC")
    harness = Harness(
        HarnessParams(model="scripted:m"),
        [ScriptedProvider([reply("All done.")])],
        machine=spec,
        checkpointer=f"sqlite:///{tmp_path / 'runs.db'}",
    )
    log = tmp_path / "run.jsonl"
    with EventLog(log) as events:
        _drive(harness.start("Tidy", run_id="t"), events)
    harness.checkpointer.close()  # type: ignore[union-attr]
    stored = RunTree.from_store(f"sqlite:///{tmp_path / 'runs.db'}", "t")
    assert stored == RunTree.from_log(log)
    assert stored.machine == "sweep"
    assert "tree_trap_module" not in sys.modules


def test_picking_a_run_of_a_log(tmp_path: Path) -> None:
    """A log of two runs: ``run`` picks one (a number, ``"last"``, a run id); none, or
    one out of range, is refused with what there is."""
    model = ScriptedProvider([reply("One."), reply("Two.")])
    harness = Harness(HarnessParams(model="scripted:m"), [model], checkpointer="memory:")
    log = tmp_path / "two.jsonl"
    with EventLog(log) as events:
        _drive(harness.start("a", run_id="first"), events)
        _drive(harness.start("b", run_id="second"), events)
    assert RunTree.from_log(log, run=1).run_id == "first"
    assert RunTree.from_log(log, run="last").run_id == "second"
    assert RunTree.from_log(log, run="first").run_id == "first"
    with pytest.raises(ValueError, match="holds 2 runs") as several:
        RunTree.from_log(log)
    assert str(several.value) == (
        f"{log} holds 2 runs; pick one with run=N (1 to 2), run='last' or its run id"
    )
    with pytest.raises(ValueError, match="has no run") as missing:
        RunTree.from_log(log, run=3)
    assert str(missing.value) == f"{log} has no run 3: its runs are 1 to 2, 'last' or an id"
    with pytest.raises(ValueError, match="holds no run"):
        RunTree.from_log([])


def test_find_names_the_paths_there_are() -> None:
    """``find`` of a path not in the tree says which paths are."""
    tree = RunTree.of(
        Harness(HarnessParams(model="scripted:m"), [ScriptedProvider([reply("x")])]).start("q")
    )
    with pytest.raises(KeyError, match="no run at path") as info:
        tree.find("web#1")
    assert info.value.args[0] == "no run at path 'web#1' in this tree; its paths: ''"
    assert tree.format().splitlines() == [
        "run [innerloop]: not ended, 0 turns, 0 tokens, $0.000000",
        "  states: (no transition)",
    ]


def test_a_fan_out_over_one_child_sorts_its_branches_by_number() -> None:
    """Branches ``web#1`` to ``web#10`` come in their number's order."""
    web = Child(
        "web",
        HarnessParams(model="k:m"),
        providers={"k": FakeProvider(lambda r: reply("ok"), name="k")},
    )
    spec = with_child_state(
        DEFAULT_SPEC,
        StateSpec("survey"),
        fan_out_handler(web, lambda s: [str(i) for i in range(10)], limit=3),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("survey")
    harness = Harness(
        HarnessParams(model="scripted:m"), [ScriptedProvider([reply("x")])], machine=spec
    )
    run = harness.start("go")
    for _ in run.iter_sync():
        pass
    assert [r.path for r in RunTree.of(run).children] == [f"web#{i}" for i in range(1, 11)]


def test_damaged_or_older_saved_children_are_read_as_far_as_they_go() -> None:
    """Notes saved before runs named their machine and states, or damaged ones, give
    what they hold (an older child's totals; no states) and leave the rest out."""
    from innerloop import HarnessState
    from innerloop._tree import _Fold, _saved_children

    older = {"at": "check", "state": {"turns": 2, "exit_reason": None}}
    notes: dict[str, Any] = {
        "children.runs": {
            "web#1": older,
            "web#2": "not a saved run",
            "web#3": {"at": "check", "state": {"turns": "two"}, "taken": "idle"},
            "web#4": {"state": {}, "machine": "m", "taken": ["idle", 3, "check"]},
        }
    }
    fold = _Fold(None)
    _saved_children(fold, "", notes)
    fold.ended("", HarnessState())
    tree = fold.tree()
    assert [(r.path, r.machine, r.states, r.turns) for r in tree.children] == [
        ("web#1", "?", (), 2),
        ("web#4", "m", (("idle", "3", "check"),), 0),
    ]


class _Started:
    """A run observer keeping each run it sees start (child runs too), weakly."""

    def __init__(self) -> None:
        self.runs: list[weakref.ref[Run[Any]]] = []

    def start_run(self, run: Run[Any]) -> None:
        self.runs.append(weakref.ref(run))


def test_a_live_tree_lets_its_ended_child_runs_go() -> None:
    """A run keeps what its tree shows of each child run that ended, not the child's
    ``Run``: with the top runs (the one answered and the one it went on from) alive, the
    ended child runs (a fan-out's branches, a grandchild) are freed, and the tree built
    before is the tree built after."""
    started = _Started()
    harness = Harness(
        HarnessParams(model="scripted:m"),
        [ScriptedProvider([reply("All done.")])],
        machine=_custom_spec(),
        clock=FakeClock(),
        observers=[started],
    )
    first = harness.start("Tidy the disk")
    for _ in first.iter_sync():
        pass
    run = harness.resume(first, answer=True)
    for _ in run.iter_sync():
        pass
    tree = RunTree.of(run)
    assert [(r.path, r.exit_reason) for r in tree.walk()][1:] == [
        ("cleaner", "model_complete"),
        ("inspector", "model_complete"),
        ("inspector/probe", "model_complete"),
    ]
    gc.collect()
    alive = [r() for r in started.runs]
    assert [r for r in alive if r is not None and r not in (first, run)] == []
    assert len(alive) == 6  # the two top runs, the cleaner twice, the inspector, its probe
    del alive
    assert RunTree.of(run) == tree
