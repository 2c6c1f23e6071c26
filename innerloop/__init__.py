"""innerloop: the inner agentic loop as an explicit finite-state machine.

Layers, bottom up: canonical messages and events; ``recovery`` (policy numbers, clocks,
token counting, compaction); ``providers`` (normalize, the real SDK providers); ``tools``;
``fsm`` (spec, compiler, guards, phases, driver); ``checkpoint``; ``Session`` (a
conversation, message after message); ``Harness``, the front door.
"""

from typing import TYPE_CHECKING

# first, before the heavy imports: the command line's abort signals (see innerloop._boot)
import innerloop._boot  # noqa: F401
from innerloop._errors import (
    ContentError,
    ErrorCategory,
    InnerloopError,
    ParamsError,
    ProviderError,
    ResumeError,
    SessionError,
    SessionLimitError,
    SpecError,
    ToolDefinitionError,
)
from innerloop._eventlog import EventLog, read_event_log
from innerloop._events import Event
from innerloop._harness import Harness
from innerloop._lazy import lazy_names
from innerloop._messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    ModelResponse,
    RedactedThinkingBlock,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from innerloop._session import Session, SessionMessage, SessionTotals
from innerloop._tree import RunTree
from innerloop.fsm import (
    DEFAULT_SPEC,
    Answer,
    Child,
    HarnessParams,
    HarnessState,
    MachineSpec,
    ModelChoice,
    PromptCache,
    SpendBudget,
    StateSpec,
    Thinking,
    TransitionSpec,
    agent_tool,
    compile_spec,
)
from innerloop.providers._servertools import ServerTool
from innerloop.recovery import RecoveryPolicy
from innerloop.tools import Toolset, ToolSpec, tool

if TYPE_CHECKING:
    from innerloop.tools import builtin_tools


__getattr__ = lazy_names(__name__, {"builtin_tools": "innerloop.tools._builtins"})
"""``builtin_tools`` (the built-in tool sets and their sandbox) imported when first named."""

__all__ = [
    "DEFAULT_SPEC",
    "Answer",
    "Child",
    "ContentError",
    "DocumentBlock",
    "ErrorCategory",
    "Event",
    "EventLog",
    "Harness",
    "HarnessParams",
    "HarnessState",
    "ImageBlock",
    "InnerloopError",
    "MachineSpec",
    "Message",
    "ModelChoice",
    "ModelResponse",
    "ParamsError",
    "PromptCache",
    "ProviderError",
    "RecoveryPolicy",
    "RedactedThinkingBlock",
    "ResumeError",
    "RunTree",
    "ServerTool",
    "ServerToolBlock",
    "Session",
    "SessionError",
    "SessionLimitError",
    "SessionMessage",
    "SessionTotals",
    "SpecError",
    "SpendBudget",
    "StateSpec",
    "TextBlock",
    "Thinking",
    "ThinkingBlock",
    "ToolDefinitionError",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "Toolset",
    "TransitionSpec",
    "Usage",
    "agent_tool",
    "builtin_tools",
    "compile_spec",
    "read_event_log",
    "tool",
]
