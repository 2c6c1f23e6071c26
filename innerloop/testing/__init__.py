"""Test helpers for innerloop users: scripted providers, a fake clock, one-transition probes,
per-transition scenarios, transition coverage, replays of recorded runs."""

from innerloop.testing._bedrock import BedrockServer
from innerloop.testing._clock import FakeClock
from innerloop.testing._history import assert_valid_history, history_problems
from innerloop.testing._machine import (
    MachineProbe,
    TrackedMachine,
    TransitionCoverage,
    machine_at,
    phase_context,
)
from innerloop.testing._replay import Divergence, ReplayError, ReplayResult, areplay, replay
from innerloop.testing._scenarios import ScenarioBuilder, ScenarioError, Scenarios, scenario
from innerloop.testing._scripted import (
    FakeProvider,
    Fault,
    Reply,
    ScriptedProvider,
    ScriptStep,
    reply,
    text,
    thinking,
    tool_call,
)
from innerloop.testing._servers import (
    AnthropicServer,
    LoopbackServer,
    OpenAIServer,
    Oversized,
    RateLimit,
    Raw,
    RecordedRequest,
    ResponsesServer,
    SlowReply,
    StreamError,
    Trickle,
    Truncated,
)

__all__ = [
    "AnthropicServer",
    "BedrockServer",
    "Divergence",
    "FakeClock",
    "FakeProvider",
    "Fault",
    "LoopbackServer",
    "MachineProbe",
    "OpenAIServer",
    "Oversized",
    "RateLimit",
    "Raw",
    "RecordedRequest",
    "ReplayError",
    "ReplayResult",
    "Reply",
    "ResponsesServer",
    "ScenarioBuilder",
    "ScenarioError",
    "Scenarios",
    "ScriptStep",
    "ScriptedProvider",
    "SlowReply",
    "StreamError",
    "TrackedMachine",
    "TransitionCoverage",
    "Trickle",
    "Truncated",
    "areplay",
    "assert_valid_history",
    "history_problems",
    "machine_at",
    "phase_context",
    "replay",
    "reply",
    "scenario",
    "text",
    "thinking",
    "tool_call",
]
