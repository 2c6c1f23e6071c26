"""What a run comes to, read off its final state and its path of transitions: the
figures an eval report and a rerun's comparison put side by side."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from innerloop._events import Transition
from innerloop._messages import Usage
from innerloop.fsm._driver import Run
from innerloop.fsm._state import HarnessState

__all__ = [
    "RECOVERIES",
    "Recoveries",
    "RunSummary",
    "Step",
    "last_text",
    "percentile",
    "transitions",
]


@attrs.frozen
class Step:
    """One transition of a run: ``source -> target [guard]``."""

    source: str
    target: str
    guard: str | None = None

    def __str__(self) -> str:
        guard = f" [{self.guard}]" if self.guard else ""
        return f"{self.source} -> {self.target}{guard}"


RECOVERIES = ("backed_off", "fell_back", "retried", "compacted", "repaired")
"""The recovery paths a report counts, each read off a run's transitions: into
``backoff``, into ``fallback``, a transient failure retried (guard ``transient_retry``),
into ``compact``, into ``repair``."""

_INTO = {
    "backoff": "backed_off",
    "fallback": "fell_back",
    "compact": "compacted",
    "repair": "repaired",
}


@attrs.frozen
class Recoveries:
    """How many times a run took each recovery path."""

    backed_off: int = 0
    fell_back: int = 0
    retried: int = 0
    compacted: int = 0
    repaired: int = 0

    @classmethod
    def of(cls, path: Iterable[Step]) -> Recoveries:
        """Count the recovery transitions of ``path`` (a custom machine's states of the
        same names count too)."""
        counts = dict.fromkeys(RECOVERIES, 0)
        for step in path:
            if step.guard == "transient_retry":
                counts["retried"] += 1
            elif step.target in _INTO:
                counts[_INTO[step.target]] += 1
        return cls(**counts)

    def taken(self) -> dict[str, int]:
        """The paths taken at least once, with their counts."""
        return {name: n for name in RECOVERIES if (n := getattr(self, name))}

    def __str__(self) -> str:
        return ", ".join(f"{name} {n}" for name, n in self.taken().items()) or "-"


def last_text(state: HarnessState[Any]) -> str:
    """The text of the run's last assistant message ('' when the model never answered)."""
    for message in reversed(state.history):
        if message.role == "assistant":
            return message.text
    return ""


@attrs.frozen
class RunSummary:
    """One run as a report shows it: its path, how it ended, what it answered and cost."""

    path: tuple[Step, ...]
    """Its transitions, in order (for a rerun, from the checkpoint on)."""
    exit_reason: str | None
    output: Any
    """The typed answer's JSON form (``state.output_data``) when the params have an
    ``output_type``, else the last assistant message's text."""
    text: str
    """The last assistant message's text."""
    turns: int
    usage: Usage
    cost_usd: float | None
    """None when a model of the run has no price (see ``HarnessParams.prices``)."""
    seconds: float | None
    """Wall time of the run (for a stored run, from the checkpoint to its last one)."""
    recoveries: Recoveries
    run_id: str | None = None

    @classmethod
    def of(
        cls,
        state: HarnessState[Any],
        path: Sequence[Step],
        *,
        seconds: float | None = None,
        run_id: str | None = None,
    ) -> RunSummary:
        text = last_text(state)
        return cls(
            path=tuple(path),
            exit_reason=state.exit_reason,
            output=state.output_data if state.output_data is not None else text,
            text=text,
            turns=state.turns,
            usage=state.usage,
            cost_usd=state.cost_usd,
            seconds=seconds,
            recoveries=Recoveries.of(path),
            run_id=run_id,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (each step as ``[source, target, guard]``)."""
        return {
            "run_id": self.run_id,
            "exit_reason": self.exit_reason,
            "output": self.output,
            "turns": self.turns,
            "usage": attrs.asdict(self.usage),
            "total_tokens": self.usage.total_tokens,
            "cost_usd": self.cost_usd,
            "seconds": self.seconds,
            "recoveries": attrs.asdict(self.recoveries),
            "path": [[s.source, s.target, s.guard] for s in self.path],
        }


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0 to 100) of ``values`` by the nearest-rank method (None
    for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


async def transitions(run: Run[Any]) -> list[Step]:
    """Drive ``run`` to its end; the transitions it took."""
    return [
        Step(e.source, e.target, e.guard) async for e in run.events() if isinstance(e, Transition)
    ]
