"""Worked example: ask the host before spending more than a threshold.

The spec edit::

    spec = with_cost_cap(CostCap(max_cost_usd=0.50), ask)

inserts a ``cost_cap`` state on the ``check -> assemble`` edge (the way into the next turn)
and adds a final state ``stopped_at_cost_cap`` with exit reason ``cost_cap_declined``.
Each time the run's spending passes another multiple of the threshold (in tokens, dollars
or both), ``cost_cap`` calls ``ask(spending, state)`` (sync or async). True lets the run go
on until the next multiple; False ends it in ``stopped_at_cost_cap``.

Unlike ``HarnessParams.spend_budget``, which ends the run without asking, the cap lets a
person decide.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import attrs

from innerloop import ParamsError
from innerloop.fsm import (
    DEFAULT_SPEC,
    HarnessState,
    MachineSpec,
    OutcomeEnum,
    PhaseContext,
    StateSpec,
    TransitionSpec,
)

__all__ = [
    "EXIT_REASON",
    "Asker",
    "CostCap",
    "CostCapOutcome",
    "Spending",
    "cost_cap_declined",
    "cost_cap_handler",
    "with_cost_cap",
]

EXIT_REASON = "cost_cap_declined"
LEVEL = "cost_cap.level"
"""``state.notes`` key: the multiple of the threshold at which to ask next (1 at first)."""


@attrs.frozen
class CostCap:
    """Ask the host each time spending passes another multiple of these amounts."""

    max_tokens: int | None = None
    max_cost_usd: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_tokens is None and self.max_cost_usd is None:
            raise ParamsError("cost_cap", "give max_tokens, max_cost_usd or both")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ParamsError("cost_cap.max_tokens", f"must be >= 1, got {self.max_tokens}")
        if self.max_cost_usd is not None and self.max_cost_usd <= 0:
            raise ParamsError("cost_cap.max_cost_usd", f"must be > 0, got {self.max_cost_usd}")

    def level(self, state: HarnessState) -> int:
        """How many whole thresholds the run has passed (the largest over tokens and USD)."""
        levels = [0]
        if self.max_tokens is not None:
            levels.append(state.usage.total_tokens // self.max_tokens)
        if self.max_cost_usd is not None and state.cost_usd is not None:
            levels.append(int(state.cost_usd // self.max_cost_usd))
        return max(levels)


@attrs.frozen
class Spending:
    """What the host is asked about."""

    tokens: int
    cost_usd: float | None
    level: int
    """How many thresholds the run has passed."""


Asker = Callable[[Spending, HarnessState], bool | Awaitable[bool]]
"""``ask(spending, state) -> bool``, sync or async: True goes on, False stops the run."""


class CostCapOutcome(OutcomeEnum):
    UNDER_CAP = "under_cap"
    CAP_RAISED = "cap_raised"
    CAP_DECLINED = "cap_declined"


def cost_cap_declined(ctx: PhaseContext) -> bool:
    """The host said no to spending more."""
    return ctx.state.outcome == CostCapOutcome.CAP_DECLINED


def cost_cap_handler(cap: CostCap, ask: Asker) -> Callable[[PhaseContext], Awaitable[None]]:
    """The ``cost_cap`` phase: ask when a new multiple of the threshold is passed."""

    async def cost_cap(ctx: PhaseContext) -> None:
        state = ctx.state
        level = cap.level(state)
        if level < state.notes.get(LEVEL, 1):
            state.outcome = CostCapOutcome.UNDER_CAP
            return
        verdict = ask(Spending(state.usage.total_tokens, state.cost_usd, level), state)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict:
            state.notes[LEVEL] = level + 1
            state.outcome = CostCapOutcome.CAP_RAISED
        else:
            state.outcome = CostCapOutcome.CAP_DECLINED

    return cost_cap


def with_cost_cap(cap: CostCap, ask: Asker, spec: MachineSpec = DEFAULT_SPEC) -> MachineSpec:
    """``spec`` with a ``cost_cap`` state between ``check`` and ``assemble`` and a final
    state ``stopped_at_cost_cap``. ``cost_cap`` leaves to ``abort`` when an abort is
    requested, to ``stopped_at_cost_cap`` when the host declined, else to ``assemble``.
    ``spec`` itself is not changed."""
    final = StateSpec(
        "stopped_at_cost_cap", "final", EXIT_REASON, "the host declined to spend more"
    )
    state = StateSpec("cost_cap", doc="ask the host before spending past the threshold")
    return (
        spec.add_state(final)
        .with_guard("cost_cap_declined", cost_cap_declined)
        .insert_between(
            "check",
            "assemble",
            state,
            cost_cap_handler(cap, ask),
            transitions=(
                TransitionSpec("cost_cap", "abort", "abort_requested", "recovery"),
                TransitionSpec("cost_cap", "stopped_at_cost_cap", "cost_cap_declined", "exit"),
                TransitionSpec("cost_cap", "assemble"),
            ),
        )
        .renamed("costcap")
    )
