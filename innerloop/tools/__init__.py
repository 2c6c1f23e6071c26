"""Tools: typed specs from Python functions, argument validation, the runner (timeouts
that stop work, parallel and eager dispatch, output caps) the built-in tool sets and
their sandbox."""

from innerloop.tools._builtins import BUILTIN_SETS, builtin_tools
from innerloop.tools._define import Toolset, tool
from innerloop.tools._mcp import MCPServer, MCPServerError
from innerloop.tools._output import OutputLimits
from innerloop.tools._process import ProcessResult, run_process
from innerloop.tools._runner import ToolRunner
from innerloop.tools._sandbox import BASE_ENV, Sandbox, SandboxError, SandboxWarning
from innerloop.tools._spec import (
    DEFAULT_TIMEOUTS,
    ToolCallResult,
    ToolContext,
    ToolError,
    ToolHandler,
    ToolInterrupt,
    ToolOutput,
    ToolSpec,
)
from innerloop.tools._strict import openai_strict_schema
from innerloop.tools._validate import ToolSchema, validate
from innerloop.tools._workspace import Workspace

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
    "ToolCallResult",
    "ToolContext",
    "ToolError",
    "ToolHandler",
    "ToolInterrupt",
    "ToolOutput",
    "ToolRunner",
    "ToolSchema",
    "ToolSpec",
    "Toolset",
    "Workspace",
    "builtin_tools",
    "openai_strict_schema",
    "run_process",
    "tool",
    "validate",
]
