"""Worked example: a human approves each tool call before ``execute`` runs it.

The spec edit::

    spec = with_approval(DEFAULT_SPEC, ask)

inserts an ``approve`` state on the ``stream -> execute`` edge, so the machine reads
``stream -> approve -> execute``. ``approve`` asks ``ask(call, state)`` about every tool call
of the last assistant message (``ask`` may be sync or async and returns True to allow).
The ``execute`` handler is wrapped so that a denied call never runs: it gets an ``is_error``
tool result, ``denied by the user``, in its place, and the model carries on from there. The
history stays valid (every call has exactly one result, in call order).

Eager tool dispatch starts calls while the answer still streams, before anyone could approve
them, so this machine refuses to run with ``eager_tools=True``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from innerloop._errors import ParamsError
from innerloop._events import Event
from innerloop._messages import ToolUseBlock
from innerloop.fsm import _phases as phases
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._driver import Run
from innerloop.fsm._spec import MachineSpec, StateSpec, TransitionSpec
from innerloop.fsm._state import HarnessState
from innerloop.tools._runner import ToolRunner, ToolScope
from innerloop.tools._spec import ToolCallResult

__all__ = ["DENIED", "Approver", "approve_handler", "execute_approved", "with_approval"]

DENIED = "denied by the user"
"""The tool result a denied call gets (``is_error=True``)."""
NOTE = "approval.denied"
"""``state.notes`` key: ids of the calls denied for the current turn."""

Approver = Callable[[ToolUseBlock, HarnessState], bool | Awaitable[bool]]
"""``ask(call, state) -> bool``, sync or async: True runs the call, False denies it."""


class _DenyingRunner(ToolRunner):
    """Runs the allowed calls with the run's own runner; denied ones get ``DENIED``."""

    def __init__(self, inner: ToolRunner, denied: frozenset[str]) -> None:
        super().__init__()
        self.inner = inner
        self.denied = denied

    async def run_calls(
        self, run: ToolScope, calls: Sequence[ToolUseBlock]
    ) -> list[ToolCallResult]:
        allowed = [c for c in calls if c.id not in self.denied]
        ran = iter(await self.inner.run_calls(run, allowed))
        return [
            ToolCallResult(c.id, c.name, DENIED, is_error=True)
            if c.id in self.denied
            else next(ran)
            for c in calls
        ]


def approve_handler(ask: Approver) -> Callable[[Run], Awaitable[None]]:
    """The ``approve`` phase: ask about each pending call, remember the denied ones."""

    async def approve(run: Run) -> None:
        if run.params.eager_tools:
            raise ParamsError(
                "eager_tools",
                "the approval machine needs eager_tools=False: eager dispatch starts tool "
                "calls while the answer streams, before they can be approved",
            )
        denied = set()
        for call in run.state.history[-1].tool_uses:
            verdict = ask(call, run.state)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not verdict:
                denied.add(call.id)
        run.state.notes[NOTE] = frozenset(denied)
        run.state.outcome = "approved" if not denied else "denied"

    return approve


async def execute_approved(run: Run) -> AsyncIterator[Event]:
    """The default ``execute``, with the denied calls answered by ``DENIED``."""
    denied: frozenset[str] = run.state.notes.pop(NOTE, frozenset())
    inner = run.tool_runner
    run.tool_runner = _DenyingRunner(inner, denied)
    try:
        async for event in phases.execute(run):
            yield event
    finally:
        run.tool_runner = inner


def with_approval(ask: Approver, spec: MachineSpec = DEFAULT_SPEC) -> MachineSpec:
    """``spec`` with an ``approve`` state between ``stream`` and ``execute``.

    ``approve`` leaves to ``abort`` when an abort is requested, else to ``execute``.
    ``spec`` itself is not changed."""
    state = StateSpec("approve", doc="ask the host to approve each tool call")
    return (
        spec.insert_between(
            "stream",
            "execute",
            state,
            approve_handler(ask),
            transitions=(
                TransitionSpec("approve", "abort", "abort_requested", "recovery"),
                TransitionSpec("approve", "execute"),
            ),
        )
        .replace_handler("execute", execute_approved)
        .renamed("approval")
    )
