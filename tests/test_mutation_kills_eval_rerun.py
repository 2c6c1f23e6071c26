# ruff: noqa: E501  (the printed table, line by line)
"""Behaviour of a rerun's comparison that `make mutation` found untested: the table as
printed (each figure side by side, a long output clipped, the paths numbered), where
the paths part, whether the outputs agree."""

from __future__ import annotations

from innerloop import Harness, HarnessParams, Usage
from innerloop.checkpoint import MemoryCheckpointer
from innerloop.evals import Recoveries, RunSummary, Step
from innerloop.evals._rerun import RunComparison, rerun_sync
from innerloop.testing import ScriptedProvider, reply

P1 = (
    Step("idle", "assemble"),
    Step("call", "stream", "call_opened"),
    Step("check", "model_complete", "model_finished"),
)
P2 = (
    Step("idle", "assemble"),
    Step("call", "backoff", "rate_limited_retry"),
    Step("backoff", "call"),
)
A = RunSummary(P1, "model_complete", "x" * 310, "t", 2, Usage(1200, 34), 0.0123, 1.5,
               Recoveries.of(P1), "r1")  # fmt: skip
B = RunSummary(P2, "failed", {"k": 1}, "t", 3, Usage(10, 5), None, None, Recoveries.of(P2), "r2")

PRINTED = [
    "rerun of r1 from checkpoint 3 (entering 'assemble', after 1 shared transitions)",
    "┏━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓",
    "┃             ┃ original (r1)                                                ┃ rerun (r2)                              ┃",
    "┡━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩",
    "│ exit reason │ model_complete                                               │ failed                                  │",
    "│ turns       │ 2                                                            │ 3                                       │",
    "│ tokens      │ 1,234 (in 1,200, out 34)                                     │ 15 (in 10, out 5)                       │",
    "│ cost        │ $0.0123                                                      │ unpriced                                │",
    "│ seconds     │ 1.500                                                        │ -                                       │",
    "│ recoveries  │ -                                                            │ backed_off 1                            │",
    "│ output      │ xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx │ {'k': 1}                                │",
    "│             │ xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx │                                         │",
    "│             │ xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx │                                         │",
    "│             │ xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx │                                         │",
    "│             │ xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... │                                         │",
    "│ path        │ 1. idle -> assemble                                          │ 1. idle -> assemble                     │",
    "│             │ 2. call -> stream [call_opened]                              │ 2. call -> backoff [rate_limited_retry] │",
    "│             │ 3. check -> model_complete [model_finished]                  │ 3. backoff -> call                      │",
    "└─────────────┴──────────────────────────────────────────────────────────────┴─────────────────────────────────────────┘",
    "paths differ from step 2 after the checkpoint; outputs differ",
]


def test_a_comparison_prints_both_runs_side_by_side() -> None:
    """Exit reason, turns, tokens, cost (or unpriced), seconds (or -), recoveries, the
    output (clipped to 300 characters), the numbered paths, and the verdict: where the
    paths part (counted from 1 after the checkpoint) and whether the outputs agree."""
    compared = RunComparison("r1", 3, "assemble", (Step("idle", "assemble"),), A, B)
    assert [line.rstrip() for line in str(compared).splitlines()] == PRINTED
    assert (compared.divergence(), compared.same_output) == (1, False)
    assert compared.to_dict()["divergence"] == 1
    assert compared.to_dict()["shared"] == [["idle", "assemble", None]]


def test_where_two_paths_part() -> None:
    """The same path parts nowhere (None); a path that is the other's start parts where
    the shorter one ends."""
    same = RunComparison("r1", 1, "idle", (), A, A)
    assert (same.divergence(), same.same_output) == (None, True)
    assert str(same).splitlines()[-1] == "same path; same output"
    cut = RunSummary(P1[:2], None, "x" * 310, "t", 1, Usage(), 0.0, 0.0, Recoveries(), "r3")
    assert RunComparison("r1", 1, "idle", (), A, cut).divergence() == 2


def test_a_rerun_reads_the_harnesss_own_store_when_given_none() -> None:
    """Without ``store=``, a rerun reads the run from the harness's checkpoint store and
    stores its fork there."""
    store = MemoryCheckpointer()
    model = ScriptedProvider([reply("first"), reply("again")])
    harness = Harness(HarnessParams(model="scripted:m"), [model], checkpointer=store)
    harness.run_sync("q", run_id="r1")
    compared = rerun_sync(harness, "r1", new_run_id="r2")
    assert (compared.original.output, compared.rerun.output) == ("first", "again")
    assert (compared.rerun.run_id, compared.rerun.exit_reason) == ("r2", "model_complete")
    assert sorted(r.run_id for r in store.runs()) == ["r1", "r2"]
