"""What the crash tests read back from the step logs of the test app."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from innerloop.examples import with_approval
from innerloop.testing import replay
from tests.durable.conftest import lines

APPROVAL_REFUSED = (
    "an approval answer is True (run them all), False (deny them all) or "
    "{tool_use_id: bool} for 'call_c', not str"
)
"""What ``Harness.resume`` says to the answer ``"yes"`` on the approval loop."""


def model_turns(log_dir: Path) -> Counter[str]:
    return Counter(row[2] for row in lines(log_dir / "model.log"))


def tool_starts(log_dir: Path) -> list[tuple[int, str]]:
    return [(int(row[0]), row[2]) for row in lines(log_dir / "tool.log") if row[1] == "start"]


async def until(predicate: Callable[[], bool], limit: float = 30, what: str = "") -> None:
    """Poll ``predicate`` (it reads files other processes write) for up to ``limit`` s."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def started(log_dir: Path, call_id: str) -> Callable[[], bool]:
    return lambda: any(c == call_id for _, c in tool_starts(log_dir))


def assert_only_call_1_reran(log_dir: Path, killed: int, successor: int) -> None:
    """Each model turn ran once; of the tools only call_1 (in flight at the kill) ran
    twice, first on the killed worker, then on its successor."""
    assert model_turns(log_dir) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})
    assert tool_starts(log_dir) == [
        (killed, "call_0"),
        (killed, "call_1"),
        (successor, "call_1"),
        (successor, "call_2"),
    ]


def assert_each_run_replays(events: list[dict[str, Any]]) -> list[str]:
    """Replay every run of a workflow's events (a suspended run and its resume are two;
    a run continued as new is one) and fail at the first divergence; each run's exit
    reason. The app's machines are given (events are data: a recorded import path is
    never imported)."""
    runs = sum(e["type"] == "finished" for e in events)
    assert runs > 0
    specs = [with_approval()]
    return [
        replay(events, n, specs=specs).assert_same().state.exit_reason or ""
        for n in range(1, runs + 1)
    ]
