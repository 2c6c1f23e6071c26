"""``@tool``: a Python function becomes a :class:`ToolSpec`, and ``Toolset`` collects them.

How a call runs depends on the function:

- ``async def``: awaited on the run's event loop; a timeout or an abort cancels it.
- plain ``def``: run in a daemon worker thread. **A thread cannot be killed**: at a timeout
  the call is reported as timed out and the run goes on, but the function keeps running in
  the background until it returns. Use ``isolated=True`` for work that must really stop.
- ``isolated=True`` (plain module-level ``def`` only): run in a child Python process in its
  own process group, killed at the timeout. Arguments and the return value cross the
  process boundary (JSON in, pickle out); the function cannot take a ``ToolContext``.
  The child inherits this process's environment and ``sys.path`` (it is not a sandbox)
  and costs an interpreter start-up (tens to hundreds of milliseconds) per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from innerloop._errors import ToolDefinitionError
from innerloop.tools._isolated import call_isolated
from innerloop.tools._render import as_output
from innerloop.tools._spec import ToolContext, ToolOutput, ToolSpec

if TYPE_CHECKING:
    from innerloop.tools._schema import Signature

__all__ = ["Toolset", "tool"]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

T = TypeVar("T")


async def _in_daemon_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a fresh daemon thread: a call that never returns cannot hold up the
    loop's shutdown or the interpreter's exit (an executor thread would)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def target() -> None:
        try:
            value: Any = fn()
            ok = True
        except BaseException as exc:
            value, ok = exc, False
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(settle, ok, value)

    threading.Thread(target=target, name="innerloop-tool", daemon=True).start()
    return await future


def _make_handler(
    fn: Callable[..., Any], sig: Signature, isolated: bool
) -> Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutput]]:
    kwargs_for = sig.kwargs

    if isolated:

        async def isolated_handler(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            return await call_isolated(fn, args, ctx)

        return isolated_handler

    if inspect.iscoroutinefunction(fn):

        async def async_handler(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            return as_output(await fn(**kwargs_for(args, ctx)))

        return async_handler

    async def thread_handler(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        kwargs = kwargs_for(args, ctx)
        return as_output(await _in_daemon_thread(lambda: fn(**kwargs)))

    return thread_handler


def _define(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    category: str,
    timeout: float | None,
    isolated: bool,
) -> ToolSpec:
    if not callable(fn):
        raise ToolDefinitionError(f"@tool needs a function, got {type(fn).__name__}")
    tool_name = name or fn.__name__
    where = f"tool {tool_name!r}"
    if not _NAME.match(tool_name):
        raise ToolDefinitionError(
            f"{where}: names may hold only letters, digits, '_' and '-' (1-64 characters); "
            "pass name=..."
        )
    if not category or not isinstance(category, str):
        raise ToolDefinitionError(f"{where}: category must be a non-empty string")
    if timeout is not None and not timeout > 0:
        raise ToolDefinitionError(f"{where}: timeout must be > 0 seconds, got {timeout!r}")
    from innerloop.tools._schema import signature_of  # pydantic, with the first @tool

    sig = signature_of(fn, where)
    if isolated:
        if inspect.iscoroutinefunction(fn):
            raise ToolDefinitionError(
                f"{where}: isolated=True runs a plain function in a child process; "
                "make it a plain def (async tools are cancelled at their timeout already)"
            )
        if "<locals>" in fn.__qualname__ or fn.__module__ == "__main__":
            raise ToolDefinitionError(
                f"{where}: isolated=True needs a function importable by its module and name; "
                f"define {fn.__qualname__!r} at module level of an importable module"
            )
        if sig.context_param is not None:
            raise ToolDefinitionError(
                f"{where}: an isolated tool runs in another process and cannot take a "
                f"ToolContext (parameter {sig.context_param!r}); drop it or isolated=True"
            )
    text = description if description is not None else sig.description
    if not text:
        raise ToolDefinitionError(
            f"{where}: no description; write a docstring or pass description=..."
        )
    return ToolSpec(
        tool_name,
        text,
        sig.schema,
        _make_handler(fn, sig, isolated),
        category=category,
        timeout=timeout,
        isolated=isolated,
        function=fn,
    )


@overload
def tool(fn: Callable[..., Any], /) -> ToolSpec: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    category: str = "code",
    timeout: float | None = None,
    isolated: bool = False,
) -> Callable[[Callable[..., Any]], ToolSpec]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    category: str = "code",
    timeout: float | None = None,
    isolated: bool = False,
) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
    """Make a :class:`ToolSpec` from a function, as ``@tool`` or ``@tool(...)``.

    The JSON schema comes from the type hints, the description from the docstring (its
    ``Args:`` or ``:param:`` entries describe the parameters). A parameter annotated
    :class:`ToolContext` receives the call's context and is not part of the schema.
    ``category`` (file, shell, network, code) picks the default timeout; ``timeout``
    overrides it. An ``async def`` is awaited on the run's event loop (a timeout or an
    abort cancels it); a plain ``def`` runs in a worker thread, which cannot be killed
    (at a timeout the run goes on without it); with ``isolated=True`` (a plain
    module-level ``def``) it runs in a child process, killed at its timeout (the manual's
    Tools page says more).

    Raises :class:`ToolDefinitionError` here, at definition time, for an unsupported or
    missing annotation, a bad name, or a missing description.
    """

    def wrap(f: Callable[..., Any]) -> ToolSpec:
        return _define(
            f,
            name=name,
            description=description,
            category=category,
            timeout=timeout,
            isolated=isolated,
        )

    return wrap(fn) if fn is not None else wrap


class Toolset:
    """Named tools, in registration order; a name registers once. Pass it as
    ``HarnessParams(tools=toolset)``.

    ``toolset.tool`` is ``@tool`` that also registers the result.
    """

    def __init__(self, tools: Iterable[ToolSpec] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        for spec in tools:
            self.add(spec)

    def add(self, spec: ToolSpec) -> ToolSpec:
        if not isinstance(spec, ToolSpec):
            raise ToolDefinitionError(f"expected a ToolSpec, got {type(spec).__name__}")
        if spec.name in self._tools:
            raise ToolDefinitionError(
                f"tool {spec.name!r} is already registered in this toolset; give one of them "
                "another name (@tool(name=...))"
            )
        self._tools[spec.name] = spec
        return spec

    @overload
    def tool(self, fn: Callable[..., Any], /) -> ToolSpec: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        category: str = "code",
        timeout: float | None = None,
        isolated: bool = False,
    ) -> Callable[[Callable[..., Any]], ToolSpec]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        **options: Any,
    ) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
        """Like :func:`tool`, and register the spec here."""
        if fn is not None:
            return self.add(tool(fn, **options))
        return lambda f: self.add(tool(f, **options))

    def extend(self, specs: Iterable[ToolSpec]) -> None:
        for spec in specs:
            self.add(spec)

    def __getitem__(self, name: str) -> ToolSpec:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"Toolset({', '.join(self._tools)})"
