"""Tools: typed specs from Python functions, argument validation, the runner (timeouts
that stop work, parallel and eager dispatch, output caps) the built-in tool sets and
their sandbox."""

from typing import TYPE_CHECKING

from innerloop._lazy import lazy_names
from innerloop.tools._define import Toolset, tool
from innerloop.tools._output import OutputLimits
from innerloop.tools._process import ProcessResult, run_process
from innerloop.tools._runner import ToolBatch, ToolRunner
from innerloop.tools._spec import (
    DEFAULT_TIMEOUTS,
    ToolCallResult,
    ToolContext,
    ToolError,
    ToolHandler,
    ToolInterrupt,
    ToolOutput,
    ToolSource,
    ToolSpec,
)
from innerloop.tools._strict import openai_strict_schema
from innerloop.tools._validate import ToolSchema, validate

if TYPE_CHECKING:
    from innerloop.tools._builtins import BUILTIN_SETS, builtin_tools
    from innerloop.tools._mcp import MCPServer, MCPServerError
    from innerloop.tools._sandbox import BASE_ENV, Sandbox, SandboxError, SandboxWarning
    from innerloop.tools._workspace import Workspace

_LAZY = {
    "BASE_ENV": "innerloop.tools._sandbox",
    "BUILTIN_SETS": "innerloop.tools._builtins",
    "MCPServer": "innerloop.tools._mcp",
    "MCPServerError": "innerloop.tools._mcp",
    "Sandbox": "innerloop.tools._sandbox",
    "SandboxError": "innerloop.tools._sandbox",
    "SandboxWarning": "innerloop.tools._sandbox",
    "Workspace": "innerloop.tools._workspace",
    "builtin_tools": "innerloop.tools._builtins",
}
"""The built-in tool sets, their sandbox and MCP, imported when first named."""


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "BASE_ENV",
    "BUILTIN_SETS",
    "DEFAULT_TIMEOUTS",
    "MCPServer",
    "MCPServerError",
    "OutputLimits",
    "ProcessResult",
    "Sandbox",
    "SandboxError",
    "SandboxWarning",
    "ToolBatch",
    "ToolCallResult",
    "ToolContext",
    "ToolError",
    "ToolHandler",
    "ToolInterrupt",
    "ToolOutput",
    "ToolRunner",
    "ToolSchema",
    "ToolSource",
    "ToolSpec",
    "Toolset",
    "Workspace",
    "builtin_tools",
    "openai_strict_schema",
    "run_process",
    "tool",
    "validate",
]
