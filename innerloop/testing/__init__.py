"""Test helpers for innerloop users: scripted providers, a fake clock, one-transition probes,
transition coverage."""

from innerloop.testing._clock import FakeClock
from innerloop.testing._history import assert_valid_history, history_problems
from innerloop.testing._machine import MachineProbe, TransitionCoverage, machine_at
from innerloop.testing._scripted import (
    FakeProvider,
    Fault,
    Reply,
    ScriptedProvider,
    reply,
    text,
    thinking,
    tool_call,
)

__all__ = [
    "FakeClock",
    "FakeProvider",
    "Fault",
    "MachineProbe",
    "Reply",
    "ScriptedProvider",
    "TransitionCoverage",
    "assert_valid_history",
    "history_problems",
    "machine_at",
    "reply",
    "text",
    "thinking",
    "tool_call",
]
