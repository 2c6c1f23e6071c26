"""Tool definitions: what the model may call and how a call is run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, Protocol, runtime_checkable

import attrs

from innerloop._messages import Message, encodable
from innerloop._tasks import Task
from innerloop.tools._validate import tool_schema

__all__ = [
    "DEFAULT_TIMEOUTS",
    "ToolCallResult",
    "ToolContext",
    "ToolError",
    "ToolHandler",
    "ToolInterrupt",
    "ToolOutput",
    "ToolParams",
    "ToolSource",
    "ToolSpec",
    "ToolState",
]

DEFAULT_TIMEOUTS: Mapping[str, float] = {"file": 5.0, "shell": 30.0, "network": 15.0, "code": 60.0}
"""Default timeout in seconds per tool category."""


class ToolError(Exception):
    """Raise it from a tool to report a failure to the model with exactly this message
    (any other exception is reported with its type name)."""


class ToolInterrupt(Exception):
    """Raised by :meth:`ToolContext.interrupt`: the call stops and asks ``payload``; the
    run ends ``suspended`` and the answer given to ``Harness.resume`` becomes this call's
    tool result. Let it propagate (the runner catches it)."""

    def __init__(self, payload: Any) -> None:
        self.payload = payload
        super().__init__(f"the tool asked: {payload!r}")


@attrs.frozen
class ToolOutput:
    """What a tool handler returns. ``content`` is what the model sees."""

    content: str
    is_error: bool = False
    stdout: str | None = None
    stderr: str | None = None
    exit_code: int | None = None
    value: Any = None


class ToolParams(Protocol):
    """What the tool layer reads of a run's params (``HarnessParams`` is one)."""

    @property
    def tools(self) -> tuple[ToolSpec, ...]: ...

    @property
    def max_parallel_tools(self) -> int: ...

    def tool(self, name: str) -> ToolSpec | None: ...

    def timeout_for(self, tool: ToolSpec) -> float: ...


class ToolState(Protocol):
    """What a tool may read and change of the run's state (``HarnessState`` is one)."""

    @property
    def history(self) -> list[Message]: ...

    @property
    def tasks(self) -> list[Task]: ...

    @property
    def turns(self) -> int: ...

    @property
    def notes(self) -> dict[str, Any]: ...


def _no_abort(reason: str) -> None:
    raise RuntimeError("this tool context belongs to no run, so it cannot abort one")


@attrs.define
class ToolContext:
    """Passed to every tool handler: the run it belongs to and where it may work."""

    params: ToolParams
    state: ToolState
    tool_use_id: str
    workspace: Path | None = None
    timeout: float | None = None
    """The limit this call runs under, in seconds."""
    partial: ToolOutput | None = None
    """What a cancelled or timed-out call produced before it was stopped (set by the
    process helpers, so a timed-out result still shows the output so far)."""
    request_abort: Callable[[str], None] = attrs.field(default=_no_abort, repr=False)
    """Set by the runner: see :meth:`abort`."""
    run: Any = attrs.field(default=None, repr=False)
    """The run's scope the call belongs to (a machine's ``PhaseContext``), set by the
    runner; an agent tool (``innerloop.agent_tool``) runs its child inside it."""

    def abort(self, reason: str = "abort requested by a tool") -> None:
        """Abort the whole run: this call and the other running ones are cancelled, the
        history is closed validly, and the run ends in ``aborted``."""
        self.request_abort(reason)

    def interrupt(self, payload: Any) -> NoReturn:
        """Stop this call and ask the host ``payload`` (JSON data: a question, a choice).

        The other calls of the turn finish; the run ends in ``suspended`` and
        ``Harness.resume(run, answer)`` makes the answer this call's tool result (a string
        as it is, other JSON as its JSON text). Tools run in a child process
        (``isolated=True``) cannot interrupt."""
        raise ToolInterrupt(payload)

    def keep_partial(self, result: Any) -> None:
        """Record the ``stdout``/``stderr`` of ``result`` (anything with those attributes)
        as what this call printed before it was stopped."""
        self.partial = ToolOutput("", stdout=result.stdout, stderr=result.stderr)


ToolHandler = Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutput]]


@attrs.frozen
class ToolSpec:
    """A tool the model may call.

    ``handler`` receives the validated arguments and a :class:`ToolContext`. ``category``
    picks the default timeout (file, shell, network, code); ``timeout`` overrides it.
    ``input_schema`` (a Draft 2020-12 JSON schema) is checked here and calls are validated
    against it; a keyword innerloop cannot enforce raises ``ToolDefinitionError``.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any] = attrs.field(
        converter=attrs.Converter(tool_schema, takes_self=True)  # type: ignore[misc]
    )
    handler: ToolHandler = attrs.field(eq=False, repr=False)
    category: str = "code"
    timeout: float | None = None
    isolated: bool = False
    """Runs in a child process (so a timeout can kill it); set by ``@tool(isolated=True)``."""
    function: Callable[..., Any] | None = attrs.field(default=None, eq=False, repr=False)
    """The decorated Python function, when the spec was made by ``@tool``."""
    emits_events: bool = False
    """The tool streams events of its own while it runs (an agent tool's child run): the
    ``execute`` phase then forwards them through the run's ``events()`` as they come."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the decorated function directly (for tests and plain Python use)."""
        if self.function is None:
            raise TypeError(f"tool {self.name!r} was not made from a function; call .handler")
        return self.function(*args, **kwargs)

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
    output: str = attrs.field(converter=encodable)
    is_error: bool = False
    timed_out: bool = False
    duration: float = 0.0
    stdout: str | None = attrs.field(default=None, converter=attrs.converters.optional(encodable))
    stderr: str | None = attrs.field(default=None, converter=attrs.converters.optional(encodable))
    exit_code: int | None = None
    value: Any = attrs.field(default=None, eq=False, repr=False)
    error: str | None = None
    """Why the call failed: ``invalid_arguments``, ``unknown_tool``, ``timeout``, ``aborted``,
    ``tool_error`` or the name of the exception the tool raised."""
    interrupt: Any = attrs.field(default=None, eq=False, repr=False)
    """What the call asked through ``ctx.interrupt`` (JSON data), when it did."""


@runtime_checkable
class ToolSource(Protocol):
    """Tools that may change while a run goes on (an ``MCPServer`` is one).

    Given in ``HarnessParams(tool_sources=...)``, ``await source.tools()`` is read before
    each turn of a run; the tools it lists then are offered on that turn (besides
    ``params.tools``, and as ``params.prepare_tools`` chooses)."""

    name: str

    async def tools(self) -> tuple[ToolSpec, ...]: ...
