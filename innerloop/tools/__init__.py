"""Tools: specs, the runner (timeouts, parallel and eager dispatch)."""

from innerloop.tools._runner import ToolRunner
from innerloop.tools._spec import (
    DEFAULT_TIMEOUTS,
    ToolCallResult,
    ToolContext,
    ToolHandler,
    ToolOutput,
    ToolSpec,
)

__all__ = [
    "DEFAULT_TIMEOUTS",
    "ToolCallResult",
    "ToolContext",
    "ToolHandler",
    "ToolOutput",
    "ToolRunner",
    "ToolSpec",
]
