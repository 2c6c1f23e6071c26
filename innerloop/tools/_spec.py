"""Tool definitions: what the model may call and how a call is run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from innerloop.fsm._params import HarnessParams
    from innerloop.fsm._state import HarnessState

__all__ = [
    "DEFAULT_TIMEOUTS",
    "ToolCallResult",
    "ToolContext",
    "ToolHandler",
    "ToolOutput",
    "ToolSpec",
]

DEFAULT_TIMEOUTS: Mapping[str, float] = {"file": 5.0, "shell": 30.0, "network": 15.0, "code": 60.0}
"""Default timeout in seconds per tool category."""


@attrs.frozen
class ToolOutput:
    """What a tool handler returns. ``content`` is what the model sees."""

    content: str
    is_error: bool = False
    stdout: str | None = None
    stderr: str | None = None
    exit_code: int | None = None
    value: Any = None


@attrs.define
class ToolContext:
    """Passed to every tool handler: the run it belongs to and where it may work."""

    params: HarnessParams
    state: HarnessState
    tool_use_id: str
    workspace: Path | None = None


ToolHandler = Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutput]]


@attrs.frozen
class ToolSpec:
    """A tool the model may call.

    ``handler`` receives the validated arguments and a :class:`ToolContext`. ``category``
    picks the default timeout (file, shell, network, code); ``timeout`` overrides it.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: ToolHandler = attrs.field(eq=False, repr=False)
    category: str = "code"
    timeout: float | None = None

    def to_definition(self) -> dict[str, Any]:
        """Provider-neutral definition: name, description and JSON schema."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
        }


@attrs.frozen
class ToolCallResult:
    """The outcome of one tool call, whatever happened."""

    tool_use_id: str
    name: str
    output: str
    is_error: bool = False
    timed_out: bool = False
    duration: float = 0.0
    stdout: str | None = None
    stderr: str | None = None
    exit_code: int | None = None
    value: Any = attrs.field(default=None, eq=False, repr=False)
