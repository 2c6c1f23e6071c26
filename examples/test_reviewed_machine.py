"""Per-transition tests of the reviewed machine (``custom_state.py``), as a user writes
them: a scenario per edge the machine adds, an async handler test, and a coverage gate on
the edges it adds over the default machine. From this folder:

    pytest test_reviewed_machine.py -p innerloop.testing.pytest_plugin \\
        --innerloop-coverage=custom_state:SPEC-innerloop.fsm:DEFAULT_SPEC \\
        --innerloop-coverage-strict
"""

from __future__ import annotations

from custom_state import SPEC, Review, review

from innerloop import Harness, HarnessParams, HarnessState, Message
from innerloop.events import Transition
from innerloop.fsm import PhaseContext
from innerloop.testing import (
    Scenarios,
    ScriptedProvider,
    TransitionCoverage,
    reply,
    scenario,
)


def sent_back(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = Review.SENT_BACK


def passed(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = Review.PASSED


REVIEWED = Scenarios(SPEC).add("review", "assemble", sent_back).add(
    "review", "model_complete", passed
)


def test_every_edge_has_a_scenario() -> None:
    assert list(REVIEWED.missing()) == []


def test_the_review_edges_are_chosen() -> None:
    for target in ("assemble", "model_complete"):
        ctx = REVIEWED.context("review", target)
        assert REVIEWED.machine.select("review", ctx).target == target
    assert scenario("check", "review", spec=REVIEWED).state.last_response is not None


async def test_review_sends_an_unsourced_answer_back_once() -> None:
    ctx: PhaseContext = REVIEWED.context("check", "review")
    ctx.state.history.append(Message.assistant("Lisbon."))
    await review(ctx)
    assert ctx.state.outcome == Review.SENT_BACK
    assert ctx.state.history[-1] == Message.user("Cite a source (source: ...).")
    await review(ctx)  # asked once only
    assert ctx.state.outcome == Review.PASSED


def harness(coverage: TransitionCoverage, *answers: str) -> Harness:
    model = ScriptedProvider([reply(a) for a in answers])
    params = HarnessParams(model="scripted:m-20250101")
    return Harness(params, [model], machine=SPEC, observers=[coverage])


def test_a_run_takes_the_added_edges(transition_coverage: TransitionCoverage) -> None:
    state = harness(transition_coverage, "Lisbon.", "Lisbon. source: an atlas").run_sync(
        "Capital of Portugal?"
    )
    assert (state.exit_reason, state.turns) == ("model_complete", 2)


async def test_an_abort_while_reviewing(transition_coverage: TransitionCoverage) -> None:
    run = harness(transition_coverage, "Lisbon.").start("Capital of Portugal?")
    async for event in run.events():
        if isinstance(event, Transition) and event.target == "review":
            run.abort("the host is done")
    assert (run.state.exit_reason, run.state.history[-1].text) == ("aborted", "Lisbon.")
