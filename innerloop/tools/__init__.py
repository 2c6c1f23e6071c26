"""Tools: typed specs from Python functions, argument validation, the runner (timeouts
that stop work, parallel and eager dispatch, output caps) and the built-in tool sets."""

from innerloop.tools._builtins import BUILTIN_SETS, builtin_tools
from innerloop.tools._define import Toolset, tool
from innerloop.tools._mcp import MCPServer, MCPServerError
from innerloop.tools._output import OutputLimits, cap_output
from innerloop.tools._process import ProcessResult, run_process, scrub_env
from innerloop.tools._runner import ToolRunner
from innerloop.tools._schema import schema_for, validate
from innerloop.tools._spec import (
    DEFAULT_TIMEOUTS,
    ToolCallResult,
    ToolContext,
    ToolError,
    ToolHandler,
    ToolOutput,
    ToolSpec,
)
from innerloop.tools._workspace import Workspace

__all__ = [
    "BUILTIN_SETS",
    "DEFAULT_TIMEOUTS",
    "MCPServer",
    "MCPServerError",
    "OutputLimits",
    "ProcessResult",
    "ToolCallResult",
    "ToolContext",
    "ToolError",
    "ToolHandler",
    "ToolOutput",
    "ToolRunner",
    "ToolSpec",
    "Toolset",
    "Workspace",
    "builtin_tools",
    "cap_output",
    "run_process",
    "schema_for",
    "scrub_env",
    "tool",
    "validate",
]
