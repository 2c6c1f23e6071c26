"""The engine-neutral part of a suspended durable run, without an engine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from innerloop import Harness, ResumeError
from innerloop.durable import loop_input
from innerloop.durable._suspend import (
    aborted_run,
    interrupt_from_dict,
    interrupt_to_dict,
    refuse_answer,
    resumed_run,
)
from innerloop.fsm import HarnessState, Run
from innerloop.testing import assert_valid_history
from tests.durable import app as test_app
from tests.durable._checks import APPROVAL_REFUSED


def suspended_approval(log_dir: Path) -> tuple[Harness, HarnessState]:
    definition = test_app.app.get("approval")
    harness = Harness(definition.params, definition.providers, machine=definition.machine)
    state = harness.run_sync("go")
    assert state.exit_reason == "suspended"
    return harness, state


def test_interrupt_round_trips_through_json(log_dir: Path) -> None:
    """The interrupt the host reads is the run's, every field included."""
    _, state = suspended_approval(log_dir)
    assert state.interrupt is not None
    assert interrupt_from_dict(interrupt_to_dict(state.interrupt)) == state.interrupt


def test_refusals_name_the_workflow_and_the_problem(log_dir: Path) -> None:
    """A wrong answer, a run not suspended and no run at all are refused, the state kept."""
    harness, state = suspended_approval(log_dir)
    with pytest.raises(ResumeError) as info:
        resumed_run(harness, "wf-1", state, "yes")
    assert str(info.value) == f"run 'wf-1': {APPROVAL_REFUSED}"
    assert state.final_state == "suspended"
    assert state.interrupt is not None
    assert state.interrupt.answered is False
    running = HarnessState()
    with pytest.raises(ResumeError, match=r"^run 'wf-1': it is not waiting for an answer \(it "):
        refuse_answer("wf-1", running, True)
    with pytest.raises(ResumeError, match=r"^run 'wf-1': it is not waiting for an answer; "):
        refuse_answer("wf-1", None, True)


def test_abort_while_suspended_closes_the_history(log_dir: Path) -> None:
    """An aborted suspended run ends in ``aborted`` with its pending call closed."""
    harness, state = suspended_approval(log_dir)
    run = aborted_run(harness, state, "no answer")
    assert run is not None
    final = asyncio.run(_drive(run))
    assert final.exit_reason == "aborted"
    assert final.abort is not None
    assert final.abort.reason == "no answer"
    assert final.interrupt is None
    assert_valid_history(final.history)
    (closing,) = final.history[-1].tool_results
    assert (closing.tool_use_id, closing.is_error) == ("call_c", True)


async def _drive(run: Run) -> HarnessState:
    async for _ in run.events():
        pass
    return run.state


def test_suspend_timeout_must_be_positive() -> None:
    """A zero or negative wait is refused when the input is built."""
    with pytest.raises(ValueError, match="suspend_timeout must be a positive number"):
        loop_input("approval", "go", suspend_timeout=0)
