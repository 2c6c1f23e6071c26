"""Rerun a stored run from a checkpoint with other params and compare the two."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, Message, ResumeError, tool
from innerloop.checkpoint import MemoryCheckpointer, UnknownRunError
from innerloop.evals import (
    Case,
    Contains,
    Dataset,
    Recoveries,
    Step,
    compare_fork,
    rerun_sync,
    run_eval_sync,
)
from innerloop.evals._rerun import _on_store
from innerloop.examples import with_approval
from innerloop.recovery import RateLimitGates, TruncatingCompactor
from innerloop.testing import FakeClock, Fault, ScriptedProvider, reply, tool_call


@tool(category="network")
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def recorded(store: MemoryCheckpointer) -> None:
    """Run r1: a tool call, then an answer; checkpointed at every transition."""
    model = ScriptedProvider(
        [reply(tool_call("weather", {"city": "Lisbon"}, id="w1")), reply("Sunny in Lisbon.")]
    )
    params = HarnessParams(model="scripted:first", tools=[weather])
    Harness(params, [model], checkpointer=store).run_sync("Weather in Lisbon?", run_id="r1")


def other(*script: Any) -> tuple[Harness[Any], ScriptedProvider]:
    model = ScriptedProvider(list(script))
    params = HarnessParams(model="scripted:second", tools=[weather])
    return Harness(params, [model], clock=FakeClock()), model


FIRST_TURN = [
    Step("idle", "assemble"),
    Step("assemble", "normalize"),
    Step("normalize", "call"),
    Step("call", "stream", "call_opened"),
    Step("stream", "execute", "has_tool_calls"),
    Step("execute", "check"),
    Step("check", "assemble"),
]
LAST_TURN = [
    Step("assemble", "normalize"),
    Step("normalize", "call"),
    Step("call", "stream", "call_opened"),
    Step("stream", "check"),
    Step("check", "model_complete", "model_finished"),
]


def test_whole_run_on_another_model() -> None:
    """From the first checkpoint another model answers at once: both paths, outputs,
    turns and tokens side by side; the rerun is stored as a fork of the run."""
    store = MemoryCheckpointer()
    recorded(store)
    harness, _ = other(reply("No idea."))
    comparison = rerun_sync(harness, "r1", store=store, new_run_id="r2")
    assert comparison.at == 1
    assert comparison.state == "idle"
    assert comparison.shared == ()
    assert list(comparison.original.path) == FIRST_TURN + LAST_TURN
    assert list(comparison.rerun.path) == [FIRST_TURN[0], *LAST_TURN]
    assert comparison.divergence() == 4  # stream -> check, not stream -> execute
    assert (comparison.original.output, comparison.rerun.output) == ("Sunny in Lisbon.", "No idea.")
    assert (comparison.original.turns, comparison.rerun.turns) == (2, 1)
    assert (comparison.original.usage.total_tokens, comparison.rerun.usage.total_tokens) == (30, 15)
    assert not comparison.same_output
    assert comparison.rerun.run_id == "r2"
    forked = {r.run_id: r for r in store.runs()}["r2"]
    assert (forked.parent_run_id, forked.parent_seq, forked.exit_reason) == (
        "r1",
        1,
        "model_complete",
    )


def test_from_a_checkpoint_mid_run() -> None:
    """From the checkpoint entering the second turn's `assemble`, the first turn is shared
    and only the last turn runs again (on the new model, which backs off once)."""
    store = MemoryCheckpointer()
    recorded(store)
    at = len(FIRST_TURN) + 1  # checkpoint 1 is the start (idle)
    harness, model = other(Fault.rate_limited(), reply("Still sunny."))
    comparison = rerun_sync(harness, "r1", at=at, store=store)
    assert comparison.state == "assemble"
    assert list(comparison.shared) == FIRST_TURN
    assert list(comparison.original.path) == LAST_TURN
    assert comparison.rerun.path[2:4] == (
        Step("call", "backoff", "rate_limited_retry"),
        Step("backoff", "call"),
    )
    assert comparison.rerun.recoveries == Recoveries(backed_off=1)
    assert comparison.divergence() == 2
    assert comparison.rerun.turns == 2  # the shared turn counts in both
    assert len(model.requests) == 2  # only the last turn was asked again
    sent = model.requests[1].payload["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]


def test_same_params_same_path() -> None:
    """Rerun with a model that answers as the first did: no divergence, same output."""
    store = MemoryCheckpointer()
    recorded(store)
    harness, _ = other(reply("Sunny in Lisbon."))
    comparison = rerun_sync(harness, "r1", at=len(FIRST_TURN) + 1, store=store)
    assert comparison.divergence() is None
    assert comparison.same_output
    assert str(comparison).rstrip().endswith("same path; same output")


def test_edit_changes_the_prompt() -> None:
    """edit= rewrites the state first: another user prompt."""
    store = MemoryCheckpointer()
    recorded(store)
    harness, model = other(reply("Rainy in Porto."))

    def ask_porto(state: Any) -> None:
        state.history[0] = Message.user("Weather in Porto?")

    comparison = rerun_sync(harness, "r1", store=store, edit=ask_porto)
    assert comparison.rerun.output == "Rainy in Porto."
    assert model.requests[0].payload["messages"][0]["content"][0]["text"] == "Weather in Porto?"


def test_text_and_json() -> None:
    """The text shows both runs side by side; to_dict is JSON."""
    store = MemoryCheckpointer()
    recorded(store)
    harness, _ = other(reply("No idea."))
    comparison = rerun_sync(harness, "r1", store=store, new_run_id="r2")
    text = str(comparison)
    assert "rerun of r1 from checkpoint 1 (entering 'idle', after 0 shared transitions)" in text
    assert "original (r1)" in text
    assert "rerun (r2)" in text
    assert "paths differ from step 5 after the checkpoint; outputs differ" in text
    data = json.loads(json.dumps(comparison.to_dict()))
    assert data["divergence"] == 4
    assert data["original"]["path"][1] == ["assemble", "normalize", None]
    assert data["rerun"]["output"] == "No idea."


def test_errors() -> None:
    """No store, or a checkpoint the run does not have: the error says what to do."""
    store = MemoryCheckpointer()
    recorded(store)
    harness, _ = other(reply("x"))
    with pytest.raises(ResumeError, match=r"pass store='sqlite:///runs\.db'"):
        rerun_sync(harness, "r1")
    count = len(store.checkpoints("r1"))
    with pytest.raises(UnknownRunError, match=f"its checkpoints are 1 to {count}"):
        rerun_sync(harness, "r1", at=count + 1, store=store)
    with pytest.raises(UnknownRunError, match="no run 'nope'"):
        rerun_sync(harness, "nope", store=store)


def test_compare_a_stored_fork() -> None:
    """compare_fork reads a stored rerun and its parent back: the same comparison, nothing
    run again; a run that is no fork is refused."""
    store = MemoryCheckpointer()
    recorded(store)
    harness, _ = other(reply("No idea."))
    ran = rerun_sync(harness, "r1", store=store, new_run_id="r2")
    read = compare_fork(store, "r2")
    assert (read.run_id, read.at, read.state, read.shared) == ("r1", 1, "idle", ())
    assert read.original.path == ran.original.path
    assert read.rerun.path == ran.rerun.path
    assert (read.rerun.output, read.rerun.turns) == ("No idea.", 1)
    with pytest.raises(ValueError, match=r"^run 'r1' is no fork"):
        compare_fork(store, "r1")


def test_an_eval_case_rerun() -> None:
    """With a store on the harness, each eval case's run is stored under its run id, so a
    failed case reruns on other params."""
    store = MemoryCheckpointer()
    model = ScriptedProvider([reply("Milan.")])
    harness = Harness(HarnessParams(model="scripted:a"), [model], checkpointer=store)
    report = run_eval_sync(Dataset([Case("it", "Italy?", checks=[Contains("Rome")])]), harness)
    failed = report.results[0]
    assert failed.status == "failed"
    assert failed.run is not None
    assert failed.run.run_id is not None
    better, _ = other(reply("Rome."))
    comparison = rerun_sync(better, failed.run.run_id, store=store)
    assert (comparison.original.output, comparison.rerun.output) == ("Milan.", "Rome.")


def test_another_machine_must_keep_what_the_run_used() -> None:
    """A harness on a machine of another name is refused, as fork refuses it, and nothing
    is stored."""
    store = MemoryCheckpointer()
    recorded(store)
    model = ScriptedProvider([reply("x")])
    params = HarnessParams(model="scripted:second", tools=[weather])
    approving = Harness(params, [model], machine=with_approval())
    with pytest.raises(ResumeError, match="build the Harness with machine="):
        rerun_sync(approving, "r1", store=store)
    assert [r.run_id for r in store.runs()] == ["r1"]


def test_a_harness_moved_to_a_store_keeps_every_other_argument() -> None:
    """The rerun's harness on another store is the same harness in all but its store:
    every Harness.__init__ argument, read back, is what the first one holds."""
    harness = Harness(
        HarnessParams(model="scripted:first", tools=[weather]),
        {"scripted": ScriptedProvider([])},
        machine=with_approval(),
        clock=FakeClock(),
        compactor=TruncatingCompactor(),
        engine="statemachine",
        checkpointer=MemoryCheckpointer(),
        checkpoint_every="turn",
        checkpoint_commit="each",
        gates=RateLimitGates(),
    )
    store = MemoryCheckpointer()
    moved = _on_store(harness, store)
    assert moved.checkpointer is store
    names = [n for n in inspect.signature(Harness.__init__).parameters if n != "self"]
    assert {n: getattr(moved, n) for n in names if n != "checkpointer"} == {
        n: getattr(harness, n) for n in names if n != "checkpointer"
    }
    assert (moved.engine, moved.checkpoint_every, moved.checkpoint_commit) == (
        "statemachine",
        "turn",
        "each",
    )


def test_the_sync_facade_refuses_a_running_loop() -> None:
    """rerun_sync inside a running event loop, which it would block, raises naming the
    await to write instead; nothing is rerun."""
    store = MemoryCheckpointer()
    recorded(store)
    harness, model = other(reply("No idea."))

    async def inside() -> None:
        rerun_sync(harness, "r1", store=store, new_run_id="r2")

    with pytest.raises(RuntimeError) as caught:
        asyncio.run(inside())
    assert str(caught.value) == (
        "rerun_sync was called inside a running event loop, which it would block; "
        "use `await rerun(...)` there"
    )
    assert model.played == 0
    assert [r.run_id for r in store.runs()] == ["r1"]
