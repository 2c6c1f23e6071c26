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
import enum
import inspect
import json
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

import attrs

from innerloop._errors import ToolDefinitionError
from innerloop.tools._schema import convert, resolve_hints, schema_for
from innerloop.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = ["Toolset", "render_value", "tool"]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_ANY_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")

T = TypeVar("T")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (the text before the first section such as ``Args:`` or
    ``Returns:``) and per-parameter descriptions from Google style (``Args:`` with
    ``name: text``) or Sphinx style (``:param name: text``)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    first = next(
        (i for i, ln in enumerate(lines) if _ANY_SECTION.match(ln) or ln.startswith(":")),
        len(lines),
    )
    params: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines[first:]:
        stripped = line.strip()
        indented = line[:1] in (" ", "\t")
        sphinx = _SPHINX.match(stripped)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2)
        elif _ANY_SECTION.match(line):
            in_args, current = bool(_SECTION.match(line)), None
        elif in_args and indented and (m := _ARG_LINE.match(stripped)) and _depth(line) <= 4:
            current = m.group(1).lstrip("*")
            params[current] = m.group(3)
        elif current is not None and stripped and (indented or not in_args):
            params[current] += " " + stripped
    return "\n".join(lines[:first]).strip(), {k: v.strip() for k, v in params.items()}


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip())


def render_value(value: Any) -> str:
    """The text the model sees for a tool's return value: strings as they are, anything
    else as JSON (attrs instances as dicts, enums as their values)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def _json_default(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


def as_output(value: Any) -> ToolOutput:
    if isinstance(value, ToolOutput):
        return value
    return ToolOutput(render_value(value), value=value)


@attrs.frozen
class _Signature:
    schema: dict[str, Any]
    annotations: dict[str, Any]
    context_param: str | None


def _signature(fn: Callable[..., Any], where: str, descriptions: Mapping[str, str]) -> _Signature:
    hints = resolve_hints(fn, where)
    properties: dict[str, Any] = {}
    required: list[str] = []
    annotations: dict[str, Any] = {}
    context_param: str | None = None
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(
                f"{where}: parameter {name!r} is variadic ({stars}{name}); tools take named "
                "parameters only"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"{where}: parameter {name!r} is positional-only; tools are called with "
                "keyword arguments"
            )
        if name not in hints:
            raise ToolDefinitionError(
                f"{where}: parameter {name!r} has no type annotation; annotate it (e.g. "
                f"{name}: str)"
            )
        annotation = hints[name]
        if annotation is ToolContext:
            context_param = name
            continue
        schema = schema_for(annotation, f"{where}: parameter {name!r}")
        if name in descriptions and "description" not in schema:
            schema["description"] = descriptions[name]
        properties[name] = schema
        annotations[name] = annotation
        if param.default is param.empty:
            required.append(name)
    schema = {"type": "object", "properties": properties, "required": required}
    schema["additionalProperties"] = False
    return _Signature(schema, annotations, context_param)


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
    fn: Callable[..., Any], sig: _Signature, isolated: bool
) -> Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutput]]:
    def kwargs_for(args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        kwargs = {k: convert(sig.annotations[k], v) for k, v in args.items()}
        if sig.context_param is not None:
            kwargs[sig.context_param] = ctx
        return kwargs

    if isolated:
        from innerloop.tools._isolated import call_isolated

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
    summary, descriptions = parse_docstring(fn.__doc__)
    sig = _signature(fn, where, descriptions)
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
    text = description if description is not None else summary
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
    overrides it. See the module docstring for how sync, async and isolated tools run.

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

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        **options: Any,
    ) -> Any:
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
