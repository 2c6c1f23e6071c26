"""A suspended run inside a durable workflow: what both engines do while it waits.

A run that ends in ``suspended`` does not end its workflow: the workflow keeps the state
and waits (a durable wait, no step running) for an answer. The answer is checked exactly
as :meth:`Harness.resume <innerloop.Harness.resume>` checks it (``check_answer``): a wrong
one is refused with :class:`~innerloop.ResumeError` and the workflow keeps waiting, the
state untouched. A right one resumes the run in the workflow, which then goes on to its
next final state (or its next suspension). An abort while waiting closes the history
through the machine's ``abort`` state. The engines add only how they wait and how the
answer reaches them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from innerloop._convert import structure, unstructure
from innerloop._errors import ResumeError
from innerloop._harness import Harness
from innerloop.durable._codec import state_from_dict
from innerloop.fsm._driver import Run
from innerloop.fsm._interrupts import check_answer
from innerloop.fsm._state import AbortRequest, Answer, HarnessState, Interrupt

__all__ = [
    "aborted_run",
    "answer_from_wire",
    "answer_to_wire",
    "interrupt_from_dict",
    "interrupt_to_dict",
    "refuse_answer",
    "resumed_run",
    "start_run",
]


def start_run(harness: Harness, start: Mapping[str, Any]) -> Run:
    """The run a workflow drives, from its input (see :func:`~innerloop.durable.loop_input`)."""
    state = state_from_dict(start["state"]) if start.get("state") else None
    return harness.start(
        start.get("prompt"),
        state=state,
        tasks=start.get("tasks") or (),
        start_at=start.get("start_at"),
    )


def interrupt_to_dict(interrupt: Interrupt) -> dict[str, Any]:
    data: dict[str, Any] = unstructure(interrupt)
    return data


def interrupt_from_dict(data: Mapping[str, Any]) -> Interrupt:
    return structure(data, Interrupt)


def answer_to_wire(answer: Any, bound: str = "") -> tuple[Any, str]:
    """``(value, interrupt id)`` of an answer, as the engines send it to a workflow: an
    :class:`~innerloop.Answer`'s id, else ``bound`` (the interrupt the host read, or ""
    when it read none)."""
    if isinstance(answer, Answer):
        return answer.value, answer.interrupt_id
    return answer, bound


def answer_from_wire(value: Any, interrupt_id: str) -> Any:
    """The answer a workflow received: bound to its interrupt when an id came with it."""
    return Answer(interrupt_id, value) if interrupt_id else value


def refuse_answer(workflow_id: str, state: HarnessState | None, answer: Any) -> None:
    """Raise :class:`ResumeError` unless ``state`` is a suspended run that takes ``answer``."""
    if state is None or state.final_state != "suspended":
        where = "" if state is None else f" (it is {state.final_state or 'running'})"
        raise ResumeError(
            workflow_id,
            f"it is not waiting for an answer{where}; resume a durable run while it "
            "is suspended (its interrupt says what it asks)",
            answer,
        )
    check_answer(state, answer, workflow_id)


def resumed_run(harness: Harness, workflow_id: str, state: HarnessState, answer: Any) -> Run:
    """The suspended run ``state`` going on with ``answer`` (checked again: a
    :class:`ResumeError` naming ``workflow_id`` leaves ``state`` as it was)."""
    refuse_answer(workflow_id, state, answer)
    return harness.resume(state, answer)


def aborted_run(harness: Harness, state: HarnessState, reason: str) -> Run | None:
    """The suspended run ``state`` going to ``abort`` (which gives every pending tool call
    an error result, so the history stays valid); None when the machine has no ``abort``
    state, and the run stays suspended."""
    if "abort" not in harness.machine.spec.state_names:
        return None
    state.final_state = state.exit_reason = None
    state.interrupt = None
    state.abort = AbortRequest(reason)
    return harness.start(state=state, start_at="abort")
