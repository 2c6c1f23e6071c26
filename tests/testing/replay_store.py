"""The harness a stored run of ``test_replay_cli`` ran on, for ``--harness``."""

from __future__ import annotations

from typing import Any

import attrs

from innerloop import Harness, HarnessParams, tool
from innerloop.testing import ScriptedProvider


@tool
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


PARAMS = HarnessParams(
    model="anthropic:claude-sonnet-4-5-20250929", tools=[add], system="Add exactly."
)


def harness() -> Harness[Any]:
    """The run's params on the default machine (a replay answers from the record, so
    the provider here is never called)."""
    return Harness(PARAMS, [ScriptedProvider([], name="anthropic")])


def other() -> Harness[Any]:
    """The same with a turn limit of one: its replay parts where the limit fires."""
    return Harness(attrs.evolve(PARAMS, max_turns=1), [ScriptedProvider([], name="anthropic")])
