"""Worked example: a human approves each tool call before ``execute`` runs it.

The spec edit::

    spec = with_approval()          # the run suspends and waits for the answer
    spec = with_approval(ask)       # or: a callback answers at once

inserts an ``approve`` state on the ``stream -> execute`` edge, so the machine reads
``stream -> approve -> execute``. Without a callback, ``approve`` interrupts the run: it
ends in ``suspended`` with an ``approval`` interrupt listing the pending calls
(``{"calls": [{"id", "name", "input"}, ...]}``), and ``harness.resume(run, answer)`` goes
on, ``answer`` being True (run them all), False (deny them all) or ``{call_id: bool}``.
With ``ask(call, state)`` (sync or async; True allows) the host answers at once, for hosts
that can. The ``execute`` handler is wrapped so that a denied call never runs: it gets an
``is_error``
tool result, ``denied by the user``, in its place, and the model carries on from there. The
history stays valid (every call has exactly one result, in call order).

Eager tool dispatch starts calls while the answer still streams, before anyone could approve
them, so this machine refuses to run with ``eager_tools=True``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from innerloop import ParamsError, ToolUseBlock
from innerloop.events import Event
from innerloop.fsm import (
    DEFAULT_SPEC,
    HarnessState,
    MachineSpec,
    OutcomeEnum,
    PhaseContext,
    StateSpec,
    TransitionSpec,
)
from innerloop.lowlevel import execute_batch
from innerloop.tools import ToolBatch, ToolCallResult

__all__ = [
    "DENIED",
    "ApprovalOutcome",
    "Approver",
    "approval_request",
    "approve_handler",
    "execute_approved",
    "with_approval",
]

DENIED = "denied by the user"
"""The tool result a denied call gets (``is_error=True``)."""
NOTE = "approval.denied"
"""``state.notes`` key: ids of the calls denied for the current turn (a sorted list)."""

Approver = Callable[[ToolUseBlock, HarnessState], bool | Awaitable[bool]]
"""``ask(call, state) -> bool``, sync or async: True runs the call, False denies it."""


def approval_request(calls: Sequence[ToolUseBlock]) -> dict[str, Any]:
    """The payload of the ``approval`` interrupt: the calls waiting for a verdict."""
    return {"calls": [{"id": c.id, "name": c.name, "input": dict(c.input)} for c in calls]}


def _denied_by(answer: Any, calls: Sequence[ToolUseBlock]) -> list[str]:
    """The ids an approval answer denies (checked by ``Harness.resume`` already)."""
    if isinstance(answer, bool):
        return [] if answer else [c.id for c in calls]
    return [c.id for c in calls if not answer[c.id]]


class ApprovalOutcome(OutcomeEnum):
    APPROVED = "approved"
    DENIED = "denied"


async def _ask_each(ask: Approver, state: HarnessState) -> list[str]:
    denied = []
    for call in state.history[-1].tool_uses:
        verdict = ask(call, state)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if not verdict:
            denied.append(call.id)
        if state.abort is not None:
            break  # the host (or the callback itself) asked to stop: ask no more
    return denied


def approve_handler(ask: Approver | None = None) -> Callable[[PhaseContext], Awaitable[None]]:
    """The ``approve`` phase: ask about each pending call (the callback, or the host by
    suspending the run), remember the denied ones."""

    async def approve(ctx: PhaseContext) -> None:
        state = ctx.state
        if ctx.params.eager_tools:
            raise ParamsError(
                "eager_tools",
                "the approval machine needs eager_tools=False: eager dispatch starts tool "
                "calls while the answer streams, before they can be approved",
            )
        calls = state.history[-1].tool_uses
        resumed = ctx.resumed
        if resumed is not None:
            denied = _denied_by(resumed.answer, calls)
        elif ask is None:
            ctx.interrupt("approval", approval_request(calls), tool_use_ids=[c.id for c in calls])
            return
        else:
            denied = await _ask_each(ask, state)
        state.notes[NOTE] = sorted(denied)
        state.outcome = ApprovalOutcome.DENIED if denied else ApprovalOutcome.APPROVED

    return approve


async def execute_approved(ctx: PhaseContext) -> AsyncIterator[Event]:
    """The default ``execute``, with the denied calls answered by ``DENIED``: only the
    allowed calls go to the run's tool executor."""
    denied = set(ctx.state.notes.pop(NOTE, ()))
    calls = ctx.state.history[-1].tool_uses
    allowed = [c for c in calls if c.id not in denied]
    ran = await ctx.deps.tools.run_calls(ctx, allowed) if allowed else ToolBatch(())
    by_id = {r.tool_use_id: r for r in ran.results}
    results = tuple(
        by_id[c.id] if c.id in by_id else ToolCallResult(c.id, c.name, DENIED, is_error=True)
        for c in calls
    )
    async for event in execute_batch(ctx, ToolBatch(results, ran.cancelled)):
        yield event


def with_approval(ask: Approver | None = None, spec: MachineSpec = DEFAULT_SPEC) -> MachineSpec:
    """``spec`` with an ``approve`` state between ``stream`` and ``execute``.

    ``approve`` leaves to ``abort`` when an abort is requested, to ``suspended`` when it
    asked the host (no ``ask`` callback), else to ``execute``. ``spec`` itself is not
    changed (it needs a ``suspended`` final state, as the default spec has)."""
    state = StateSpec("approve", doc="ask the host to approve each tool call")
    approval = (
        spec.insert_between(
            "stream",
            "execute",
            state,
            approve_handler(ask),
            transitions=(
                TransitionSpec("approve", "abort", "abort_requested", "recovery"),
                TransitionSpec("approve", "suspended", "interrupted", "exit"),
                TransitionSpec("approve", "execute"),
            ),
        )
        .replace_handler("execute", execute_approved)
        .renamed("approval")
    )
    # the structure does not depend on ``ask``: calling it with no argument rebuilds it
    if spec is DEFAULT_SPEC:
        return approval.with_import_path(f"{__package__}:with_approval")
    return approval
